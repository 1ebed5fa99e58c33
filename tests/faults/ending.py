"""How a fault test under load ends: the publisher stops, the views catch up, every subscriber
holds the stored rows; then the log holds exactly what was acknowledged and the views are
consistent with it."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

import redis

from demo.chirp import app as chirp
from liveviews.log.events import LoggedEvent, Offset, log_stream
from liveviews.pipeline.versions import active_namespaces
from tests.faults.clients import Publisher, Resumer, missing_acked
from tests.faults.harness import PARTITIONS, SHARDS, Pipeline, wait_caught_up, wait_until
from tests.support.checks import assert_views_consistent
from tests.support.gateway import stored_rows
from tests.support.kafkalog import frontier_covers


def wind_down(
    client: redis.Redis, pipeline: Pipeline, publisher: Publisher, subscribers: Sequence[Resumer],
    view: str = "activity", key: str = "global", timeout: float = 180,
) -> float:  # fmt: skip
    """Stop publishing; once the views caught up, each subscriber must hold the stored rows
    with no failure. Returns how long the views took to catch up."""
    publisher.stop()
    catch_up = wait_caught_up(client, pipeline, timeout)
    want = stored_rows(client, view, key, SHARDS)
    for r in subscribers:
        wait_until(f"{r.name} holds the stored rows", lambda r=r: r.state.rows == want, 30)
        assert r.failure is None, r.failure
    return catch_up


def logged_once(client: redis.Redis, acked: list[tuple[int, str]]) -> int:
    """Every acknowledged event is in the log once and nothing else is (each batch was sent
    until taken, under one key), and the views are consistent with the log. Returns how many
    deltas were checked."""
    missing = missing_acked(client, acked)
    assert not missing, f"acknowledged events lost: {missing[:5]}"
    logged = sum(client.xlen(log_stream(p)) for p in range(PARTITIONS))
    assert len(set(acked)) == len(acked) == logged
    return assert_views_consistent(client, PARTITIONS, SHARDS)


def taken_again(publisher: Publisher, since: float, timeout: float = 30) -> float:
    """Seconds from ``since`` (monotonic) until publishes are taken again (20 more)."""
    acked = len(publisher.acked)
    wait_until("publishes taken again", lambda: len(publisher.acked) > acked + 20, timeout)
    return time.monotonic() - since


def receives_again(subscriber: Resumer, since: float, timeout: float = 180) -> float:
    """Seconds from ``since`` (monotonic) until ``subscriber`` receives a new delta."""
    seen = len(subscriber.state.ids)
    wait_until(f"{subscriber.name} receives again", lambda: len(subscriber.state.ids) > seen,
               timeout)  # fmt: skip
    return time.monotonic() - since


def wind_down_on_kafka(
    store: redis.Redis, publisher: Publisher, subscribers: Sequence[Resumer], timeout: float = 180
) -> float:
    """``wind_down`` on a Kafka log, whose frontier is compared with the acknowledged offsets:
    each subscriber must then hold the stored rows of what it follows, in the version readers
    are served. Returns how long the views took to catch up."""
    publisher.stop()
    acked = [Offset(p, i) for p, i in publisher.acked]
    t0 = time.monotonic()
    wait_until("the views reflected every acknowledged event",
               lambda: frontier_covers(store, acked), timeout)  # fmt: skip
    catch_up = time.monotonic() - t0
    active = active_namespaces(store)
    pipeline_of = {v: name for name, p in chirp.pipelines.items() for v in p.views}
    for r in subscribers:
        # The version readers are served: a rebuilt one's rows are under its namespace.
        namespace = active.get(pipeline_of[r.view], "")
        want = stored_rows(store, r.view, r.key, SHARDS, namespace)
        wait_until(f"{r.name} reached the stored rows",
                   lambda r=r, want=want: r.state.rows == want or r.failure is not None, 30)  # fmt: skip
        assert r.failure is None, f"{r.name}: {r.failure}"
    return catch_up


def kafka_logged_once(log: list[list[LoggedEvent]], acked: list[tuple[int, str]]) -> None:
    """The Kafka log read back holds exactly the acknowledged events: none acknowledged twice,
    none missing, none that no answer acknowledged."""
    in_log = Counter((e.partition, e.id) for part in log for e in part)
    answered = Counter(acked)
    assert max(answered.values()) == 1, "an offset acknowledged twice"
    assert set(answered) - set(in_log) == set(), "acknowledged events missing from the log"
    assert set(in_log) - set(answered) == set(), "events in the log that no answer acknowledged"
