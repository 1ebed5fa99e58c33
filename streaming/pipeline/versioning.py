"""Which versions of each pipeline run, and the rebuild of a new one beside the serving one.

At start, each pipeline's version (``liveviews.pipeline.code.derive``) is compared with the one
serving readers. The same: it runs. Another: the new version starts from offset 0 of the log
with a checkpoint and namespace of its own (on a local master in a nicer process of its own,
``liveviews.pipeline.builder``, which hands it back here once it has caught up), while the serving
version keeps running from its stored code, so readers keep a view that keeps up. ``tick``,
called by the driver's loop, then switches readers over once the new version is within
``LV_REBUILD_SWITCH_DISTANCE`` events of the serving one, stops the replaced version, and
deletes its state after ``LV_REBUILD_GRACE_SECONDS``. It also carries out what an operator
asked for with ``liveviews rebuild | switch | abort``. A kill at any point resumes: the registry
in the store says what was being built, and the switch is one transaction.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from liveviews.app import App, load_app
from liveviews.changes.topic import (
    FRONTIER_LAG_KEY,
    VIEWS_FRONTIER,
    read_frontier,
)
from liveviews.errors import ConfigurationError
from liveviews.log.eventlog import check_layout, log_heads
from liveviews.log.events import entry_id_tuple, log_stream
from liveviews.pipeline import code as pipelinecode
from liveviews.pipeline import versions
from liveviews.pipeline.builder import Builder, builds_apart, rebuild_cap
from liveviews.pipeline.progress import record_progress
from liveviews.pipeline.queries import checkpoint_of, sink_client, start_pipeline
from liveviews.pipeline.retired import delete_state
from liveviews.pipeline.session import QUERY_NAME
from liveviews.pipeline.settings import Settings
from liveviews.pipeline.stored import unpack
from liveviews.pipeline.versions import Version, Versions
from liveviews.store.client import Client, is_cluster

log = logging.getLogger("liveviews.versions")

REPORT_SECONDS = 10.0


@dataclass
class Running:
    """One pipeline version's query and the application declaration it runs."""

    pipeline: str
    version: Version
    app: App
    query: StreamingQuery
    max_events: int | None = None
    """The cap on its micro-batches while it was being built, kept for its restarts."""
    building: bool = False
    """Started while being built: its short store calls are kept for its restarts too."""


