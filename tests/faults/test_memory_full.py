"""The store at its ``maxmemory`` under load, then given room again.

The store's limit is set just below what it holds (``CONFIG SET maxmemory``), so it refuses
every write: the gateway's publishes, the pipeline's sink. A publisher posts through the
gateway, a pipeline runs under ``liveviews.supervise`` and an SSE subscriber follows
``activity/global``. While full: every publish is answered 202 or 503 ``store_full`` (never 202
for an event that was not written), the gateway keeps serving snapshots (its reads must not
begin with a write the store would refuse), and no event is set aside as a dead letter. Once
the limit is raised, publishes are taken and the subscriber receives again with nobody
restarting anything; at the end every acknowledged event is in the log once and the views are
consistent with it.

The pipeline's sink retries a batch the store refused for memory for ``OUTAGE_SECONDS``: a store
full for less than that pauses the pipeline, which is not restarted.

``LV_FAULT_STALL_S`` keeps the store full that long (default 5 s); ``LV_FAULT_SEED``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import redis

from liveviews.log import deadletters
from liveviews.store.client import OUTAGE_SECONDS
from liveviews.store.embedded import EmbeddedStore
from tests.faults.clients import (
    ClientLoop,
    Publisher,
    Resumer,
    dev_token,
    snapshot_served,
    sse_subscriber,
)
from tests.faults.ending import logged_once, receives_again, taken_again, wind_down
from tests.faults.harness import (
    Figures,
    Gateway,
    Knobs,
    Pipeline,
    wait_for_progress,
    wait_until,
)
from tests.support.gateway import free_port

KNOBS = Knobs.from_env(kills=1)
# scripts/faults.sh passes 0 when no STALL is given: the default then.
FULL_S = float(os.environ.get("LV_FAULT_STALL_S") or 0) or 5.0
ROOMY = 512 * 1_048_576


def used_memory(client: redis.Redis) -> int:
    info: Any = client.info("memory")
    return int(info["used_memory"])


@pytest.mark.timeout(420 + int(FULL_S))
def test_a_store_at_its_maxmemory_keeps_reads_and_recovers(tmp_path):
    figures = Figures("memory_full", {"seed": KNOBS.seed, "full_s": FULL_S})
    store = EmbeddedStore(tmp_path / "store", free_port(), appendfsync="always", maxmemory=ROOMY)
    url = store.start()
    client = redis.Redis.from_url(url)
    pipeline = Pipeline(url, tmp_path, supervised=True)
    gateway = Gateway(url, tmp_path, free_port())
    clients = ClientLoop()
    watcher = Resumer("sse-activity", "activity", "global")
    publisher = Publisher(gateway.url, KNOBS.seed)
    try:
        gateway.start()
        pipeline.start()
        publisher.start()
        wait_for_progress(client, 0, pipeline)
        clients.spawn(sse_subscriber(gateway.url, dev_token("watcher"), watcher, clients.halt))
        wait_until("a snapshot", lambda: watcher.state.last_id is not None)
        time.sleep(1)
        client.config_set("maxmemory", int(used_memory(client) * 0.98))
        full_at = time.monotonic()
        wait_until("a publish refused store_full",
                   lambda: publisher.answers["503 store_full"] > 0, timeout=10)  # fmt: skip
        refused_after_s = time.monotonic() - full_at
        progress = client.xlen("lv:{m}:progress")
        time.sleep(FULL_S)
        batches_while_full = client.xlen("lv:{m}:progress") - progress
        assert snapshot_served(gateway.url), "the gateway stopped serving reads"
        client.config_set("maxmemory", ROOMY)
        freed_at = time.monotonic()
        taken_after_s = taken_again(publisher, freed_at)
        delivering_after_s = receives_again(watcher, freed_at)
        time.sleep(1)
        catch_up = wind_down(client, pipeline, publisher, [watcher])
        assert pipeline.alive(), "the pipeline's supervisor gave up"
    finally:
        publisher.halt.set()
        clients.stop()
        gateway.stop()
        pipeline.stop()
    try:
        assert deadletters.listed(client) == [], "the store's refusal set events aside"
        deltas = logged_once(client, publisher.acked)
    finally:
        client.close()
        store.stop()
    answers = {k: v for k, v in publisher.answers.items() if k != "202"}
    assert set(answers) == {"503 store_full"}, (answers, publisher.refused_bodies[:3])
    starts = pipeline.supervised_starts()
    if FULL_S < OUTAGE_SECONDS / 2:
        assert starts == 1, "the pipeline was restarted: a store out of memory should pause it"
    figures.values.update(
        events_acknowledged=len(publisher.acked),
        publishes_refused=answers["503 store_full"],
        refused_within_s=round(refused_after_s, 2),
        batches_written_while_full=batches_while_full,
        taken_again_within_s=round(taken_after_s, 2),
        delivering_again_within_s=round(delivering_after_s, 1),
        pipeline_starts_under_supervisor=starts,
        deltas_checked=deltas,
        catch_up_s=round(catch_up, 1),
    )
    figures.print()
