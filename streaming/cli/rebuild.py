"""``liveviews rebuild | switch | abort PIPELINE``: ask the pipeline process for a new version,
for readers to move to it now, or for it to be dropped; then wait until it is done.

A request is recorded in the registry (``liveviews.pipeline.versions.ask``) and carried out by the
pipeline process within about a second; these commands only watch the registry change.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from liveviews.cli import render
from liveviews.cli.base import Env, Failure, emit, json_option, known_pipeline, pass_env, stderr
from liveviews.cli.status import PROGRESS_STREAM, QUERY_PREFIX, log_sizes
from liveviews.errors import ConfigurationError
from liveviews.pipeline import versions
from liveviews.pipeline.settings import Settings
from liveviews.pipeline.versions import Version, Versions
from liveviews.store.client import Client

POLL_SECONDS = 0.25
TAKE_SECONDS = 30.0
"""How long the pipeline process may take to pick a request up before we say it is not running."""


def _ask(env: Env, pipeline: str, kind: str) -> Versions:
    known_pipeline(env, pipeline)
    try:
        return versions.ask(env.client, pipeline, kind)
    except ConfigurationError as exc:  # asked for something that makes no sense now
        raise Failure(exc.message, code="refused") from None


def _registry(client: Client, pipeline: str) -> Versions:
    return versions.read(client, pipeline) or versions.Versions(pipeline)


def wait_until(
    client: Client,
    pipeline: str,
    done: Callable[[Versions], str | None],
    timeout: float | None,
    tick: Callable[[Versions], None] = lambda _: None,
) -> tuple[str, Versions]:
    """Poll the registry until ``done`` names an outcome; ``("timeout", ...)`` after
    ``timeout`` seconds; ``("not_taken", ...)`` when the request is still waiting for the
    pipeline process after ``TAKE_SECONDS``."""
    start = time.monotonic()
    while True:
        reg = _registry(client, pipeline)
        outcome = done(reg)
        if outcome is not None:
            return outcome, reg
        tick(reg)
        waited = time.monotonic() - start
        if reg.request is not None and waited > TAKE_SECONDS:
            return "not_taken", reg
        if timeout is not None and waited > timeout:
            return "timeout", reg
        time.sleep(POLL_SECONDS)


def _not_taken(pipeline: str, kind: str) -> Failure:
    return Failure(
        f"the pipeline process has not taken the {kind} request for {pipeline!r} in "
        f"{TAKE_SECONDS:.0f} s: start it (python -m liveviews.pipeline, or make run); the "
        "request stays recorded until it does.",
        code="not_taken",
    )


def _timeout(what: str, timeout: float | None) -> Failure:
    """``what``: what did not happen, as the start of a sentence."""
    return Failure(
        f"{what} within {timeout:g} s; liveviews status shows where it is, or wait longer "
        "with --timeout.",
        code="timeout",
    )


# -- rebuild ----------------------------------------------------------------------------------


@dataclass
class Processed:
    """The events a version's query has read, summed from ``lv:pipeline:progress``."""

    query: str
    after: str
    events: int = 0

    def read(self, client: Client) -> int:
        while True:
            entries: Any = client.xrange(PROGRESS_STREAM, self.after, "+", count=1000)
            for entry_id, fields in entries:
                if fields.get(b"query", b"").decode() == self.query:
                    self.events += int(fields.get(b"events", 0))
                self.after = f"({entry_id.decode()}"
            if len(entries) < 1000:
                return self.events


def log_size(client: Client, settings: Settings) -> int:
    """The events in the log (on Kafka, its positions: a transaction's marker takes one)."""
    return sum(log_sizes(client, settings)[0])


class RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} events/s" if speed else "- events/s")


class CountColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        return Text(f"{int(task.completed):,} / {int(task.total or 0):,} events")


def _rebuilt(version: str) -> Callable[[Versions], str | None]:
    def done(reg: Versions) -> str | None:
        if reg.active is not None and reg.active.version == version:
            return "switched"
        if reg.next is None or reg.next.version != version:
            return "aborted"
        return None

    return done


def _follow(env: Env, pipeline: str, building: Version, timeout: float | None) -> dict[str, Any]:
    """Watch a version being built until it serves readers (or is dropped)."""
    client = env.client
    processed = Processed(
        QUERY_PREFIX + building.qualified(pipeline), f"{int(building.started * 1000)}-0"
    )
    began = time.monotonic()
    progress = Progress(
        TextColumn(f"{pipeline} {building.version}"), BarColumn(), CountColumn(), RateColumn(),
        TimeRemainingColumn(), console=render.console(stderr=True), disable=env.json,
    )  # fmt: skip
    with progress:
        task = progress.add_task("rebuild", total=log_size(client, env.settings))

        def tick(_: Versions) -> None:
            size = log_size(client, env.settings)
            progress.update(task, total=size, completed=min(processed.read(client), size))

        outcome, reg = wait_until(client, pipeline, _rebuilt(building.version), timeout, tick)
        tick(reg)
    doc = {"pipeline": pipeline, "version": building.version, "outcome": outcome,
           "processed": processed.events, "size": log_size(client, env.settings),
           "seconds": round(time.monotonic() - began, 3)}  # fmt: skip
    if outcome == "aborted":
        raise Failure(
            f"version {building.version} of {pipeline!r} was aborted before it served readers; "
            f"readers keep version {reg.active.version if reg.active else '-'}.",
            code="aborted", **doc,
        )  # fmt: skip
    if outcome == "timeout":
        raise _timeout(f"version {building.version} of {pipeline!r} did not serve readers",
                       timeout)  # fmt: skip
    if outcome == "not_taken":
        kind = reg.request.get("kind", "") if reg.request else ""
        raise _not_taken(pipeline, kind)
    return doc


