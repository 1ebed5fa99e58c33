"""Cuts (``liveviews.changes.cuts``): every source of a pipeline a cut names ends a batch
exactly at it, whatever else bounds the batch; the sources of other pipelines read past it."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from demo.chirp import app
from demo.chirp.generate import Activity
from liveviews.changes.cuts import (
    CUT_SCRIPT,
    Cut,
    cut_args,
    cut_keys,
    cut_of,
    end_at_cut,
    next_cut,
)
from liveviews.log.eventlog import EventLog
from liveviews.log.events import entry_id_tuple
from liveviews.pipeline.source import LogDataSource, LogPrefetchReader, LogStreamReader

PARTITIONS = 4


def cut(pipelines: str, **positions: str) -> Cut:
    return Cut("1-0", frozenset(pipelines.split(",")), {p[1:]: at for p, at in positions.items()})


def test_the_next_cut_is_the_oldest_one_for_the_pipeline_not_passed_yet() -> None:
    start = {"0": "5-0", "1": "7-0"}
    passed = cut("views", p0="9-0", p1="6-0")  # partition 1 read past it already
    other = cut("others", p0="6-0", p1="8-0")
    reached = cut("views", p0="5-0", p1="7-0")  # where the pipeline is: nothing to end at
    ahead = cut("views,others", p0="6-0", p1="7-0")
    later = cut("views", p0="8-0", p1="9-0")
    cuts = [passed, other, reached, ahead, later]
    assert next_cut("views", start, cuts) == ahead
    assert next_cut("others", start, cuts) == other
    assert next_cut("nobody", start, cuts) is None


def test_a_batch_that_would_read_past_the_cut_ends_at_it() -> None:
    start = {"0": "5-0", "1": "7-0", "2": "0-0"}
    at = cut("views", p0="6-0", p1="7-0", p2="3-0")
    assert end_at_cut("views", start, {"0": "9-0", "1": "8-0", "2": "2-0"}, [at]) == {
        "0": "6-0", "1": "7-0", "2": "2-0"}  # fmt: skip
    assert end_at_cut("others", start, {"0": "9-0", "1": "8-0", "2": "2-0"}, [at]) == {
        "0": "9-0", "1": "8-0", "2": "2-0"}  # fmt: skip


def reader(store_url: str, pipeline: str, cap: int = 1000, tasks: str = "0") -> Any:
    options = {"url": store_url, "partitions": str(PARTITIONS), "maxEventsPerBatch": str(cap),
               "readTasks": tasks, "pipeline": pipeline}  # fmt: skip
    source = LogDataSource(options)
    if tasks == "0":
        return source.simpleStreamReader(LogDataSource.schema(source))
    return source.streamReader(LogDataSource.schema(source))


def append_cut(store: redis.Redis, pipelines: str) -> Cut:
    keys = cut_keys(PARTITIONS)
    return cut_of(store.eval(CUT_SCRIPT, len(keys), *keys, *cut_args(pipelines.split(","))))[0]


def rows(batches: Any) -> int:
    return sum(b.num_rows for b in batches if isinstance(b, pa.RecordBatch))


def test_the_script_appends_the_heads_of_the_log(store: redis.Redis) -> None:
    empty = append_cut(store, "views")
    assert dict(empty.positions) == {str(p): "0-0" for p in range(PARTITIONS)}
    offsets = EventLog(store, app, PARTITIONS).append_batch(Activity(users=30, seed=2).take(50))
    heads = {str(p): "0-0" for p in range(PARTITIONS)}
    for o in sorted(offsets, key=lambda o: entry_id_tuple(o.id)):
        heads[str(o.partition)] = o.id
    at = append_cut(store, "views,others")
    assert at.pipelines == {"views", "others"} and dict(at.positions) == heads


def test_each_reader_of_a_pipeline_ends_a_batch_at_its_cut(store: redis.Redis, store_url: str):
    log = EventLog(store, app, PARTITIONS)
    activity = Activity(users=30, seed=3)
    log.append_batch(activity.take(60))
    at = append_cut(store, "profiles")
    log.append_batch(activity.take(60))
    start = {str(p): "0-0" for p in range(PARTITIONS)}

    batches, end = reader(store_url, "profiles").read(start)
    assert end == dict(at.positions) and rows(batches) == 60
    batches, after = reader(store_url, "profiles").read(end)
    assert rows(batches) == 60  # past the cut, the next batch reads on
    assert rows(reader(store_url, "entities").read(start)[0]) == 120

    executors = reader(store_url, "profiles", tasks="1")
    assert isinstance(executors, LogStreamReader)
    assert executors.latestOffset(start, ReadAllAvailable()) == dict(at.positions)
    assert executors.latestOffset(start, ReadMaxRows(1000)) == dict(at.positions)
    assert executors.latestOffset(end, ReadAllAvailable()) == after


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(st.sampled_from(["append", "cut", "read"]), min_size=1, max_size=30),
    cap=st.integers(min_value=4, max_value=60),
    seed=st.integers(min_value=0, max_value=1000),
)
def test_every_cut_is_the_end_of_a_batch_whatever_the_cap(
    store: redis.Redis, store_url: str, steps: list[str], cap: int, seed: int
) -> None:
    """Appends, cuts for the pipeline or another, and batches read in any order and with any
    cap: the pipeline's batch ends are a sequence that holds every cut for it; the other's
    cuts change nothing."""
    store.flushdb()
    log, activity, rng = (
        EventLog(store, app, PARTITIONS),
        Activity(users=20, seed=seed),
        random.Random(seed),
    )
    source = reader(store_url, "views", cap)
    assert isinstance(source, LogPrefetchReader)
    start = source.initialOffset()
    ends, cuts = [], []

    def read() -> None:
        nonlocal start
        _, end = source.read(start)
        for p in start:
            assert entry_id_tuple(end[p]) >= entry_id_tuple(start[p])
        if end != start:
            ends.append(end)
        start = end

    for step in steps:
        if step == "append":
            log.append_batch(activity.take(rng.randint(1, 40)))
        elif step == "cut":
            made = append_cut(store, rng.choice(["views", "views,others", "others"]))
            if "views" in made.pipelines:
                cuts.append(dict(made.positions))
        else:
            read()
    while True:  # to the log's heads
        before = start
        read()
        if start == before:
            break
    for made in cuts:
        assert made in ends or made == source.initialOffset(), (made, ends)
