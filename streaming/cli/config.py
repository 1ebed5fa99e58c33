"""``liveviews config``: the effective settings of the processes, where each came from (its
default, the settings file, the environment), secrets redacted; and whether each process would
start with them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from rich.markup import escape

from liveviews.cli.base import SettingRefused, config_option, emit, json_option
from liveviews.cli.render import console, section, table
from liveviews.config.catalog import declared
from liveviews.config.declare import SECTIONS, Setting
from liveviews.config.layers import SPARK_CONF_PREFIX, Environment, environment
from liveviews.errors import ConfigurationError
from liveviews.store.password import redacted

SHOWN = tuple(s for s in SECTIONS if s != "internal")
REDACTED = "[redacted]"


def _shown_value(setting: Setting[Any], raw: str) -> str:
    if not setting.secret:
        return raw
    return redacted(raw) if "://" in raw else REDACTED


def _source(env: Environment, name: str) -> str:
    origin = env.origin(name)
    return f"file {env.file}" if origin == "file" else origin


def _rows(env: Environment, sections: tuple[str, ...]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for setting in declared():
        if setting.section not in sections:
            continue
        if setting.family:
            for name in sorted(n for n in env if n.startswith(SPARK_CONF_PREFIX)):
                rows.append({"section": setting.section, "name": name, "value": env[name],
                             "source": _source(env, name), "error": None})  # fmt: skip
            continue
        raw = setting.raw(env)
        error = None
        try:
            setting.read(env)
        except ConfigurationError as exc:
            error = exc.message
        rows.append({
            "section": setting.section,
            "name": setting.name,
            "value": setting.default_shown.replace("`", "")
            if raw is None
            else _shown_value(setting, raw),
            "source": "default" if raw is None else _source(env, setting.name),
            "error": error,
        })  # fmt: skip
    return rows


def _starts(env: Environment, sections: tuple[str, ...]) -> list[str]:
    """What stops a process's start beyond a single setting (two settings that disagree)."""
    checks: dict[str, Callable[[Environment], object]] = {}
    if {"every", "pipeline", "store"} & set(sections):
        from liveviews.pipeline.settings import Settings

        checks["pipeline"] = Settings.from_env
    if "gateway" in sections:
        from liveviews.gateway.settings import GatewaySettings

        checks["gateway"] = GatewaySettings.from_env
    if "cdc" in sections:
        from liveviews.cdc.settings import CdcSettings

        checks["cdc"] = CdcSettings.from_env
    refused = []
    for check in checks.values():
        try:
            check(env)
        except ConfigurationError as exc:
            refused.append(exc.message)
    return refused


@click.command("config")
@config_option
@click.option(
    "--process",
    "process",
    type=click.Choice([*SHOWN, "all"]),
    default="all",
    show_default=True,
    help="Only the settings of this part (every: those all processes share).",
)
@json_option
def config(process: str, as_json: bool) -> None:
    """Show each setting's effective value and where it came from: its default, the settings
    file (--config or LV_CONFIG), or the environment, which overrides the file. Secrets show
    as [redacted]. Exits 2 when a value would stop a process's start, saying which and why."""
    env = environment()
    sections = SHOWN if process == "all" else ("every", process)
    rows = _rows(env, sections)
    errors = list(dict.fromkeys([r["error"] for r in rows if r["error"]] + _starts(env, sections)))
    if as_json:
        emit({"file": str(env.file) if env.file else None, "settings": rows, "errors": errors})
        if errors:
            raise SystemExit(SettingRefused.exit_code)
        return
    out = console()
    if env.file is not None:
        out.print(f"settings file: {env.file}", markup=False)
        out.print()
    for name in sections:
        shown = [r for r in rows if r["section"] == name]
        if shown:
            t = table("setting", "value", "from", free="value")
            for r in shown:
                t.add_row(r["name"], escape(r["value"] or "-"), escape(r["source"]))
            section(out, SECTIONS[name], t)
    if errors:
        raise SettingRefused(" ".join(errors), code="invalid_setting")
