"""A setting, declared once: its variable, its file key, what values it takes, its default and
its one-line doc. The processes read their settings through these declarations, and
docs/CONFIGURATION.md is generated from them (``liveviews.config.page``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from liveviews.errors import ConfigurationError

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

SECTIONS = {
    "every": "Every process",
    "store": "The embedded store",
    "pipeline": "The pipeline",
    "gateway": "The gateway",
    "cdc": "Change data capture",
    "demo": "The demo",
    "internal": "Set by Liveviews for its own processes",
}
"""The page's sections, in its order; also what ``liveviews config --process`` names."""


class Kind(Protocol[T_co]):
    """What values a setting takes: ``allowed`` says it to a person, ``parse`` reads one."""

    @property
    def allowed(self) -> str: ...

    def parse(self, raw: str, label: str) -> T_co: ...


def refuse(label: str, allowed: str, raw: str) -> ConfigurationError:
    return ConfigurationError(f"{label} must be {allowed}, not {raw!r}.")


@dataclass(frozen=True)
class Whole:
    minimum: int = 1
    maximum: int | None = None

    @property
    def allowed(self) -> str:
        if self.maximum is not None:
            return f"a whole number from {self.minimum} to {self.maximum}"
        return f"a whole number, at least {self.minimum}"

    def parse(self, raw: str, label: str) -> int:
        raw = raw.strip()
        if not (raw.isascii() and re.fullmatch(r"[+-]?\d+", raw)):  # int() reads "٣" as 3
            raise ConfigurationError(f"{label} must be a whole number, not {raw!r}.")
        value = int(raw)
        if value < self.minimum:
            raise ConfigurationError(f"{label} must be at least {self.minimum}, not {value}.")
        if self.maximum is not None and value > self.maximum:
            raise ConfigurationError(
                f"{label} must be from {self.minimum} to {self.maximum}, not {value}."
            )
        return value


@dataclass(frozen=True)
class Seconds:
    allowed: str = "a number of seconds, more than 0"

    def parse(self, raw: str, label: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise ConfigurationError(f"{label} must be a number of seconds, not {raw!r}.") from None
        if not 0 < value < float("inf"):
            raise ConfigurationError(f"{label} must be more than 0, not {raw.strip()}.")
        return value


@dataclass(frozen=True)
class Rate:
    allowed: str = "a number of events per second; 0 or off: no limit"

    def parse(self, raw: str, label: str) -> float:
        raw = raw.strip().lower()
        if raw == "off":
            return 0.0
        try:
            value = float(raw)
        except ValueError:
            raise ConfigurationError(
                f"{label} must be a number of events per second (0 or off for no limit), "
                f"not {raw!r}."
            ) from None
        if not 0 <= value < float("inf"):
            raise ConfigurationError(f"{label} must be 0 (no limit) or more, not {raw!r}.")
        return value


@dataclass(frozen=True)
class Switch:
    allowed: str = "on or off"

    def parse(self, raw: str, label: str) -> bool:
        value = raw.strip().lower()
        if value in ("1", "true", "yes", "on"):
            return True
        if value in ("0", "false", "no", "off"):
            return False
        raise ConfigurationError(f"{label} must be on or off (true or false), not {value!r}.")


@dataclass(frozen=True)
class Choice:
    values: tuple[str, ...]
    explain: str = ""
    """What each value does, said after the refusal."""
    quoted: bool = True

    @property
    def allowed(self) -> str:
        shown = [repr(v) if self.quoted else v for v in self.values]
        return ", ".join(shown[:-1]) + " or " + shown[-1] if len(shown) > 1 else shown[0]

    def parse(self, raw: str, label: str) -> str:
        value = raw.strip().lower()
        if value not in self.values:
            explain = f": {self.explain}" if self.explain else "."
            raise ConfigurationError(f"{label} must be {self.allowed}, not {value!r}{explain}")
        return value


@dataclass(frozen=True)
class Text:
    allowed: str = "text"
    pattern: str | None = None

    def parse(self, raw: str, label: str) -> str:
        if self.pattern is not None and re.fullmatch(self.pattern, raw) is None:
            raise refuse(label, self.allowed, raw)
        return raw


@dataclass(frozen=True)
class Folder:
    """A directory to serve; ``off`` serves nothing."""

    allowed: str = "a directory, or off"

    def parse(self, raw: str, label: str) -> Path | None:
        if raw.strip().lower() == "off":
            return None
        path = Path(raw.strip()).resolve()
        if not path.is_dir():
            raise ConfigurationError(f"{label} must name a directory; {raw!r} is not one.")
        return path


@dataclass(frozen=True)
class Custom(Generic[T]):
    """A value with a reader of its own (a retention, a size, an origin list)."""

    allowed: str
    reader: Callable[[str, str], T]

    def parse(self, raw: str, label: str) -> T:
        return self.reader(raw, label)


@dataclass(frozen=True)
class Setting(Generic[T]):
    name: str
    """The environment variable."""
    kind: Kind[T]
    default: T | None
    doc: str
    section: str
    shown: str | None = None
    """The default as the page says it, when ``str(default)`` would not say it well."""
    secret: bool = False
    """Shown redacted by ``liveviews config``."""
    family: bool = False
    """A prefix of variables (``LV_SPARK_CONF_<NAME>``), not one variable."""
    filed: bool = True
    """It may be set in a settings file (not the setting that names the file)."""
    key: str = field(default="")
    """Its key in a settings file ("" when it has none)."""

    def __post_init__(self) -> None:
        if self.section not in SECTIONS:
            raise ValueError(f"{self.name}: no section {self.section!r}")
        if not self.key and self.filed and self.section != "internal" and not self.family:
            object.__setattr__(self, "key", file_key(self.name))

    def raw(self, env: Mapping[str, str]) -> str | None:
        value = env.get(self.name)
        return None if value is None or value.strip() == "" else value

    def read(self, env: Mapping[str, str]) -> T | None:
        """The value ``env`` gives, or the default; a value the setting cannot take is refused
        with a sentence that names where it came from (the variable, or the file's key)."""
        raw = self.raw(env)
        if raw is None:
            return self.default
        return self.kind.parse(raw, label(env, self.name))

    def get(self, env: Mapping[str, str]) -> T:
        """``read`` for a setting whose default is a value."""
        value = self.read(env)
        if value is None:
            raise TypeError(f"{self.name} has no default; use read()")
        return value

    @property
    def default_shown(self) -> str:
        """The default as Markdown: a value in code, or the page's words for it."""
        if self.shown is not None:
            return self.shown
        if self.default is None:
            return ""
        if isinstance(self.default, bool):
            return "`on`" if self.default else "`off`"
        if isinstance(self.default, float) and self.default.is_integer():
            return f"`{int(self.default)}`"
        if isinstance(self.default, tuple):
            return ", ".join(f"`{v}`" for v in self.default) or "none"
        return f"`{self.default}`"


def file_key(name: str) -> str:
    """``LV_PUBLISH_RATE``: ``publish_rate``; ``REDIS_URL``: ``redis_url``."""
    return name.removeprefix("LV_").lower()


def label(env: Mapping[str, str], name: str) -> str:
    """How a refusal names a setting: its variable, or its key in the settings file it came
    from (``liveviews.config.layers.Environment``)."""
    named = getattr(env, "label", None)
    return str(named(name)) if callable(named) else name
