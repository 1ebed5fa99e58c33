"""What keeping bad events out of the views costs a pipeline, per event, in plain Python.

    .venv/bin/python -m bench.deadletters [--quick] [--events 20000]

Three figures, each the best of a few rounds over Chirp's own activity:

- the source's check of one log entry (``liveviews.log.screen.check_entry``), which each
  pipeline's source makes of every entry it reads;
- Chirp's entities processor over a micro-batch, bare and wrapped by ``isolated`` (the state
  writes held back, the rows sorted into log order), per event; their difference is what the
  wrapper costs when no event raises;
- the same batch with one bad event in every bucket of users: what finding each by splitting
  its group costs, per bad event.

The processors run over an in-memory stand-in for Spark's state handle (a dict per map
state), so the figures are the Python the wrapper adds, without the JVM round trips that both
forms pay alike.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from typing import Any

from bench.common import Report, Row, save
from bench.moment import Moment
from demo.chirp import app
from demo.chirp.generate import Activity
from demo.chirp.views import BUCKETS, EntityProcessor
from liveviews.log.events import partition_for
from liveviews.log.screen import check_entry

PARTITIONS = 4
ROUNDS = 5


class MapState:
    def __init__(self) -> None:
        self.data: dict[Any, Any] = {}

    def getValue(self, key: Any) -> Any:
        return self.data.get(tuple(key))

    def updateValue(self, key: Any, value: Any) -> None:
        self.data[tuple(key)] = tuple(value)

    def removeKey(self, key: Any) -> None:
        self.data.pop(tuple(key), None)


class Handle:
    def getMapState(self, name: str, *schemas: Any) -> MapState:
        return MapState()


def _rows(n: int, bad_per_bucket: bool = False) -> dict[int, list[Any]]:
    """Chirp activity as ``entity_input`` rows, by bucket; optionally one row per bucket that
    raises (a tweet whose payload lacks its text)."""
    import zlib

    import orjson
    from pyspark.sql import Row

    events = app.validate_batch(Activity(users=200, seed=2).take(n))
    by_bucket: dict[int, list[Any]] = defaultdict(list)
    seq = 0
    for e in events:
        seq += 1
        bucket = zlib.crc32(e.key.encode()) % BUCKETS
        by_bucket[bucket].append(Row(
            bucket=bucket, partition=partition_for(e.key, PARTITIONS), key=e.key,
            offset=f"1-{seq}", type=e.type, payload=orjson.dumps(e.payload).decode(),
            event_time_ms=e.time_ms,
        ))  # fmt: skip
    if bad_per_bucket:
        for bucket, rows in by_bucket.items():
            seq += 1
            user = rows[0]["key"]
            rows.insert(len(rows) // 2, Row(
                bucket=bucket, partition=partition_for(user, PARTITIONS), key=user,
                offset=f"1-{seq}", type="tweet_posted",
                payload=orjson.dumps({"user": user, "tweet": f"{user}:bad"}).decode(),
                event_time_ms=1,
            ))  # fmt: skip
    return by_bucket


def _process(by_bucket: dict[int, list[Any]], wrapped: bool) -> float:
    """Seconds to run one micro-batch of every bucket through a fresh processor."""
    from pyspark.sql.streaming.stateful_processor import TimerValues

    from liveviews.pipeline.isolation import isolated

    processor = isolated(EntityProcessor()) if wrapped else EntityProcessor()
    processor.init(Handle())  # type: ignore[arg-type]
    timers = TimerValues()
    t0 = time.perf_counter()
    for bucket, rows in by_bucket.items():
        for _ in processor.handleInputRows((bucket,), iter(rows), timers):
            pass
    return time.perf_counter() - t0


def _best(fn: Any, rounds: int) -> float:
    return min(fn() for _ in range(rounds))


def run(quick: bool = False, events: int = 20_000, name: str = "deadletters") -> Report:
    if quick:
        events = 2000
    rounds = 2 if quick else ROUNDS
    moment = Moment()
    validated = app.validate_batch(Activity(users=200, seed=1).take(events))
    entries = [(partition_for(e.key, PARTITIONS), e.encode()) for e in validated]

    def screen() -> float:
        t0 = time.perf_counter()
        for p, fields in entries:
            check_entry(app, p, PARTITIONS, fields)
        return time.perf_counter() - t0

    good = _rows(events)
    bad = _rows(events, bad_per_bucket=True)
    bad_events = len(bad)
    figures = {
        "events": events,
        "screen_us_per_entry": round(_best(screen, rounds) / events * 1e6, 2),
        "entities_bare_us_per_event": round(_best(lambda: _process(good, False), rounds)
                                            / events * 1e6, 2),  # fmt: skip
        "entities_isolated_us_per_event": round(_best(lambda: _process(good, True), rounds)
                                                / events * 1e6, 2),  # fmt: skip
        "bad_events": bad_events,
        "isolating_us_per_bad_event": round(
            (_best(lambda: _process(bad, True), rounds) - _best(lambda: _process(good, True),
                                                                rounds)) / bad_events * 1e6, 1),
    }  # fmt: skip
    save(name, figures, moment)
    rows = [
        Row("the source's check of one log entry, per pipeline",
            f"{figures['screen_us_per_entry']} µs"),
        Row(f"Chirp's entities processor, {events:,} events in {len(good)} buckets: bare",
            f"{figures['entities_bare_us_per_event']} µs/event"),
        Row("the same, isolated (state writes held back, rows in log order)",
            f"{figures['entities_isolated_us_per_event']} µs/event"),
        Row(f"finding one raising event per bucket ({bad_events} of them) by splitting",
            f"{figures['isolating_us_per_bad_event']} µs per bad event"),
    ]  # fmt: skip
    note = (
        "Each pipeline's source checks every entry it reads, so Chirp (two pipelines) pays the"
        " check twice per event; the isolated processor's figure includes the bare one."
    )
    report = Report(name, "What keeping bad events out of the views costs",
                    "python -m bench.deadletters", figures, rows, notes=[note],
                    moment=moment.finish())  # fmt: skip
    for row in rows:
        print(f"{row.figure}: {row.measured}")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--events", type=int, default=20_000)
    args = parser.parse_args()
    run(args.quick, args.events)


if __name__ == "__main__":
    main()
