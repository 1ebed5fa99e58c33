"""What a group adds: a rename's latency to a group of two views beside each view's own.

A rename of a Chirp user reaches ``profiles/<user>`` and a follower's ``timeline`` in two
pipelines' micro-batches. A group of the two (docs/PROTOCOL.md, section 5.3) releases both
together, at a cut both pipelines end a batch at, so it moves at the pace of its slower member
and then some: the cut is appended once the first member has something to release, and each
pipeline must then end a batch exactly there. The whole system runs as ``make run`` runs it
(``bench.system``), every pipeline in micro-batches as in ``bench.latency``'s "tuned"; renames
go through the gateway at a fixed rate (``bench.latency.publish``), and for each watched user
the follower holds three SSE streams: the profile, the timeline, and the group of both. Per
rename, the group's latency is set beside the slower of the two members' own:

    added = group - max(profile, timeline)

    .venv/bin/python -m bench.groups [--quick] [--seconds 60] [--rate 100] [--watched 10]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson

from bench.common import Report, Row, percentile, save, token
from bench.latency import Phase, configuration_env, latency_stats, publish, seed
from bench.moment import Moment
from bench.system import running_store

CHANNELS = ("profile", "timeline", "group")
WATCHED = 10
"""Users whose renames are measured: each has a follower holding the three streams."""
SETTLE_S = 8.0
"""After the last rename, time for the slowest channel's last frames."""


def seq_of(name: object) -> int | None:
    """The rename a name carries (``<label>x<seq>``), or None for a name no rename set."""
    if not isinstance(name, str) or "x" not in name:
        return None
    tail = name.rpartition("x")[2]
    return int(tail) if tail.isdigit() else None


@dataclass
class Arrivals:
    """When each rename of the watched users reached each channel."""

    pending: dict[str, dict[int, deque[tuple[int, float]]]] = field(
        default_factory=lambda: {c: {} for c in CHANNELS}
    )
    at: dict[str, dict[tuple[int, int], float]] = field(
        default_factory=lambda: {c: {} for c in CHANNELS}
    )
    sent: dict[tuple[int, int], float] = field(default_factory=dict)

    def posted(self, user: int, seq: int, now: float) -> None:
        self.sent[(user, seq)] = now
        for channel in CHANNELS:
            self.pending[channel].setdefault(user, deque()).append((seq, now))

    def reflected(self, channel: str, user: int, seq: int, now: float) -> None:
        """``channel`` shows rename ``seq`` of ``user``, and so every earlier one: a batch with
        several renames of a user yields one delta, with the last."""
        queue = self.pending[channel].get(user)
        while queue and queue[0][0] <= seq:
            self.at[channel][(user, queue.popleft()[0])] = now

    def latencies(self) -> dict[str, list[float]]:
        """Per channel, and ``slowest_member`` and ``added``, in ms, over the renames that
        reached all three channels."""
        out: dict[str, list[float]] = {c: [] for c in (*CHANNELS, "slowest_member", "added")}
        for rename, sent in self.sent.items():
            times = [self.at[c].get(rename) for c in CHANNELS]
            if any(t is None for t in times):
                continue
            profile, timeline, group = (1000 * (t - sent) for t in times if t is not None)
            for channel, ms in zip(CHANNELS, (profile, timeline, group), strict=True):
                out[channel].append(ms)
            out["slowest_member"].append(max(profile, timeline))
            out["added"].append(group - max(profile, timeline))
        return out


class Watching(Phase):
    """The publisher's record of renames (``bench.latency.Phase``), passed on to ``arrivals``
    for the watched users."""

    def __init__(self, rate: int, arrivals: Arrivals, watched: int) -> None:
        super().__init__(rate)
        self.arrivals = arrivals
        self.watched = watched

    def posted(self, user: int, seq: int, name: str, now: float) -> None:
        super().posted(user, seq, name, now)
        if user < self.watched:
            self.arrivals.posted(user, seq, now)


def follower(user: int) -> int:
    """A follower of ``user`` in ``bench.latency.seed``: every user follows the three before."""
    return user + 1


async def frames(
    session: aiohttp.ClientSession, url: str, reader: str, ready: asyncio.Event
) -> Any:
    """The (event, data) of an SSE stream read as ``reader``; ``ready`` is set at the first."""
    headers = {"Authorization": f"Bearer {token(reader)}"}
    timeout = aiohttp.ClientTimeout(total=None)
    async with session.get(url, headers=headers, timeout=timeout) as r:
        r.raise_for_status()
        event = b""
        async for line in r.content:
            if line.startswith(b"event:"):
                event = line[6:].strip()
            elif line.startswith(b"data:"):
                ready.set()
                yield event.decode(), orjson.loads(line[5:])


def profile_seq(ops: list[dict[str, Any]]) -> int | None:
    seqs = [seq_of(op["value"].get("name")) for op in ops if op["op"] == "upsert"]
    return max((s for s in seqs if s is not None), default=None)


