"""``liveviews``: the command line.

``dev`` runs the whole system for an application (``liveviews.cli.dev``); ``serve``,
``pipeline``, ``cdc`` and ``store`` run one process each (``liveviews.cli.processes``);
``config`` shows the effective settings and where each came from; ``status`` (pipelines,
versions, lag, gateways), ``rebuild`` / ``switch`` / ``abort`` (pipeline versions), ``inspect``
(a key's rows, deltas, and rows as of an offset), ``tail`` (the log as it is appended) and
``deadletters``. Each command is a module of this package; docs/CLI.md says what each prints and
its exit codes.
"""

from __future__ import annotations

import click

from liveviews.cli import config, deadletters, dev, inspection, processes, rebuild, status, tail
from liveviews.cli.base import Env, Group, config_option

__all__ = ["cli", "main"]


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="liveviews", prog_name="liveviews")
@config_option
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Run and operate Liveviews: the store is REDIS_URL's (or the embedded one), the
    application LV_APP's. Exit codes: 0 done, 1 not found or not done, 2 usage, 3 store
    unreachable."""
    ctx.ensure_object(Env)


cli.add_command(dev.dev)
cli.add_command(processes.serve)
cli.add_command(processes.pipeline)
cli.add_command(processes.cdc)
cli.add_command(processes.store)
cli.add_command(config.config)
cli.add_command(status.status)
cli.add_command(rebuild.rebuild)
cli.add_command(rebuild.switch)
cli.add_command(rebuild.abort)
cli.add_command(inspection.inspect_key)
cli.add_command(tail.tail)
cli.add_command(deadletters.group)


def main(argv: list[str] | None = None) -> int:
    """The ``liveviews`` console script; returns the exit code."""
    try:
        cli.main(args=argv, prog_name="liveviews", standalone_mode=True)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 1
    return 0
