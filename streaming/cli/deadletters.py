"""``liveviews deadletters list | show | replay``: what the pipelines set aside
(``liveviews.log.deadletters``), in tables or, with ``--json``, as JSON documents."""

from __future__ import annotations

from dataclasses import asdict

import click
import orjson

from liveviews.cli import render
from liveviews.cli.base import Env, Failure, emit, json_option, pass_env
from liveviews.log import deadletters
from liveviews.log.deadletters import DeadLetter
from liveviews.log.kafka import entries


@click.group(name="deadletters")
def group() -> None:
    """The log entries the pipelines set aside instead of stopping on them."""


def _found(env: Env, pipeline: str, offset: str) -> DeadLetter:
    found = deadletters.show(env.client, pipeline, offset)
    if found is None:
        raise Failure(f"pipeline {pipeline!r} has no dead letter at {offset}; liveviews "
                      "deadletters list shows those it has.", code="not_found")  # fmt: skip
    return found


@group.command(name="list")
@click.option("--pipeline", help="Only this pipeline's (with its version: entities@v2).")
@click.option("--count", type=click.IntRange(min=1), default=50, show_default=True,
              help="How many of the newest.")  # fmt: skip
@json_option
@pass_env
def list_(env: Env, pipeline: str | None, count: int, as_json: bool) -> None:
    """The newest dead letters, oldest first."""
    letters = deadletters.listed(env.client, pipeline, count)
    if as_json:
        emit([asdict(d) for d in letters])
        return
    t = render.table("recorded", "pipeline", "offset", "stage", "error", "replayed as",
                     free="error")  # fmt: skip
    for d in letters:
        t.add_row(render.when(d.recorded_ms / 1000), d.pipeline, d.offset, d.stage,
                  d.error[:90], d.replayed_as or "")  # fmt: skip
    render.section(render.console(), f"Dead letters: {len(letters)}", t)


@group.command()
@click.argument("pipeline")
@click.argument("offset")
@json_option
@pass_env
def show(env: Env, pipeline: str, offset: str, as_json: bool) -> None:
    """One dead letter (OFFSET as list shows it), with its event and traceback."""
    d = _found(env, pipeline, offset)
    if as_json:
        emit(asdict(d))
        return
    out = render.console()
    t = render.table("", "")
    t.show_header = False
    for name, value in (
        ("pipeline", d.pipeline), ("offset", d.offset), ("stage", d.stage),
        ("batch", "-" if d.batch is None else str(d.batch)),
        ("recorded", render.when(d.recorded_ms / 1000)), ("error", d.error),
        ("replayed as", d.replayed_as or "-"),
    ):  # fmt: skip
        t.add_row(name, value)
    out.print(t)
    out.print()
    out.print(orjson.dumps(d.event, option=orjson.OPT_INDENT_2).decode(), markup=False)
    if d.traceback:
        out.print()
        out.print(d.traceback, markup=False)


@group.command()
@click.argument("pipeline")
@click.argument("offset")
@json_option
@pass_env
def replay(env: Env, pipeline: str, offset: str, as_json: bool) -> None:
    """Append the dead letter's event to the log again, once the view is fixed."""
    _found(env, pipeline, offset)
    settings = env.settings
    read: deadletters.Reader | None = None
    append: deadletters.Appender | None = None
    if settings.kafka:
        bootstrap, topic = settings.kafka, settings.kafka_topic

        def read(at: str) -> dict[bytes, bytes] | None:
            partition, _, position = at.partition(":")
            return entries.read_entry(bootstrap, topic, int(partition), position)

        def append(partition: int, fields: dict[bytes, bytes]) -> str:
            return entries.append_entry(bootstrap, topic, partition, fields)

    try:
        new = deadletters.replay(env.client, pipeline, offset, read, append)
    except KeyError as exc:  # the log no longer holds the entry
        raise Failure(str(exc.args[0]), code="not_found") from None
    if as_json:
        emit({"replayed": offset, "as": new})
    else:
        click.echo(f"appended {offset} again as {new}")