class Versioning:
    """The pipeline versions one driver runs (``queries``, by qualified name)."""

    def __init__(self, spark: SparkSession, app: App, settings: Settings, client: Client) -> None:
        self.spark = spark
        self.app = app
        self.settings = settings
        self.client = client
        self.running: dict[str, Running] = {}
        self.code = {p: pipelinecode.derive(app, p) for p in app.pipelines}
        self._packed: dict[str, bytes | None] = {}
        self._deleting: set[str] = set()
        self._reported = 0.0
        self.builders: dict[str, Builder] = {}
        """The versions being built in a process of their own, by pipeline."""

    @property
    def queries(self) -> dict[str, StreamingQuery]:
        return {name: r.query for name, r in self.running.items()}

    # -- start ---------------------------------------------------------------------------------

    def start(self) -> dict[str, StreamingQuery]:
        for p in self.app.pipelines:
            self._start_pipeline(p)
        return self.queries

    def _start_pipeline(self, p: str) -> None:
        code = self.code[p]
        reg = versions.register(self.client, p, code, self._pack(p))
        assert reg.active is not None
        if reg.next is None and is_cluster(self.client):
            # A switch cut short after readers moved (versions.switch) left both versions
            # publishing on some shards; the retired one no longer runs.
            versions.settle_live(self.client, p, self.settings.change_shards,
                                 reg.active.namespace)  # fmt: skip
        if reg.next is not None and reg.next.runs == code:
            # Also a rebuild asked by hand (``liveviews rebuild``), of the code that serves.
            log.info("pipeline %r: resuming the rebuild of version %s", p, reg.next.version)
        elif reg.active.runs == code:
            if reg.next is not None:
                log.info("pipeline %r: dropping version %s, built for code that is gone",
                         p, reg.next.version)  # fmt: skip
                self._abort(p)
            self._run(p, reg.active, self.app)
            return
        elif reg.aborted == code:
            log.warning("pipeline %r: its code is version %s, whose rebuild was aborted; readers"
                        " keep version %s (liveviews rebuild %s builds it again)",
                        p, code, reg.active.version, p)  # fmt: skip
            self._run_stored(p, reg.active)
            return
        else:
            if reg.next is not None:
                self._abort(p)
            reg = self._begin(p, code)
            log.info("pipeline %r changed: building version %s beside version %s",
                     p, code, reg.active.version if reg.active else "?")  # fmt: skip
        assert reg.active is not None and reg.next is not None
        if reg.active.runs == code:
            self._run(p, reg.active, self.app)
        else:
            self._run_stored(p, reg.active)
        self._build(p, reg.next)

    def _pack(self, p: str) -> bytes | None:
        """The current code of ``p``, to store with a version; None when the application is not
        the one ``LV_APP`` names (declared in a test, say): such a version runs only while this
        process does."""
        if p not in self._packed:
            try:
                same = load_app(self.settings.app) is self.app
            except Exception:  # noqa: BLE001 - any failure means: not importable by its spec
                same = False
            self._packed[p] = pipelinecode.pack(self.app, p, self.settings.app) if same else None
        return self._packed[p]

    def _begin(self, p: str, code: str, manual: bool = False) -> Versions:
        reg = versions.read(self.client, p)
        taken = {reg.active.version} if reg and reg.active else set()
        taken |= {r.version for r in reg.retired} if reg else set()
        name = code
        if manual or name in taken:
            name = f"{code[:20]}_{int(time.time())}"
        return versions.begin(self.client, p, name, code, self._pack(p))

    def _run_stored(self, p: str, version: Version) -> None:
        """Run a version from the code stored with it; without it, its views stay as they are
        until the version being built replaces them."""
        raw = versions.read_code(self.client, p, version)
        if raw is None:
            log.warning("pipeline %r: version %s has no stored code; its views are served as"
                        " they are, without new events, until the new version replaces them",
                        p, version.version)  # fmt: skip
            return
        self._run(p, version, unpack(raw, f"{p}_{version.version}"))

    def _build(self, p: str, version: Version) -> None:
        """Build ``version`` beside the serving one: in a process of its own at a lower CPU
        priority (``liveviews.pipeline.builder``) when that process can load this application by
        ``LV_APP``, in this one otherwise."""
        if builds_apart(self.settings) and self._pack(p) is not None:
            builder = Builder(p, version, self.settings)
            builder.start()
            self.builders[p] = builder
        else:
            self._run(p, version, self.app, building=True)

    def _run(self, p: str, version: Version, app: App, building: bool = False) -> None:
        """Start a version's query; one being ``building`` reads short micro-batches
        (``liveviews.pipeline.builder.rebuild_cap``) and writes in short store calls."""
        cap = rebuild_cap(self.settings, app, p) if building else None
        query = start_pipeline(self.spark, app, self.settings, p, self.client,
                               version.namespace, list(self.app.pipelines), cap,
                               building)  # fmt: skip
        self.running[version.qualified(p)] = Running(p, version, app, query, cap, building)

    def restart(self, qualified: str) -> StreamingQuery:
        """The query of a running version again, from its checkpoint (after a set-aside batch)."""
        r = self.running[qualified]
        r.query = start_pipeline(self.spark, r.app, self.settings, r.pipeline, self.client,
                                 r.version.namespace, list(self.app.pipelines),
                                 r.max_events, r.building)  # fmt: skip
        return r.query

    def rebuild_unrunnable(self, qualified: str) -> bool:
        """A serving version whose checkpoint this Spark cannot run (an upgrade changed its
        stateful operators): rebuild the pipeline as a new version while readers keep the
        served state, instead of stopping. False if ``qualified`` is not a serving version."""
        r = self.running.get(qualified)
        reg = versions.read(self.client, r.pipeline) if r is not None else None
        if (
            r is None
            or reg is None
            or reg.active is None
            or reg.active.qualified(r.pipeline) != (qualified)
        ):
            return False
        self.running.pop(qualified)
        serving = reg.active.version
        if reg.next is None:
            reg = self._begin(r.pipeline, self.code[r.pipeline], manual=True)
            assert reg.next is not None
            self._build(r.pipeline, reg.next)
        log.warning("pipeline %r: version %s cannot run from its checkpoint; readers keep its"
                    " views as they are while version %s is built from the log",
                    r.pipeline, serving, reg.next.version if reg.next else "?")  # fmt: skip
        return True

    # -- while running -------------------------------------------------------------------------

    def tick(self) -> None:
        """Act on operators' requests, switch a caught-up version, delete retired ones."""
        for p, reg in versions.read_all(self.client).items():
            if p not in self.app.pipelines:
                continue
            if reg.request is not None:
                self._request(p, versions.take_request(self.client, p))
                reg = versions.read(self.client, p) or reg
            if p in self.builders:
                self._tend(p, self.builders[p], reg)
            building = reg.next is not None and reg.next.qualified(p) in self.running
            if building or p in self.builders:
                self._report(p, reg)
            if building and self.settings.rebuild_switch == "auto" and self._caught_up(p, reg):
                self._switch(p)
            for old in reg.retired:
                self._retire(p, old)

    def _request(self, p: str, kind: str | None) -> None:
        reg = versions.read(self.client, p)
        if reg is None or kind is None:
            return
        log.info("pipeline %r: %s asked", p, kind)
        if kind == "rebuild" and reg.next is None:
            reg = self._begin(p, self.code[p], manual=True)
            assert reg.next is not None
            if reg.active is not None and reg.active.qualified(p) not in self.running:
                self._run_stored(p, reg.active)
            self._build(p, reg.next)
        elif kind == "switch" and reg.next is not None:
            self._switch(p)
        elif kind == "abort" and reg.next is not None:
            self._abort(p)

    def _tend(self, p: str, builder: Builder, reg: Versions) -> None:
        """Hand a version built apart over to this process once it has caught up (the switch
        then happens here), and start its process again when it failed."""
        if reg.next is None or reg.next.qualified(p) != builder.qualified:
            self.builders.pop(p).stop()  # the registry moved on without this process
            return
        status = builder.exited()
        if status is None:
            if builder.due():
                builder.start()
            elif not builder.handing_over and self._caught_up(p, reg):
                log.info("pipeline %r: version %s has caught up; this process runs it on",
                         p, reg.next.version)  # fmt: skip
                builder.hand_over()
            return
        if builder.handing_over:
            del self.builders[p]
            self._run(p, reg.next, self.app, building=True)
        else:
            builder.failed(status)

    def close(self) -> None:
        """Stop the processes building versions (the next start starts them again)."""
        for builder in self.builders.values():
            builder.stop()
        self.builders.clear()

    def _report(self, p: str, reg: Versions) -> None:
        """A line every ``REPORT_SECONDS`` on how far a rebuild has come (``liveviews status``
        and ``liveviews rebuild`` show more)."""
        if time.monotonic() - self._reported < REPORT_SECONDS:
            return
        self._reported = time.monotonic()
        assert reg.next is not None
        log.info("pipeline %r: rebuilding version %s beside version %s: %s", p,
                 reg.next.version, reg.active.version if reg.active else "?",
                 self._behind(reg.next.qualified(p)))  # fmt: skip

    def _behind(self, qualified: str) -> str:
        """How far a version being built is behind the log's head, in words."""
        if not self.settings.kafka:
            behind: Any = self.client.hget(FRONTIER_LAG_KEY, qualified)
            if behind is None:
                return "starting"
            return f"{int(behind) / 1000:.1f} s of the log behind its head"
        from liveviews.log.kafka.lag import measure_all
        from liveviews.log.kafka.topic import LogUnavailable

        frontier = read_frontier(self.client, qualified)
        if not frontier:
            return "starting"
        try:
            lags = measure_all(self.settings.kafka, self.settings.kafka_topic,
                               self.settings.log_partitions, {qualified: frontier})  # fmt: skip
        except LogUnavailable as exc:
            return str(exc)
        lag = lags[qualified]
        return f"{lag.events} positions ({lag.ms / 1000:.1f} s of the log) behind its end"

    def _caught_up(self, p: str, reg: Versions) -> bool:
        """Is the version being built within the switch distance of the serving one (or of the
        log's head, when the serving one does not run)?"""
        assert reg.next is not None and reg.active is not None
        new = read_frontier(self.client, reg.next.qualified(p))
        if not new:
            return False
        serving = reg.active.qualified(p) if reg.active.qualified(p) in self.running else None
        distance = self.settings.rebuild_switch_distance
        if self.settings.kafka:
            behind = self._kafka_behind(new, serving)
            return behind is not None and behind <= distance
        if serving is not None:
            target = read_frontier(self.client, serving)
        else:
            target = log_heads(self.client, self.settings.log_partitions)
        behind = 0
        with self.client.pipeline(transaction=False) as pipe:
            for partition, end in target.items():
                start = new.get(partition)
                if start is not None and entry_id_tuple(start) >= entry_id_tuple(end):
                    continue
                pipe.xrange(log_stream(partition), f"({start}" if start else "-", end,
                            count=distance + 1)  # fmt: skip
            for entries in pipe.execute():
                behind += len(entries)
        return behind <= distance

    def _kafka_behind(self, new: dict[int, str], serving: str | None) -> int | None:
        """How many positions of a Kafka log a version's frontier ``new`` is behind the serving
        version's (or the log's ends, when it does not run): positions are offsets, so this is
        their difference (a transaction's commit marker counts as one); the store's streams
        hold no event. None while the log cannot be measured."""
        from liveviews.log.kafka.lag import log_ends
        from liveviews.log.kafka.topic import LogUnavailable

        assert self.settings.kafka is not None
        if serving is not None:
            target = {p: int(o) for p, o in read_frontier(self.client, serving).items()}
        else:
            try:
                target = log_ends(self.settings.kafka, self.settings.kafka_topic,
                                  self.settings.log_partitions)  # fmt: skip
            except LogUnavailable as exc:
                log.warning("%s", exc)
                return None
        return sum(max(0, end - int(new.get(p, "0"))) for p, end in target.items())

    def _switch(self, p: str) -> None:
        builder = self.builders.pop(p, None)
        if builder is not None:  # switched by hand before the hand-over
            builder.stop()
        reg = versions.switch(self.client, p, self.settings.change_shards)
        assert reg.active is not None
        log.info("pipeline %r: readers switched to version %s", p, reg.active.version)
        if builder is not None:
            self._run(p, reg.active, self.app, building=True)
        old = reg.retired[-1] if reg.retired else None
        if old is not None:
            self._stop(old.qualified(p))

    def _abort(self, p: str) -> None:
        builder = self.builders.pop(p, None)
        if builder is not None:
            builder.stop()
        dropped = versions.abort(self.client, p, self.settings.change_shards)
        if dropped is not None:
            self._stop(dropped.qualified(p))
            log.info("pipeline %r: version %s aborted", p, dropped.version)

    def _stop(self, qualified: str) -> None:
        r = self.running.pop(qualified, None)
        if r is not None:
            try:
                r.query.stop()
            except Exception:  # noqa: BLE001 - a query that already failed is stopped too
                log.exception("stopping %s", qualified)

    def _retire(self, p: str, old: Version) -> None:
        """Delete a retired version's state once its grace period is over, in a thread: a
        large view takes a while, and the driver's loop must keep switching and recovering."""
        name = old.qualified(p)
        due = (old.ended or 0) + self.settings.rebuild_grace_seconds
        if name in self.running or name in self._deleting or time.time() < due:
            return
        self._deleting.add(name)
        views = set(self.app.pipelines[p].views)

        def delete() -> None:
            try:
                delete_state(self.client, self.settings, p, old, views)
                versions.forget(self.client, p, old)
                log.info("pipeline %r: state of version %s deleted", p, old.version)
            except Exception:  # noqa: BLE001 - tried again at the next tick
                log.exception("deleting the state of %s", name)
            finally:
                self._deleting.discard(name)

        threading.Thread(target=delete, name=f"retire-{name}", daemon=True).start()