def timeline_seq(ops: list[dict[str, Any]], author: str) -> int | None:
    seqs = [seq_of(op["value"].get("name")) for op in ops
            if op["op"] == "upsert" and op["value"].get("author") == author]  # fmt: skip
    return max((s for s in seqs if s is not None), default=None)


async def watch_member(session: aiohttp.ClientSession, base: str, user: int, channel: str,
                       arrivals: Arrivals, ready: asyncio.Event) -> None:  # fmt: skip
    """One member's own stream: ``profiles/u<user>`` or its follower's timeline."""
    reader = f"u{follower(user)}"
    path = f"profiles/u{user}" if channel == "profile" else f"timeline/{reader}"
    async for event, data in frames(session, f"{base}/v1/views/{path}/live", reader, ready):
        if event != "delta":
            continue
        now = time.monotonic()
        ops = data["ops"]
        seq = profile_seq(ops) if channel == "profile" else timeline_seq(ops, f"u{user}")
        if seq is not None:
            arrivals.reflected(channel, user, seq, now)


async def watch_group(session: aiohttp.ClientSession, base: str, user: int, arrivals: Arrivals,
                      ready: asyncio.Event) -> None:  # fmt: skip
    """The group of both: a rename reached it once both members show it."""
    reader = f"u{follower(user)}"
    query = urlencode([("view", "profiles"), ("key", f"u{user}"),
                       ("view", "timeline"), ("key", reader)])  # fmt: skip
    shown = [-1, -1]
    async for event, data in frames(session, f"{base}/v1/groups/live?{query}", reader, ready):
        if event != "group":
            continue
        now = time.monotonic()
        for member in data["frames"]:
            if member["type"] != "delta":
                continue
            ops = member["data"]["ops"]
            i = int(member["sub"][1:])
            seq = profile_seq(ops) if i == 0 else timeline_seq(ops, f"u{user}")
            if seq is not None:
                shown[i] = max(shown[i], seq)
        if min(shown) >= 0:
            arrivals.reflected("group", user, min(shown), now)


def watchers(session: aiohttp.ClientSession, base: str, watched: int, arrivals: Arrivals,
             readies: list[asyncio.Event]) -> Iterator[Any]:  # fmt: skip
    for user in range(watched):
        for channel in ("profile", "timeline"):
            ready = asyncio.Event()
            readies.append(ready)
            yield watch_member(session, base, user, channel, arrivals, ready)
        ready = asyncio.Event()
        readies.append(ready)
        yield watch_group(session, base, user, arrivals, ready)


async def measure(base: str, rate: int, seconds: float, watched: int) -> Arrivals:
    arrivals = Arrivals()
    phase = Watching(rate, arrivals, watched)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        readies: list[asyncio.Event] = []
        tasks = [asyncio.create_task(w)
                 for w in watchers(session, base, watched, arrivals, readies)]  # fmt: skip
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 120)
        await publish(session, base, phase, seconds, f"g0r{rate}x")
        await asyncio.sleep(SETTLE_S)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if phase.errors:
        raise RuntimeError(f"{phase.errors} publishes were refused")
    return arrivals


def run(quick: bool = False, seconds: float = 60, rate: int = 100, watched: int = WATCHED
        ) -> Report:  # fmt: skip
    if quick:
        seconds, rate, watched = 4, 10, 2
    moment = Moment()
    with running_store() as system:
        seed(system)
        system.start_gateway()
        system.start_pipeline(configuration_env("tuned"))
        system.wait_until_caught_up(timeout=300)
        arrivals = asyncio.run(measure(system.base, rate, seconds, watched))
    values = arrivals.latencies()
    stats = {name: latency_stats(v) for name, v in values.items()}
    figures = {"rate": rate, "seconds": seconds, "watched_users": watched,
               "renames_measured": len(values["added"]),
               "renames_posted": len(arrivals.sent), **stats}  # fmt: skip
    save("groups", figures, moment)
    print(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())

    def p(name: str, q: float) -> str:
        return f"{percentile(values[name], q):.0f}"

    rows = [
        Row(
            figure=f"POST to SSE group frame of a profile and a timeline at {rate} events/s, "
                   "p50 / p99 (ms)",
            measured=f"{p('group', 50)} / {p('group', 99)}",
            baseline=f"slower member alone, same renames: {p('slowest_member', 50)} / "
                     f"{p('slowest_member', 99)}; profile {p('profile', 50)} / "
                     f"{p('profile', 99)}, timeline {p('timeline', 50)} / {p('timeline', 99)}",
        ),
        Row(
            figure="what the group adds over its slower member, per rename, p50 / p99 (ms)",
            measured=f"{p('added', 50)} / {p('added', 99)}",
        ),
    ]  # fmt: skip
    return Report("groups", "What a group adds", "python -m bench.groups", figures, rows, [],
                  moment=moment.finish())  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rate", type=int, default=100, help="renames per second")
    parser.add_argument("--watched", type=int, default=WATCHED,
                        help="users measured, each followed by three streams")  # fmt: skip
    args = parser.parse_args()
    run(args.quick, args.seconds, args.rate, args.watched)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
