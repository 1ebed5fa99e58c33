"""How much of each log partition an append keeps (``LV_LOG_RETENTION``), if not all."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from liveviews.errors import ConfigurationError

AGE_RE = re.compile(r"([0-9]+)([smhd])")
AGE_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True)
class Retention:
    """``LV_LOG_RETENTION``: how much of each log partition an append keeps, if not all.

    Either the newest ``entries`` of each partition, or the events appended in the last
    ``age_ms`` (by their entry id, the time the store took them, not their event time). The
    store trims whole nodes of a stream (``MAXLEN ~`` / ``MINID ~``), so a partition keeps a
    little more than asked, never less. Views are computed from the log: a view rebuilt from a
    trimmed log (a new pipeline, a removed checkpoint) sees only the events that remain.
    """

    entries: int | None = None
    age_ms: int | None = None

    @classmethod
    def parse(cls, raw: str | None, label: str = "LV_LOG_RETENTION") -> Retention | None:
        value = (raw or "").strip().lower()
        if value in ("", "off"):
            return None
        if value.isascii() and value.isdigit() and int(value) > 0:  # not "²", which int() refuses
            return cls(entries=int(value))
        age = AGE_RE.fullmatch(value)
        if age and int(age[1]) > 0:
            return cls(age_ms=int(age[1]) * AGE_UNITS_MS[age[2]])
        raise ConfigurationError(
            f"{label} must be off, a number of events to keep per log partition "
            f"(1000000), or an age to keep them for (30d, 12h, 90m, 3600s), not {raw!r}."
        )

    def xadd_options(self, now: int) -> dict[str, Any]:
        if self.entries is not None:
            return {"maxlen": self.entries, "approximate": True}
        assert self.age_ms is not None
        return {"minid": str(max(0, now - self.age_ms)), "approximate": True}