def start(spark: SparkSession, app: App, settings: Settings) -> list[StreamingQuery]:
    """One query per pipeline, each with its own checkpoint, source and frontier (two while a
    new version of it is built beside the serving one).

    A pipeline's micro-batches then wait only for its own operators: a small batch of the
    Chirp entities no longer waits for the activity windows, and the reverse.
    """
    return list(start_versions(spark, app, settings).queries.values())


def start_versions(spark: SparkSession, app: App, settings: Settings) -> Versioning:
    """The queries of every pipeline version that should run, and what runs them."""
    if not app.pipelines:
        raise ConfigurationError(f"application {app.name!r} declares no pipeline.")
    if VIEWS_FRONTIER in app.pipelines:
        raise ConfigurationError(
            f"pipeline {VIEWS_FRONTIER!r}: the name is the frontier of every view; rename it."
        )
    older = settings.checkpoint_dir / QUERY_NAME
    if older.exists() and not any(checkpoint_of(settings, p).exists() for p in app.pipelines):
        raise ConfigurationError(
            f"{older} holds a checkpoint of an earlier layout (one query for every pipeline)."
            " Remove the data directory (make clean-data) and start again:"
            " the views are recomputed from the log."
        )
    client = sink_client(settings)
    check_layout(client, settings.log_partitions, settings.change_shards)
    record_progress(spark, client)
    versioning = Versioning(spark, app, settings, client)
    versioning.start()
    return versioning
