"""Where each setting comes from: a default, the settings file, or the environment.

The settings file is TOML, named by ``--config`` or ``LV_CONFIG``; its keys are the variables'
names without ``LV_``, in lower case (``port = 8001``, ``redis_url = "redis://..."``), and a
``[spark_conf]`` table sets Spark's own settings by their names. The environment overrides the
file. Every process reads the same layers, so ``liveviews config`` shows what each one sees.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from liveviews.config.catalog import CONFIG, SPARK_CONF, by_key, by_name
from liveviews.errors import ConfigurationError

SPARK_CONF_KEY = "spark_conf"
SPARK_CONF_PREFIX = SPARK_CONF.name.removesuffix("<NAME>")


class Environment(dict[str, str]):
    """The variables a process reads, the file's values under the environment's, each with
    where it came from."""

    def __init__(self, values: Mapping[str, str], origins: Mapping[str, str], file: Path | None):
        super().__init__(values)
        self.origins = dict(origins)
        self.file = file

    def origin(self, name: str) -> str:
        """``environment``, ``file`` or ``default`` (set nowhere)."""
        return self.origins.get(name, "environment" if name in self else "default")

    def label(self, name: str) -> str:
        if self.origin(name) == "file" and self.file is not None:
            return f"{self._keys.get(name, name)} in {self.file}"
        return name

    @property
    def _keys(self) -> dict[str, str]:
        keys = {n: s.key for n, s in by_name().items() if s.key}
        for name in self:
            if name.startswith(SPARK_CONF_PREFIX):
                keys[name] = f"[{SPARK_CONF_KEY}] {name[len(SPARK_CONF_PREFIX) :]}"
        return keys


def environment(env: Mapping[str, str] | None = None) -> Environment:
    """``env`` (the process's environment by default) over the settings file it names."""
    if isinstance(env, Environment):
        return env
    base = dict(os.environ if env is None else env)
    named = CONFIG.raw(base)
    if named is None:
        return Environment(base, {}, None)
    path = Path(named).expanduser().resolve()
    from_file = read_file(path)
    origins = {name: "file" for name in from_file if name not in base}
    return Environment({**from_file, **base}, origins, path)


def read_file(path: Path) -> dict[str, str]:
    """The variables a settings file sets, as the environment would spell them."""
    try:
        document = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigurationError(
            f"LV_CONFIG (or --config) names {path}, which does not exist: write the "
            "settings file there, or name another."
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigurationError(f"the settings file {path} cannot be read: {e}.") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigurationError(f"the settings file {path} is not valid TOML: {e}.") from None
    settings = by_key()
    values: dict[str, str] = {}
    for key, value in document.items():
        if key == SPARK_CONF_KEY:
            values.update(_spark_conf(path, value))
            continue
        setting = settings.get(key)
        if setting is None:
            close = difflib.get_close_matches(key, [*settings, SPARK_CONF_KEY], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigurationError(
                f"the settings file {path} sets {key!r}, which is no setting{hint}: its keys "
                "are the variables of docs/CONFIGURATION.md without LV_, in lower case."
            )
        values[setting.name] = _text(path, key, value, setting.kind.allowed)
    return values


def _spark_conf(path: Path, table: Any) -> dict[str, str]:
    if not isinstance(table, dict):
        raise ConfigurationError(
            f"{SPARK_CONF_KEY} in {path} must be a table of Spark settings "
            f'([{SPARK_CONF_KEY}] then "spark.executor.memory" = "4g"), not {table!r}.'
        )
    return {
        SPARK_CONF_PREFIX + name.replace(".", "__"): _text(path, name, value, "a Spark setting")
        for name, value in table.items()
    }


def _text(path: Path, key: str, value: Any, allowed: str) -> str:
    """A file's value as the environment would spell it, so that both go through one reader."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int | float | str):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    raise ConfigurationError(f"{key} in {path} must be {allowed}, not {value!r}.")