@click.command()
@click.argument("pipeline")
@click.option("--no-wait", is_flag=True, help="Ask, and return without waiting.")
@click.option("--timeout", type=click.FloatRange(min=0), default=None,
              help="Stop waiting after this many seconds (default: until it serves "
                   "readers).")  # fmt: skip
@json_option
@pass_env
def rebuild(env: Env, pipeline: str, no_wait: bool, timeout: float | None, as_json: bool) -> None:
    """Build a new version of PIPELINE from the whole log beside the serving one; show its
    progress until it serves readers. Exit 1 if it is aborted."""
    known_pipeline(env, pipeline)
    before = _registry(env.client, pipeline)
    if before.next is not None:
        stderr(f"version {before.next.version} of {pipeline!r} is already being built; "
               "following it (liveviews abort, then rebuild, starts another).")  # fmt: skip
        building: Version | None = before.next
    else:
        _ask(env, pipeline, "rebuild")
        building = None if no_wait else _started(env, pipeline, before)
    if no_wait:
        doc = {"pipeline": pipeline, "asked": building is None,
               "version": building.version if building else None}  # fmt: skip
        if as_json:
            emit(doc)
        elif building is None:
            click.echo(f"asked for a rebuild of {pipeline!r}; liveviews status shows its progress.")
        return
    assert building is not None
    doc = _follow(env, pipeline, building, timeout)
    if as_json:
        emit(doc)
    else:
        click.echo(f"version {building.version} of {pipeline!r} serves readers.")


def _started(env: Env, pipeline: str, before: Versions) -> Version:
    """The version the pipeline process began for a rebuild request."""
    was = before.active.version if before.active else None

    def started(reg: Versions) -> str | None:
        if reg.next is not None:
            return "started"
        # A small log is caught up at once: the new version may already serve readers.
        return "started" if reg.active and reg.active.version != was else None

    outcome, reg = wait_until(env.client, pipeline, started, TAKE_SECONDS)
    found = reg.next or reg.active
    if outcome != "started" or found is None:
        raise _not_taken(pipeline, "rebuild")
    return found


# -- switch and abort -------------------------------------------------------------------------


@click.command()
@click.argument("pipeline")
@click.option("--timeout", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Seconds to wait for readers to move.")  # fmt: skip
@json_option
@pass_env
def switch(env: Env, pipeline: str, timeout: float, as_json: bool) -> None:
    """Move PIPELINE's readers to the version being built now, caught up or not."""
    reg = _ask(env, pipeline, "switch")
    assert reg.next is not None and reg.active is not None
    target, was = reg.next.version, reg.active.version

    def switched(r: Versions) -> str | None:
        if r.active is not None and r.active.version == target:
            return "switched"
        return "gone" if r.next is None or r.next.version != target else None

    outcome, _ = wait_until(env.client, pipeline, switched, timeout)
    if outcome == "not_taken":
        raise _not_taken(pipeline, "switch")
    if outcome == "timeout":
        raise _timeout(f"readers of {pipeline!r} did not move to version {target}", timeout)
    if outcome == "gone":
        raise Failure(f"version {target} of {pipeline!r} was dropped before readers moved to "
                      f"it; readers keep version {was}.", code="aborted")  # fmt: skip
    if as_json:
        emit({"pipeline": pipeline, "active": target, "retired": was})
    else:
        click.echo(f"readers of {pipeline!r} moved from version {was} to version {target}.")


@click.command()
@click.argument("pipeline")
@click.option("--timeout", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Seconds to wait for the version to be dropped.")  # fmt: skip
@json_option
@pass_env
def abort(env: Env, pipeline: str, timeout: float, as_json: bool) -> None:
    """Drop the version of PIPELINE being built; readers keep the serving one."""
    reg = _ask(env, pipeline, "abort")
    assert reg.next is not None
    target = reg.next.version

    def dropped(r: Versions) -> str | None:
        return "aborted" if r.next is None or r.next.version != target else None

    outcome, after = wait_until(env.client, pipeline, dropped, timeout)
    if outcome == "not_taken":
        raise _not_taken(pipeline, "abort")
    if outcome == "timeout":
        raise _timeout(f"version {target} of {pipeline!r} was not dropped", timeout)
    if after.active is not None and after.active.version == target:
        raise Failure(f"version {target} of {pipeline!r} began serving readers before it could "
                      "be dropped.", code="switched")  # fmt: skip
    serving = after.active.version if after.active else None
    if as_json:
        emit({"pipeline": pipeline, "aborted": target, "active": serving})
    else:
        click.echo(f"version {target} of {pipeline!r} dropped; readers keep version {serving}.")
