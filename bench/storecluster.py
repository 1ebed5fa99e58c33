"""The store's throughput on one server against a cluster of three primaries.

    .venv/bin/python -m bench.storecluster [--quick]

Each round starts a fresh store of each kind, alternating (the machine's moment drifts): the
embedded single server, and a local cluster (``liveviews.store.cluster``) of three
primaries with a replica each, on the same machine, with the same persistence
(``appendfsync always``). On both:

- **appends**: Chirp events through ``EventLog.append_batch`` (100 per call, the size of a
  busy gateway's POST) from ``WRITERS`` processes at once: on a single server one MULTI of
  every partition's script, on a cluster one script per partition on its primary;
- **row changes**: Chirp-shaped row changes through ``ChangeTopicSink.write`` in micro-batches
  of 20,000 (``bench.store``'s mix), one writer, as the pipeline's driver writes them;
- **feed reads**: the deltas those wrote, read back shard by shard as a gateway's change feed
  reads them: what each gateway process costs the store per delta.

Figures: events and row changes per second (wall), and the store's CPU per operation (``INFO
cpu``) summed over the primaries, with how it is split between them and what the replicas
spend. On one 2-core machine six server processes share the cores the single server has to
itself, so the cluster's wall-clock rate here is not what three machines would give; its CPU
per operation and the split between primaries are what docs/SCALING.md's model scales from.
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Report, Row, free_port, save, store_cpu_s
from bench.moment import Moment
from bench.store import _app, _batches
from demo.chirp import app as chirp
from demo.chirp.generate import Activity
from liveviews.changes.topic import changes_stream
from liveviews.log.eventlog import EventLog
from liveviews.pipeline.sink import ChangeTopicSink
from liveviews.store.client import connect
from liveviews.store.cluster import StoreCluster, free_port_range
from liveviews.store.embedded import EmbeddedStore

KINDS = ("single", "cluster")
WRITERS = 4
PER_CALL = 100
PARTITIONS = 4
SHARDS = 16
FEED_COUNT = 1000


def _writer(url: str, events: int, seed: int, ready: Any, go: Any) -> None:
    client = connect(url, socket_timeout=120)
    log = EventLog(client, chirp, PARTITIONS)
    activity = Activity(users=20_000, seed=seed)
    calls = [activity.take(PER_CALL) for _ in range(events // PER_CALL)]
    ready.release()
    go.wait()
    for chunk in calls:
        log.append_batch(chunk)


def _cpu(url: str) -> float:
    with connect(url, socket_timeout=30) as client:  # a node's own CPU: a plain client of it
        return store_cpu_s(client)


def _read_change_topic(client: Any) -> int:
    """Read every shard from its start as a gateway's change feed does (XREAD, 1,000 entries
    a read, one shard a command so that it works on both): the deltas read."""
    read = 0
    for shard in range(SHARDS):
        after = "0-0"
        while True:
            got: Any = client.xread({changes_stream(shard): after}, count=FEED_COUNT)
            entries = got[0][1] if got else []
            if not entries:
                break
            read += len(entries)
            after = entries[-1][0]
    return read


class _Store:
    """The store of one kind: its URL, and the URL of each primary and replica."""

    def __init__(self, kind: str, where: Path) -> None:
        self.kind = kind
        if kind == "single":
            self.server: Any = EmbeddedStore(where, free_port(), appendfsync="always")
        else:
            self.server = StoreCluster(where, free_port_range(12), appendfsync="always")

    def __enter__(self) -> _Store:
        self.url = self.server.start()
        if self.kind == "single":
            self.primaries, self.replicas = [self.url], []
        else:
            nodes = range(self.server.nodes)
            self.primaries = [self.server.node_url(n) for n in nodes
                              if self.server.role(n) == "master"]  # fmt: skip
            self.replicas = [self.server.node_url(n) for n in nodes
                             if self.server.role(n) != "master"]  # fmt: skip
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    def cpu(self) -> tuple[list[float], list[float]]:
        return [_cpu(u) for u in self.primaries], [_cpu(u) for u in self.replicas]


def _spent(before: tuple[list[float], list[float]], after: tuple[list[float], list[float]]
           ) -> tuple[list[float], float]:  # fmt: skip
    primaries = [a - b for a, b in zip(after[0], before[0], strict=True)]
    return primaries, sum(a - b for a, b in zip(after[1], before[1], strict=True))


def measure(kind: str, batches: list[list[dict[str, Any]]], events: int) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="lv-bench-storecluster-") as tmp,
        _Store(kind, Path(tmp)) as store,
    ):
        ctx = multiprocessing.get_context("spawn")
        ready, go = ctx.Semaphore(0), ctx.Event()
        writers = [ctx.Process(target=_writer, args=(store.url, events // WRITERS, i, ready, go))
                   for i in range(WRITERS)]  # fmt: skip
        for w in writers:
            w.start()
        for _ in writers:
            ready.acquire()
        before, t0 = store.cpu(), time.perf_counter()
        go.set()
        for w in writers:
            w.join()
            if w.exitcode:
                raise RuntimeError(f"an appending process failed ({w.exitcode})")
        append_s = time.perf_counter() - t0
        append_primaries, append_replicas = _spent(before, store.cpu())

        client = connect(store.url, socket_timeout=120)
        sink = ChangeTopicSink(client, _app(), "bench", SHARDS, retention=1_000_000)
        rows = sum(len(b) for b in batches)
        before, t0 = store.cpu(), time.perf_counter()
        for batch_id, batch in enumerate(batches):
            sink.write(batch, batch_id)
        sink_s = time.perf_counter() - t0
        sink_primaries, sink_replicas = _spent(before, store.cpu())
        before = store.cpu()
        deltas = _read_change_topic(client)
        read_primaries, _ = _spent(before, store.cpu())
        client.close()
        return {
            "kind": kind,
            "appends_per_s": round(events / append_s),
            "append_us": round(sum(append_primaries) / events * 1e6, 2),
            "append_primary_share": [
                round(c / sum(append_primaries), 2) for c in append_primaries
            ],  # fmt: skip
            "append_replica_us": round(append_replicas / events * 1e6, 2),
            "row_changes_per_s": round(rows / sink_s),
            "row_change_us": round(sum(sink_primaries) / rows * 1e6, 2),
            "row_change_primary_share": [
                round(c / sum(sink_primaries), 2) for c in sink_primaries
            ],  # fmt: skip
            "row_change_replica_us": round(sink_replicas / rows * 1e6, 2),
            "deltas_read": deltas,
            "delta_read_us": round(sum(read_primaries) / deltas * 1e6, 3),
        }


def run(quick: bool = False, name: str = "storecluster") -> Report:
    moment = Moment()
    batches = _batches(2, 2000) if quick else _batches(5, 20_000)
    events = 4_000 if quick else 200_000
    rounds = 1 if quick else 2
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    for _ in range(rounds):
        for kind in KINDS:
            runs[kind].append(measure(kind, batches, events))
    keys = ("appends_per_s", "append_us", "append_replica_us", "row_changes_per_s",
            "row_change_us", "row_change_replica_us", "delta_read_us")  # fmt: skip
    best = {k: {f: (max if f.endswith("_per_s") else min)(r[f] for r in rs) for f in keys}
            for k, rs in runs.items()}  # fmt: skip
    figures = {"events": events, "writers": WRITERS, "events_per_call": PER_CALL,
               "row_changes": sum(len(b) for b in batches), "batches": len(batches),
               "best": best, "runs": runs}  # fmt: skip
    save(name, figures, moment)
    one, many = best["single"], best["cluster"]
    split = runs["cluster"][0]
    rows = [
        Row(f"events appended per second, {WRITERS} clients, {PER_CALL} per call: cluster of 3 "
            "primaries + 3 replicas on this machine", f"{many['appends_per_s']:,}", "",
            f"one server: {one['appends_per_s']:,}"),
        Row("store CPU per appended event, summed over primaries (cluster)",
            f"{many['append_us']} µs, split {split['append_primary_share']}; replicas "
            f"{many['append_replica_us']} µs", "", f"one server: {one['append_us']} µs"),
        Row("row changes applied per second, one sink: cluster", f"{many['row_changes_per_s']:,}",
            "", f"one server: {one['row_changes_per_s']:,}"),
        Row("store CPU per row change, summed over primaries (cluster)",
            f"{many['row_change_us']} µs, split {split['row_change_primary_share']}; replicas "
            f"{many['row_change_replica_us']} µs", "", f"one server: {one['row_change_us']} µs"),
        Row("store CPU per delta a gateway's change feed reads (XREAD of 1,000): cluster",
            f"{many['delta_read_us']} µs", "", f"one server: {one['delta_read_us']} µs"),
    ]  # fmt: skip
    note = (f"Best of {rounds} alternating rounds of each; every round is in "
            f"`{name}.json`. Six server processes share this machine's two cores in the "
            "cluster runs; the CPU per operation and its split between primaries are what "
            "scales to one primary per machine (docs/SCALING.md).")  # fmt: skip
    return Report(name, "The store: one server against a cluster of three primaries",
                  "python -m bench.storecluster", figures, rows, notes=[note],
                  moment=moment.finish())  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.storecluster", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    run(parser.parse_args().quick)


if __name__ == "__main__":
    main()
