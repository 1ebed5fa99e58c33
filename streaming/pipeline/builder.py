"""A version being built, in a process of its own at a lower CPU priority.

Spark never preempts a task, and inside one driver the kernel cannot tell a rebuild's tasks
and Python workers from the serving queries': on a small machine a rebuild then delays every
reader's batch (docs/performance/rebuild.md). On a local master the pipeline process therefore
runs a version being built in a child, ``python -m liveviews.pipeline --build PIPELINE@VERSION``:
its own driver and Python workers, all at niceness 19 in the kernel's idle class by default
(``LV_REBUILD_NICENESS``), so that the kernel gives the cores to the serving queries whenever
they want them and the rest to the rebuild. Its writes go to the store in short calls
(``liveviews.pipeline.sink.BUILD_CALL_OPS``): the store is shared and runs one call at a time.

Once the version is within the switch distance of the serving one, the pipeline process asks
the child to stop (the hand-over) and runs the version itself, from the same checkpoint: it
catches up the events that came meanwhile and switches readers as it always does. Readers keep
the serving version throughout. The child dies with the pipeline process (a kill included), so
a restarted pipeline never finds a second driver writing the same checkpoint.

On a cluster the version is built in the pipeline's own application: a second application
would wait for executors the serving one holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from pyspark.sql.streaming import StreamingQuery

from liveviews import console
from liveviews.app import App, load_app
from liveviews.config.catalog import BUILD_PARENT
from liveviews.errors import LiveviewsError
from liveviews.pipeline import code as pipelinecode
from liveviews.pipeline import versions
from liveviews.pipeline.cluster import is_local
from liveviews.pipeline.settings import Settings
from liveviews.pipeline.versions import Version
from liveviews.store.client import Client

log = logging.getLogger("liveviews.rebuild")

PROCESS = "rebuild"
"""The builder's name on the console and of its log files."""
PARENT_ENV = BUILD_PARENT.name
"""The pipeline process's pid, given to its builder, which ends when that process is gone."""
STOP_TIMEOUT_S = 60.0
FIRST_BACKOFF_S = 2.0
MAX_BACKOFF_S = 60.0
PR_SET_PDEATHSIG = 1


def rebuild_cap(settings: Settings, app: App, pipeline: str) -> int | None:
    """How many events a version being built reads per micro-batch at most: short batches keep
    its tasks short, so the serving versions' batches find a free task slot. A pipeline with a
    trigger interval of its own keeps its cap, which is its rate; the cap never exceeds
    ``LV_MAX_EVENTS_PER_BATCH``."""
    if app.pipelines[pipeline].trigger_interval is not None:
        return None
    return min(settings.rebuild_max_events_per_batch, settings.max_events_per_batch)


def builds_apart(settings: Settings) -> bool:
    """Does a version being built run in a process of its own? Only on a local master, and
    only when ``settings`` are those of the environment, which the child reads (a program that
    runs a pipeline with settings of its own builds in its own process)."""
    if settings.rebuild_niceness == 0 or not is_local(settings.spark_master):
        return False
    try:
        return Settings.from_env() == settings
    except LiveviewsError:
        return False


# -- the pipeline process's side ---------------------------------------------------------------


@dataclass
class Builder:
    """The child process building one version of a pipeline."""

    pipeline: str
    version: Version
    settings: Settings
    process: subprocess.Popen[bytes] | None = None
    handing_over: bool = False
    failures: int = 0
    not_before: float = 0.0
    """While failed: when it may start again (monotonic)."""

    @property
    def qualified(self) -> str:
        return self.version.qualified(self.pipeline)

    def start(self) -> None:
        """Start the child (again); its output goes where the pipeline process's goes."""
        self.handing_over = False
        self.process = subprocess.Popen(
            [sys.executable, "-m", "liveviews.pipeline", "--build", self.qualified],
            env={**os.environ, PARENT_ENV: str(os.getpid())},
        )
        log.info("pipeline %r: building version %s in process %d, at niceness +%s%s",
                 self.pipeline, self.version.version, self.process.pid,
                 self.settings.rebuild_niceness,
                 " in the idle class" if self.settings.rebuild_idle else "")  # fmt: skip

    def exited(self) -> int | None:
        """The child's exit status once it has ended; None while it runs or waits to start."""
        if self.process is None:
            return None
        return self.process.poll()

    def failed(self, status: int) -> None:
        """The child ended without being asked: start it again after a pause that doubles."""
        self.failures += 1
        self.process = None
        pause = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (self.failures - 1))
        self.not_before = time.monotonic() + pause
        log.warning("pipeline %r: the process building version %s exited with status %s;"
                    " starting it again in %.0f s (its log: %s)",
                    self.pipeline, self.version.version, status, pause,
                    console.shown(console.log_file(PROCESS, self.settings)))  # fmt: skip

    def due(self) -> bool:
        """Is a failed child's pause over?"""
        return self.process is None and time.monotonic() >= self.not_before

    def hand_over(self) -> None:
        """Ask the child to stop at a batch's end, so this process runs the version on."""
        self.handing_over = True
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop the child and wait for it; killed if it takes longer than ``timeout``."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- the builder's side ------------------------------------------------------------------------


