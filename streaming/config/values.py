"""The readers of the values that a few settings take beyond numbers, switches and choices
(``liveviews.config.declare``): sizes, a share of memory, a niceness, a list of origins."""

from __future__ import annotations

import re

from liveviews.errors import ConfigurationError
from liveviews.log.retention import Retention

MAX_NICENESS = 19
"""The highest niceness Linux gives a process."""
SIZE_RE = re.compile(r"([0-9]+)(%|b|kb|mb|gb|tb)?")
SIZE_UNITS = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3, "tb": 1024**4}


def size_bytes(spec: str) -> int:
    """Bytes of a size that ``SIZE_RE`` matches without ``%`` (``512mb``, ``1000000``)."""
    size = SIZE_RE.fullmatch(spec)
    assert size is not None and size[2] != "%", spec
    return int(size[1]) * SIZE_UNITS[size[2] or "b"]


def retention(raw: str, label: str) -> Retention | None:
    return Retention.parse(raw, label)


def share_or_size(raw: str, label: str) -> str:
    """The spec as written (``25%``, ``2gb``, ``off``): a share is of the memory of the machine
    it runs on, so ``liveviews.store.embedded`` turns it into bytes there."""
    value = raw.strip().lower()
    size = SIZE_RE.fullmatch(value)
    if value != "off" and (size is None or (size[2] == "%" and not 1 <= int(size[1]) <= 100)):
        raise ConfigurationError(
            f"{label} must be a share of the machine's memory (25%), a size (512mb, 2gb) or off, "
            f"not {raw.strip()!r}."
        )
    return value


def size_or_off(raw: str, label: str) -> int:
    """Bytes, from a size (``64mb``, ``1gb``, bytes) or ``off`` (0)."""
    value = raw.strip().lower()
    if value == "off":
        return 0
    size = SIZE_RE.fullmatch(value)
    if size is None or size[2] == "%":
        raise ConfigurationError(f"{label} must be a size (64mb, 1gb) or off, not {raw.strip()!r}.")
    return size_bytes(value)


def niceness(raw: str, label: str) -> str:
    value = raw.strip().lower()
    if value == "idle" or (value.isascii() and value.isdigit() and int(value) <= MAX_NICENESS):
        return value
    raise ConfigurationError(
        f"{label}={raw.strip()}: write a niceness from 0 (build in the pipeline process) to "
        f"{MAX_NICENESS} (the lowest CPU priority), or idle (only the CPU no other process wants)."
    )


def origins(raw: str, label: str) -> tuple[str, ...]:
    return tuple(o.strip() for o in raw.split(",") if o.strip())


PROVIDER_ALGORITHMS = ("RS256", "ES256", "EdDSA")
"""The signatures an identity provider's tokens may carry: public keys only."""


def algorithms(raw: str, label: str) -> tuple[str, ...]:
    """A comma-separated list of ``PROVIDER_ALGORITHMS``, in their own spelling."""
    chosen = tuple(a.strip() for a in raw.split(",") if a.strip())
    by_lower = {a.lower(): a for a in PROVIDER_ALGORITHMS}
    unknown = [a for a in chosen if a.lower() not in by_lower]
    if unknown or not chosen:
        raise ConfigurationError(
            f"{label} must list one or more of {', '.join(PROVIDER_ALGORITHMS)}, not "
            f"{raw.strip()!r} (HS256 is taken only with LV_JWT_SECRET)."
        )
    return tuple(dict.fromkeys(by_lower[a.lower()] for a in chosen))
