"""``python -m liveviews.pipeline``: run the application's views on Spark until stopped."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from typing import Any, NoReturn

from redis.exceptions import RedisError

from liveviews import console
from liveviews.app import load_app
from liveviews.errors import LiveviewsError
from liveviews.pipeline.java import require_java
from liveviews.pipeline.realtime import slots as realtime_slots
from liveviews.pipeline.settings import Settings
from liveviews.store.embedded import ensure_store
from liveviews.supervise import NEEDS_A_PERSON

log = logging.getLogger("liveviews.pipeline")


def watch_driver(spark: Any, stopping: threading.Event) -> None:
    """Exit at once when the Spark driver's JVM dies, so a supervisor restarts the pipeline.

    Without it, a Python thread that was talking to the dead JVM (a query listener's callback,
    say) can leave this process hanging on a lock in py4j's connection clean-up.
    """
    jvm = getattr(spark.sparkContext._gateway, "proc", None)
    if jvm is None:  # a JVM this process did not launch: nothing to watch
        return

    def watch() -> None:
        code = jvm.wait()
        if stopping.is_set():  # asked to stop: the JVM ends as it should
            return
        log.error("the Spark driver exited (status %s); exiting so the pipeline restarts", code)
        logging.shutdown()
        os._exit(3)

    threading.Thread(target=watch, name="driver-watch", daemon=True).start()


def run(settings: Settings) -> None:
    require_java()
    app = realtime_slots.chosen(settings, load_app(settings.app))
    settings = realtime_slots.sized(settings, app)  # room for queries in Real-Time Mode
    spark_log = console.shown(console.log_file("pipeline", settings))
    log.info("starting application %r on Spark %s; Spark's log: %s",
             app.name, settings.spark_master, spark_log)  # fmt: skip
    with ensure_store(settings):
        from liveviews.pipeline.queries import sink_client
        from liveviews.pipeline.recovery import Recovery, log_entries, stopped_without_failing
        from liveviews.pipeline.session import build_session
        from liveviews.pipeline.versioning import start_versions

        stop = threading.Event()

        def stop_asked(*_: object) -> None:
            console.stopping()
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, stop_asked)
        spark = build_session(settings)
        watch_driver(spark, stop)
        versioning = start_versions(spark, app, settings)
        queries = versioning.queries
        log.info("ready: %d queries running; checkpoints in %s",
                 len(queries), console.shown(settings.checkpoint_dir))  # fmt: skip
        client = sink_client(settings)
        recovery = Recovery(client, log_entries(settings, client))
        while not stop.is_set():
            try:
                versioning.tick()
            except RedisError as exc:  # the store is restarting: the queries wait for it too
                log.warning("could not check pipeline versions: %s", exc)
            queries = versioning.queries
            fatal = recovery.check(queries, versioning.restart)
            if fatal is not None and is_checkpoint_mismatch(fatal[1]):
                from liveviews.pipeline.session import QUERY_NAME

                if versioning.rebuild_unrunnable(fatal[0].removeprefix(f"{QUERY_NAME}.")):
                    continue
            if fatal is not None:
                stop.set()
                versioning.close()
                with contextlib.suppress(Exception):
                    for q in queries.values():
                        q.stop()
                raise query_failed(*fatal, settings)
            if stopped_without_failing(queries):
                break  # Spark is shutting down
            stop.wait(0.5)
        stop.set()
        log.info("stopping; the next start resumes from the checkpoints")
        versioning.close()
        with contextlib.suppress(Exception):  # Ctrl-C may have reached the JVM first
            for query in queries.values():
                query.stop()
            spark.stop()


CHECKPOINT_MISMATCHES = (
    "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA",
    "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE",
    "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
)
"""Spark's error classes for a checkpoint whose state another shape of the pipeline wrote."""


def is_checkpoint_mismatch(failure: str) -> bool:
    return any(f"[{cls}]" in failure for cls in CHECKPOINT_MISMATCHES)


def query_failed(query: str, failure: str, settings: Settings) -> LiveviewsError:
    """The error a failed pipeline query exits with; a checkpoint written by another version of
    the pipeline (an upgrade, a changed processor) says how to start again."""
    if is_checkpoint_mismatch(failure):
        from liveviews.pipeline.session import QUERY_NAME

        pipeline = query.removeprefix(f"{QUERY_NAME}.")
        return LiveviewsError(
            f"the pipeline {pipeline!r} has other stateful operators or state than its checkpoint"
            f" in {settings.checkpoint_dir / pipeline} was written with (an upgrade of Liveviews,"
            " or a changed pipeline). Remove that checkpoint, or the whole data directory with"
            " make clean-data, and start again: the views are recomputed from the log."
            f" Spark said: {failure.splitlines()[0]}",
            code="checkpoint_mismatch",
        )
    return LiveviewsError(f"the pipeline query {query} failed: {failure}", code="pipeline_failed")


def exit_now(code: int) -> NoReturn:
    """End the process at once, without the interpreter's finalization.

    At finalization the interpreter stops daemon threads where they stand, and py4j's
    connections log from ``__del__``: a py4j thread stopped while it held the logging lock (it
    was reporting the dead driver, say) left that log call, and this process, waiting forever
    instead of exiting to be restarted. Everything worth keeping is written already.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


USAGE = "usage: python -m liveviews.pipeline [--check | --prepare | --build PIPELINE@VERSION]"


def prepare_class_archive() -> None:
    """Build the JVM class archive if it is missing. It only saves start-up time, so no failure
    of it stops a start."""
    from liveviews.pipeline.tuning import classarchive

    try:
        ready = classarchive.main([]) == 0
    except Exception as exc:  # noqa: BLE001 - reported; the pipeline starts without it
        print(f"Could not prepare the class archive: {exc}", file=sys.stderr)
        ready = False
    if not ready:
        print("Starting without the class archive.", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """``python -m liveviews.pipeline [--check | --prepare]``: run the pipeline; with ``--check``,
    only verify Java and the application; with ``--prepare``, verify them and then build the JVM
    class archive if it is missing (``liveviews.pipeline.tuning.classarchive``), in this one
    process, as ``scripts/run.sh`` does before it starts the pipeline; with ``--build``, build one
    version of a pipeline, as the pipeline process asks its child to
    (``liveviews.pipeline.builder``)."""
    args = sys.argv[1:] if argv is None else argv
    building = len(args) == 2 and args[0] == "--build" and "@" in args[1]
    if args not in ([], ["--check"], ["--prepare"]) and not building:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        settings = Settings.from_env()
        if building:
            from liveviews.pipeline.builder import PROCESS, build

            console.setup(PROCESS, settings)
            fatal = build(settings, args[1])
            if fatal is not None:
                raise query_failed(*fatal, settings)
            return 0
        console.setup("pipeline", settings)
        if args:
            require_java()
            load_app(settings.app)
            if args == ["--prepare"]:
                prepare_class_archive()
            return 0
        run(settings)
    except LiveviewsError as exc:
        print(f"liveviews: {exc.message}", file=sys.stderr)
        # A failed query (its store gone for longer than the source waits, say) may run when
        # started again; a setting or a checkpoint that needs a person will not.
        return 3 if exc.code == "pipeline_failed" else NEEDS_A_PERSON
    except Exception:  # the driver died under a call to it, say: the supervisor restarts us
        log.exception("the pipeline stopped on an unexpected error; exiting so it restarts")
        return 3
    return 0


if __name__ == "__main__":
    exit_now(main())
