"""How fast and how busy the machine was while a benchmark ran.

The reference machine is a virtual machine on a shared host, and its speed drifts: the same
code's micro-batches took 130 ms at one hour and 205 ms at another, and one socket write 6.6
µs against 10.0 (docs/PERFORMANCE.md). Figures are compared within a run, against baselines
measured in it; this module records what lets a reader compare runs with each other, in each
result file's ``moment``:

- **Probes**, before the benchmark loads the machine and after it: a fixed pure-Python loop
  (how fast one core computes) and round trips of one byte between two processes over a Unix
  socket pair (two system calls and a wake-up of the other process each way: what the
  pipeline's Python workers, py4j and a loopback write pay, and what a slow moment of the host
  slowed most while the loop ran as fast as ever). Both run on an otherwise idle machine, so a
  round trip includes waking an idle core: on the reference machine, whose kernel halts an
  idle virtual CPU at once (``haltpoll.guest_halt_poll_ns=0``), ~70-95 µs, against ~13 µs with
  a busy process on the other core.
- **Where the CPU time went** over the whole benchmark, from ``/proc/stat``: busy (user,
  system, interrupts), idle, waiting for I/O, and stolen by the host for other machines.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any

LOOP_ITERATIONS = 2_000_000
ROUND_TRIPS = 2_000
PROBE_REPEATS = 3
"""Each probe runs this many times and keeps its fastest: a probe measures the machine, not
the odd preemption that hit one of its runs."""


@dataclass(frozen=True)
class CpuTimes:
    """The machine-wide counters of ``/proc/stat``'s ``cpu`` line, in clock ticks."""

    busy: int
    idle: int
    iowait: int
    steal: int

    @classmethod
    def parse(cls, stat: str) -> CpuTimes:
        for line in stat.splitlines():
            fields = line.split()
            if fields and fields[0] == "cpu":
                user, nice, system, idle, iowait, irq, softirq, steal = map(int, fields[1:9])
                return cls(user + nice + system + irq + softirq, idle, iowait, steal)
        raise ValueError("no cpu line in /proc/stat")

    @classmethod
    def now(cls) -> CpuTimes:
        with open("/proc/stat") as f:
            return cls.parse(f.read())

    def shares_since(self, start: CpuTimes) -> dict[str, float]:
        """Percent of all CPU time between ``start`` and this reading, per kind."""
        spent = {
            "busy_pct": self.busy - start.busy,
            "idle_pct": self.idle - start.idle,
            "iowait_pct": self.iowait - start.iowait,
            "steal_pct": self.steal - start.steal,
        }
        total = sum(spent.values())
        return {k: round(100 * v / total, 1) if total else 0.0 for k, v in spent.items()}


def python_loop_ms(iterations: int) -> float:
    """Milliseconds of a fixed pure-Python loop on one core (fastest of a few runs)."""
    best = float("inf")
    for _ in range(PROBE_REPEATS):
        started = time.perf_counter()
        total = 0
        for i in range(iterations):
            total += i & 7
        best = min(best, time.perf_counter() - started)
    return round(best * 1000, 1)


def round_trip_us(trips: int) -> float:
    """Microseconds per one-byte round trip between this process and a forked child over a
    Unix socket pair (fastest of a few runs)."""
    ours, theirs = socket.socketpair()
    child = os.fork()
    if child == 0:  # the echo side: answer each byte until the socket closes
        ours.close()
        try:
            while data := theirs.recv(1):
                theirs.sendall(data)
        finally:
            os._exit(0)
    theirs.close()
    best = float("inf")
    try:
        for _ in range(PROBE_REPEATS):
            started = time.perf_counter()
            for _ in range(trips):
                ours.sendall(b"x")
                ours.recv(1)
            best = min(best, time.perf_counter() - started)
    finally:
        ours.close()
        os.waitpid(child, 0)
    return round(best / trips * 1e6, 2)


def probe() -> dict[str, float]:
    return {
        "python_loop_ms": python_loop_ms(LOOP_ITERATIONS),
        "round_trip_us": round_trip_us(ROUND_TRIPS),
    }


class Moment:
    """Started when a benchmark starts; :meth:`finish` when its figures are saved."""

    def __init__(self) -> None:
        self.started_at = time.time()
        self.before = probe()
        self.cpu = CpuTimes.now()
        self._finished: dict[str, Any] | None = None

    def finish(self) -> dict[str, Any]:
        """The moment as a result file records it (the same dict on every call)."""
        if self._finished is None:
            cpu = CpuTimes.now().shares_since(self.cpu)
            self._finished = {
                "seconds": round(time.time() - self.started_at, 1),
                "probe_before": self.before,
                "probe_after": probe(),
                "cpu": cpu,
            }
        return self._finished


def describe(moment: dict[str, Any]) -> str:
    """One sentence for the summary."""
    before, after, cpu = moment["probe_before"], moment["probe_after"], moment["cpu"]
    return (
        f"The machine during this benchmark ({moment['seconds']:.0f} s): a Python loop of"
        f" {LOOP_ITERATIONS:,} iterations took {before['python_loop_ms']} ms before and"
        f" {after['python_loop_ms']} ms after; a round trip between two processes"
        f" {before['round_trip_us']} and {after['round_trip_us']} µs; of all CPU time,"
        f" {cpu['busy_pct']}% busy, {cpu['idle_pct']}% idle, {cpu['steal_pct']}% taken by"
        " the host."
    )
