"""``liveviews dev APP``: the whole system for an application in its own folder, on the embedded
defaults, with the console ``make run`` shows.

It runs what ``make run`` runs from the repository's Procfile, each under ``liveviews.supervise``
(restarted when it fails, stopped for good on a setting that needs a person): the embedded
store unless ``REDIS_URL`` is set, for an application that declares tables the embedded
PostgreSQL (unless ``DATABASE_URL`` is set) and CDC, the pipeline, and the gateway serving the
folder's pages. Ctrl-C stops all of them; the data stays under ``LV_DATA_DIR`` (``data/``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import click

from liveviews.app import load_app
from liveviews.cli.base import SettingRefused, config_option
from liveviews.cli.processes import require_extra
from liveviews.config.catalog import APP_DIR, HOST, PORT, WAIT_FOR_STORE
from liveviews.config.layers import environment
from liveviews.errors import ConfigurationError

PAGES = "web"
"""The folder of an application's pages, beside its module, served at ``/`` when it exists."""


def _module(module: str) -> list[str]:
    return [sys.executable, "-m", module]


def processes(env: Mapping[str, str], tables: bool) -> dict[str, list[str]]:
    """Name -> the command of each process to run, in the order they start."""
    modules = {
        "store": "REDIS_URL" not in env and "liveviews.store.embedded",
        "postgres": tables and "DATABASE_URL" not in env and "liveviews.cdc.embedded",
        "cdc": tables and "liveviews.cdc",
        "pipeline": "liveviews.pipeline",
        "web": "liveviews.gateway",
    }
    return {
        name: [*_module("liveviews.supervise"), name, "--", *_module(module)]
        for name, module in modules.items()
        if module
    }


@click.command("dev")
@config_option
@click.argument("app", metavar="MODULE:APP")
@click.option(
    "--pages",
    type=click.Path(file_okay=False, path_type=Path),
    help=f"The folder of pages to serve at / (default: {PAGES}/ in the current folder, if any).",
)
@click.option("--port", type=click.IntRange(0, 65535), help="The gateway's port (LV_PORT, 8000).")
def dev(app: str, pages: Path | None, port: int | None) -> None:
    """Run the whole system for the application MODULE:APP, imported from the current folder
    (or LV_APP_DIR): the embedded store, the pipeline on Spark in local mode, the gateway, and
    for an application that declares tables the embedded PostgreSQL and CDC. Ctrl-C stops it.
    """
    require_extra("pipeline")
    env = dict(os.environ)
    settings = environment()
    folder = Path(APP_DIR.read(settings) or os.getcwd()).resolve()
    env["LV_APP"] = app
    env["LV_APP_DIR"] = str(folder)
    try:
        declared = load_app(app)
    except ConfigurationError as exc:
        raise SettingRefused(exc.message, code=exc.code) from None
    if pages is not None and not pages.is_dir():
        raise SettingRefused(f"--pages {str(pages)!r} is not a folder.", code="invalid_setting")
    shown = pages if pages is not None else folder / PAGES
    env["LV_STATIC_DIR"] = str(shown.resolve()) if shown.is_dir() else "off"
    if port is not None:
        env["LV_PORT"] = str(port)
    # A store that the supervisor starts beside the others takes a moment to answer.
    if WAIT_FOR_STORE.raw(settings) is None:
        env[WAIT_FOR_STORE.name] = "30"
    if declared.tables:
        require_extra("cdc")
    # Java and the application checked, and the JVM's class archive built once, before the
    # processes start (as make run does): a first start would otherwise build it in the way.
    prepared = subprocess.run([*_module("liveviews.pipeline"), "--prepare"], env=env, check=False)
    if prepared.returncode != 0:
        raise SystemExit(prepared.returncode)
    from honcho.manager import Manager
    from honcho.printer import Printer

    manager = Manager(Printer(sys.stdout))
    for name, argv in processes(settings, bool(declared.tables)).items():
        manager.add_process(name, shlex.join(argv), env=env, cwd=str(folder))
    host, shown_port = HOST.get(settings), port if port is not None else PORT.get(settings)
    click.echo(f"Liveviews for {app}: http://{host}:{shown_port}/", err=True)
    manager.loop()
    raise SystemExit(manager.returncode or 0)
