"""A class-data archive for the pipeline's JVM, so that Spark starts with its classes mapped
from one file instead of loading, parsing and verifying them one by one.

This is the JVM's own application class-data sharing (a dynamic CDS archive, JDK 13 and
later): a JVM started with ``-XX:ArchiveClassesAtExit=FILE`` writes every class it loaded to
FILE when it exits, and a later JVM started with ``-XX:SharedArchiveFile=FILE`` maps them. The
pipeline's driver starts ~4-5 s sooner with it on the reference machine (docs/PERFORMANCE.md).

``python -m liveviews.pipeline.tuning.classarchive`` builds the archive once (``scripts/setup.sh``
calls it): it runs the pipeline on a throwaway embedded store with the application's samples until
every view has caught up, stops it, and waits for its JVM to write the archive, which then replaces
the old one in a single rename. The archive is ~170 MiB, under ``~/.cache/liveviews`` and named
after the jars directory, the Java installation and the pipeline's local file system jar
(``liveviews.pipeline.tuning.localfs``) it was built with, so each virtualenv has its own and an
upgrade builds a new one; archives whose jars are gone, and older ones over the same jars, are
removed at the next build. ``LV_CLASS_ARCHIVE`` names another file, or ``off`` turns the archive
off.

A missing archive only costs start-up time, and so does one the JVM cannot use (another JDK or
other jars): the JVM checks the archive's header and class path and ignores one that does not
match.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from liveviews.cache import cache_dir
from liveviews.errors import LiveviewsError
from liveviews.pipeline.java import java_binary
from liveviews.pipeline.realtime import jar as realtime_jar
from liveviews.pipeline.settings import Settings
from liveviews.pipeline.tuning import localfs
from liveviews.pipeline.tuning.jars import mtime, recorded_path, spark_jars

BUILD_TIMEOUT_S = 300
QUIET = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
"""The JVM reports every class it cannot archive (signed jars, generated classes) as a warning;
those classes are simply loaded as before."""


def default_path() -> Path | None:
    """``~/.cache/liveviews/spark-classes-<key>.jsa``, the key naming the jars and the JDK.

    The JVM maps an archive only over the class path it was built on, so each installation
    of pyspark (each virtualenv) has its own archive, and an upgrade builds a new one."""
    java = java_binary()
    if java is None:
        return None
    return archive_for(spark_jars(), java)


def archive_for(jars: Path, java: Path) -> Path:
    """The default archive's path for the jars in ``jars`` run by the JVM ``java``, with the
    local file system's jar and the Real-Time Mode jar on the class path when they are built
    (``liveviews.pipeline.tuning.localfs``, ``liveviews.pipeline.realtime.jar``)."""

    stamp = f"{jars}|{mtime(jars)}|{java}|{mtime(java)}"
    for extra in (localfs.jar_path(), realtime_jar.jar_path()):
        if extra is not None and extra.is_file():
            stamp += f"|{extra}"
    key = hashlib.sha256(stamp.encode()).hexdigest()[:12]
    return cache_dir() / f"spark-classes-{key}.jsa"


def source_file(archive: Path) -> Path:
    """Beside each built archive: the jars directory it was built over."""
    return archive.with_suffix(".jars")


def prune(cache: Path, current: Path | None = None) -> list[Path]:
    """Remove the default archives in ``cache`` whose jars are gone (a deleted virtualenv or clone),
    and those ``current`` supersedes (built over the same jars before an upgrade of the JDK or of
    the pipeline's own jar): each is ~170 MiB that the pipeline no longer maps. Returns what it
    removed."""
    removed = []
    current_jars = _recorded_jars(current) if current is not None else None
    for archive in sorted(cache.glob("spark-classes-*.jsa")):
        if archive == current:
            continue
        source = source_file(archive)
        jars = _recorded_jars(archive)
        if jars is None or not jars.is_dir() or (current_jars is not None and jars == current_jars):
            archive.unlink(missing_ok=True)
            source.unlink(missing_ok=True)
            removed.append(archive)
    return removed


def _recorded_jars(archive: Path) -> Path | None:
    return recorded_path(source_file(archive))


def archive_path(settings: Settings) -> Path | None:
    """The archive the pipeline uses, or None when it is turned off."""
    if settings.class_archive == "off":
        return None
    if settings.class_archive:
        return Path(settings.class_archive).resolve()
    return default_path()


def java_options(settings: Settings) -> list[str]:
    """The driver JVM's options: write the archive at exit, or map it if it exists."""
    if settings.dump_class_archive is not None:
        return [_option("-XX:ArchiveClassesAtExit=", settings.dump_class_archive), *QUIET]
    path = archive_path(settings)
    if path is None or not path.is_file():
        return []
    return [_option("-XX:SharedArchiveFile=", path), *QUIET]


def _option(name: str, path: Path) -> str:
    """One option of ``spark.driver.extraJavaOptions``, which Spark splits as a shell would."""
    option = f"{name}{path}"
    return f'"{option}"' if any(c.isspace() for c in option) else option


def build(target: Path, app_spec: str, timeout: float = BUILD_TIMEOUT_S) -> None:
    """Write the archive to ``target`` (see the module's doc), warmed up by the application
    ``app_spec`` names (``LV_APP``'s form) on its ``samples``. Raises on failure; ``target`` is
    then left as it was."""
    from liveviews.app import load_app
    from liveviews.log.eventlog import EventLog, views_caught_up
    from liveviews.store import client as storeclient
    from liveviews.store.embedded import EmbeddedStore, free_port

    app = load_app(app_spec)
    samples = app.samples
    if samples is None:
        raise RuntimeError(
            f"the application {app_spec!r} declares no samples (App(..., samples=...)) to warm "
            "the pipeline up with"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    # Built beside the target, so that the finished archive moves into place in one rename.
    with tempfile.TemporaryDirectory(prefix=".building-", dir=target.parent) as tmp:
        work = Path(tmp)
        store = EmbeddedStore(work / "store", free_port())
        url = store.start()
        pipeline: subprocess.Popen[bytes] | None = None
        try:
            settings = Settings.from_env({"REDIS_URL": url})
            client = storeclient.connect(url)
            events = EventLog(client, app, settings.log_partitions)
            events.append_batch(samples(int(time.time() * 1000)))
            dumped = work / "classes.jsa"
            env = {
                **os.environ,
                "REDIS_URL": url,
                "LV_DATA_DIR": str(work / "data"),
                "LV_APP": app_spec,
                "LV_CLASS_ARCHIVE": "off",
                "LV_CLASS_ARCHIVE_DUMP": str(dumped),
            }
            with open(work / "pipeline.log", "wb") as out:
                pipeline = subprocess.Popen(
                    [sys.executable, "-m", "liveviews.pipeline"], env=env, stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
                deadline = time.monotonic() + timeout
                while not views_caught_up(client, settings.log_partitions):
                    _check_running(pipeline, work, deadline)
                    time.sleep(0.5)
                time.sleep(2.0)  # a few empty batches too: their code paths load classes
                pipeline.send_signal(signal.SIGTERM)
                # The JVM writes the archive as it exits, after the Python process has ended.
                _wait_for_group(pipeline, deadline)
            if not dumped.is_file() or dumped.stat().st_size == 0:
                raise RuntimeError(f"the JVM wrote no archive; see {_tail(work)}")
            source_file(target).write_text(f"{spark_jars()}\n")
            os.replace(dumped, target)
        finally:
            if pipeline is not None:
                _kill_group(pipeline)
            store.stop()


def _check_running(pipeline: subprocess.Popen[bytes], work: Path, deadline: float) -> None:
    if pipeline.poll() is not None:
        raise RuntimeError(f"the pipeline stopped with status {pipeline.returncode}: "
                           f"{_tail(work)}")  # fmt: skip
    if time.monotonic() > deadline:
        raise RuntimeError(f"the pipeline did not catch up in time: {_tail(work)}")


def _wait_for_group(pipeline: subprocess.Popen[bytes], deadline: float) -> None:
    pipeline.wait(max(1.0, deadline - time.monotonic()))
    while time.monotonic() < deadline:
        try:
            os.killpg(pipeline.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    raise RuntimeError("the pipeline's JVM did not exit in time")


def _kill_group(pipeline: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pipeline.pid, signal.SIGKILL)
    pipeline.wait()


def _tail(work: Path) -> str:
    """The end of the pipeline's output, without the JVM's archive warnings."""
    log = (work / "pipeline.log").read_text(errors="replace").splitlines()
    return "\n".join(line for line in log if "[cds" not in line)[-2000:] or "no output"


def main(argv: list[str] | None = None) -> int:
    """``python -m liveviews.pipeline.tuning.classarchive [--rebuild]``: build the archive if
    missing."""
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--rebuild"]):
        print(
            "usage: python -m liveviews.pipeline.tuning.classarchive [--rebuild]", file=sys.stderr
        )
        return 2

    # First: the archive maps over a class path that includes them.
    localfs.ensure_jar()
    with contextlib.suppress(LiveviewsError):
        realtime_jar.ensure_jar()
    settings = Settings.from_env()
    path = archive_path(settings)
    if path is None:
        print("The class archive is turned off (LV_CLASS_ARCHIVE=off), or there is no java.")
        return 0
    if path.is_file() and not args:
        print(f"Class archive present: {path}")
        return 0
    from liveviews.app import load_app

    if load_app(settings.app).samples is None:
        # Not a failure: the archive only saves start-up time, and it is built from a run of
        # the application's own samples.
        print("No class archive: the application declares no samples (App(..., samples=...)) "
              "to build it from, so the pipeline starts a few seconds slower.")  # fmt: skip
        return 0
    print(f"Building the JVM class archive for a faster pipeline start (once, ~1 min): {path}",
          flush=True)  # fmt: skip
    t0 = time.monotonic()
    for stale in prune(cache_dir()):  # default archives only, wherever this one goes
        print(f"Removed a class archive whose jars are gone: {stale}")
    try:
        build(path, settings.app)
    except Exception as exc:  # noqa: BLE001 - reported; the pipeline runs without the archive
        print(f"Could not build the class archive; the pipeline starts without it: {exc}",
              file=sys.stderr)  # fmt: skip
        return 1
    size = path.stat().st_size / 2**20
    print(f"Built the class archive in {time.monotonic() - t0:.0f} s ({size:.0f} MiB).")
    if path.parent == cache_dir():
        for superseded in prune(cache_dir(), current=path):
            print(f"Removed a class archive this one supersedes: {superseded}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