def die_with_parent() -> None:
    """Be killed when the pipeline process ends, however it ends (Linux; elsewhere the
    builder's loop sees its parent gone within half a second)."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def parent_gone() -> bool:
    """Has the pipeline process that started this builder ended?"""
    parent = BUILD_PARENT.get(os.environ)
    return bool(parent) and os.getppid() != parent


def build(settings: Settings, qualified: str) -> tuple[str, str] | None:
    """Run the query of the version ``qualified`` names (``entities@v2``) until asked to stop,
    the pipeline process is gone, or the version is no longer the one being built; (query name,
    failure) if the query failed in a way no set-aside batch mends."""
    die_with_parent()
    if parent_gone():  # it ended before the line above
        return None
    os.nice(settings.rebuild_niceness)  # the JVM and its Python workers inherit it
    if settings.rebuild_idle:  # inherited too; a waking serving thread preempts it at once
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    pipeline, _, version = qualified.partition("@")
    app = load_app(settings.app)
    from liveviews.pipeline.realtime import slots as realtime_slots

    app = realtime_slots.chosen(settings, app)
    if pipeline not in app.pipelines:
        raise LiveviewsError(f"the application declares no pipeline {pipeline!r}.",
                             code="invalid_pipeline")  # fmt: skip

    from liveviews.pipeline.progress import record_progress
    from liveviews.pipeline.queries import sink_client, start_pipeline
    from liveviews.pipeline.realtime import slots as realtime_slots
    from liveviews.pipeline.recovery import Recovery, log_entries
    from liveviews.pipeline.session import build_session

    client = sink_client(settings)
    target = being_built(client, pipeline, version)
    if target is None:
        raise LiveviewsError(
            f"version {version} of {pipeline!r} is not being built;"
            " liveviews status shows what is.",
            code="version_gone",
        )
    code = pipelinecode.derive(app, pipeline)
    if target.runs != code:
        raise LiveviewsError(
            f"version {version} of {pipeline!r} was made for other code than the application's"
            f" now ({code}); the pipeline process starts the version that code needs.",
            code="version_gone",
        )
    stop = console.stop_requested()
    spark = build_session(realtime_slots.sized(settings, app), PROCESS)
    record_progress(spark, client)
    cap = rebuild_cap(settings, app, pipeline)

    def start(_: str = qualified) -> StreamingQuery:
        return start_pipeline(spark, app, settings, pipeline, client, target.namespace,
                              list(app.pipelines), cap, building=True)  # fmt: skip

    queries = {qualified: start()}
    log.info("pipeline %r: building version %s from its checkpoint", pipeline, version)
    recovery = Recovery(client, log_entries(settings, client))
    try:
        while not stop.is_set() and not parent_gone():
            fatal = recovery.check(queries, start)
            if fatal is not None:
                return fatal
            if being_built(client, pipeline, version) is None:
                log.info("pipeline %r: version %s is no longer being built", pipeline, version)
                break
            stop.wait(0.5)
        return None
    finally:
        console.stopping()
        with contextlib.suppress(Exception):  # a stop reaches the JVM too
            for query in queries.values():
                query.stop()
            spark.stop()


def being_built(client: Client, pipeline: str, version: str) -> Version | None:
    """The version named ``version``, if it is the one of ``pipeline`` being built."""
    reg = versions.read(client, pipeline)
    if reg is not None and reg.next is not None and reg.next.version == version:
        return reg.next
    return None
