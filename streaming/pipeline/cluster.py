"""What the job needs under a cluster master (``spark://``, ``yarn``, ``k8s://``): the code
shipped to the executors, and checkpoints every executor sees.

Executors import the views' processors and the log source by name, so the application's
package and ``liveviews`` must be importable where they run. On a cluster that is only true
of what the driver ships: the executors' Python has the project's dependencies installed
(PySpark, pyarrow, pandas, redis, orjson), not the project. ``ship_code`` packs both packages'
source into one zip and adds it with ``SparkContext.addPyFile``, the way Spark applications
ship theirs; each executor puts it on its Python workers' path.

State stores and the offset and commit logs live under ``LV_CHECKPOINT_DIR``, which the
driver and every executor read and write by the same path. ``check_checkpoints`` has the
executors look for a file the driver just wrote there, and stops the start if one cannot see
it: a directory on one machine's disk would lose or fork the views' state at the first task
that moves.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
import socket
import sys
import zipfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from liveviews.errors import ConfigurationError
from liveviews.pipeline.tuning import localdir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CODE_ROOT = "spark-code"
"""Under the data directory: each pipeline process's zip, in a directory named by its pid."""
ARCHIVE = "liveviews-code.zip"


def is_local(master: str) -> bool:
    return master.startswith("local")


LIVEVIEWS = ["liveviews", "liveviews.gateway"]
"""``liveviews`` and its gateway, each named: in a checkout they are two folders (setup.py)."""


def shipped_packages(app_spec: str) -> list[str]:
    """The packages executors import: ``liveviews`` and the application's top-level one."""
    top = app_spec.partition(":")[0].split(".")[0]
    return list(dict.fromkeys([*LIVEVIEWS, top]))


def _sources(name: str) -> Iterator[tuple[Path, str]]:
    """Each file of the package or module ``name``, with its path in the zip."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise ConfigurationError(f"cannot ship {name!r} to the executors: it is not importable.")
    prefix = name.replace(".", "/")
    if spec.submodule_search_locations:  # a package, or a namespace package's directories
        for location in spec.submodule_search_locations:
            root = Path(location)
            for path in sorted(root.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                    yield path, f"{prefix}/{path.relative_to(root).as_posix()}"
    elif spec.origin and spec.origin.endswith(".py"):
        yield Path(spec.origin), f"{prefix}.py"
    else:
        raise ConfigurationError(
            f"cannot ship {name!r} to the executors: it is not Python source ({spec.origin})."
            " Install it in the executors' Python instead."
        )


def pack_code(packages: list[str], target: Path) -> Path:
    """One zip of the packages' source at ``target``, written whole before it is renamed in."""
    partial_file = target.with_name(f".{target.name}.partial")
    try:
        with zipfile.ZipFile(partial_file, "w", zipfile.ZIP_DEFLATED) as archive:
            written: set[str] = set()  # an installed gateway is inside liveviews: once each
            for name in packages:
                for path, arcname in _sources(name):
                    if arcname not in written:
                        written.add(arcname)
                        archive.write(path, arcname)
    except BaseException:
        partial_file.unlink(missing_ok=True)
        raise
    os.replace(partial_file, target)
    return target


def pack_shipped(app_spec: str, data_dir: Path) -> Path:
    """The zip of ``liveviews`` and the application's package for this pipeline process; it
    must stay while the session runs."""
    directory = localdir.prepare(data_dir, CODE_ROOT)
    return pack_code(shipped_packages(app_spec), directory / ARCHIVE)


@contextlib.contextmanager
def driver_runners_import(archive: Path) -> Iterator[None]:
    """While the driver's JVM starts: ``archive`` on the Python path it gives the Python
    processes it runs itself (a Python data source's planner, say). Under a cluster master they
    run the executors' interpreter, which has the dependencies and not the project; the JVM
    keeps the environment it started with, and this process's own path stays as it is."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(archive), before) if p)
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


def ship_code(spark: SparkSession, archive: Path) -> None:
    """Add ``archive`` (``pack_shipped``) to the session's Python path on every executor."""
    before = list(sys.path)
    spark.sparkContext.addPyFile(str(archive))
    # addPyFile also puts the zip on the driver's own path. The driver keeps importing from
    # the installed source: a version's code is packed from its modules' files
    # (liveviews.pipeline.code), which a module imported from a zip does not have.
    sys.path[:] = before


def _sees(marker: str, token: str, _: object) -> tuple[bool, str]:
    """On an executor: whether ``marker`` holds ``token``, and the executor's host."""
    try:
        seen = Path(marker).read_text() == token
    except OSError:
        seen = False
    return seen, socket.gethostname()


def check_checkpoints(spark: SparkSession, checkpoint_dir: Path) -> None:
    """Fail unless the executors that run a first job find the driver's file in
    ``checkpoint_dir``: the checkpoints must be on storage every node mounts at that path."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    marker = checkpoint_dir / f".shared-{os.getpid()}"
    token = secrets.token_hex(16)
    marker.write_text(token)
    context = spark.sparkContext
    slots = max(2, context.defaultParallelism)
    try:
        answers = context.parallelize(range(slots), slots).map(partial(_sees, str(marker), token))
        seen = answers.collect()
    except Exception as exc:  # a Py4J error whose text is the executor's traceback
        raise executor_failure(exc) from exc
    finally:
        marker.unlink(missing_ok=True)
    blind = sorted({host for ok, host in seen if not ok})
    if blind:
        raise ConfigurationError(
            f"LV_CHECKPOINT_DIR={checkpoint_dir} is not the same directory for the executors on"
            f" {', '.join(blind)} as for the driver. On a cluster, put the checkpoints on storage"
            " every node mounts at the same path (NFS, say), and set LV_CHECKPOINT_DIR to it.",
            code="checkpoints_not_shared",
        )


def executor_failure(exc: Exception) -> ConfigurationError:
    """The error of a first task that failed on an executor; a missing module says what to
    install where."""
    text = str(exc)
    for line in text.splitlines():
        if "ModuleNotFoundError:" in line:
            missing = line.split("ModuleNotFoundError:", 1)[1].strip()
            return ConfigurationError(
                f"the executors' Python cannot import what the pipeline needs ({missing})."
                " Install the dependencies pyproject.toml lists in the interpreter"
                " PYSPARK_PYTHON names, on every worker.",
                code="executor_python_incomplete",
            )
    first = next((ln for ln in text.splitlines() if ln.strip()), "no message")
    return ConfigurationError(
        f"the executors could not run the pipeline's first task: {first}",
        code="executors_failed",
    )
