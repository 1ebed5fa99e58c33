"""Fill the store's disk under load, then free it.

The store's files live on a small file system the test mounts (tmpfs); a publisher posts
through a gateway, a pipeline runs under ``liveviews.supervise`` and an SSE subscriber follows
``activity/global``. The test fills the disk to under the store's reserve
(``LV_STORE_DISK_RESERVE``) and keeps it there for a while. Meanwhile: every publish is answered
202 or 503 ``store_disk_full`` (never 202 for an event that was not written), the store stays up
and the gateway keeps serving snapshots, and no event of the pipeline's refused batches is set
aside as a dead letter. The pipeline's sink retries a refused batch (for ``OUTAGE_SECONDS``), so
a disk full for less than that pauses the pipeline rather than restarting it. Once the file
filling the disk is removed, publishes are taken again and the subscriber receives again, with
no one restarting anything by hand; at the end every
acknowledged event is in the log once, and the views are consistent with it.

``LV_FAULT_STALL_S`` keeps the disk full that long (default 5 s); ``LV_FAULT_SEED``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

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
from tests.support.disk import fill, small_filesystem
from tests.support.gateway import free_port

KNOBS = Knobs.from_env(kills=1)
# scripts/faults.sh passes 0 when no STALL is given: the default then.
FULL_S = float(os.environ.get("LV_FAULT_STALL_S") or 0) or 5.0
DISK_MB = 160
RESERVE = 32 * 1_048_576


@pytest.fixture()
def disk(tmp_path: Path) -> Iterator[Path]:
    """A file system of the test's own under the store, which the test fills."""
    with small_filesystem(tmp_path / "disk", DISK_MB) as path:
        yield path


@pytest.mark.timeout(420 + int(FULL_S))
def test_a_full_disk_refuses_publishes_keeps_reads_and_recovers(tmp_path, disk):
    figures = Figures("disk_full", {"seed": KNOBS.seed, "full_s": FULL_S})
    store = EmbeddedStore(disk, free_port(), appendfsync="always", disk_reserve=RESERVE)
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
        filler = fill(disk, leave=RESERVE // 2)
        full_at = time.monotonic()
        wait_until("a publish refused store_disk_full",
                   lambda: publisher.answers["503 store_disk_full"] > 0, timeout=10)  # fmt: skip
        refused_after_s = time.monotonic() - full_at
        time.sleep(FULL_S)
        assert store.process is not None and store.process.poll() is None, "the store exited"
        assert snapshot_served(gateway.url), "the gateway stopped serving reads"
        filler.unlink()
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
        store.stop()
    store.start()
    try:
        assert deadletters.listed(client) == [], "the store's refusal set events aside"
        deltas = logged_once(client, publisher.acked)
    finally:
        client.close()
        store.stop()
    answers = {k: v for k, v in publisher.answers.items() if k != "202"}
    assert set(answers) == {"503 store_disk_full"}, (answers, publisher.refused_bodies[:3])
    starts = pipeline.supervised_starts()
    if FULL_S < OUTAGE_SECONDS / 2:
        assert starts == 1, "the pipeline was restarted: a store refusing writes should pause it"
    figures.values.update(
        disk_mb=DISK_MB,
        reserve_mb=RESERVE // 1_048_576,
        events_acknowledged=len(publisher.acked),
        publishes_refused=answers["503 store_disk_full"],
        refused_within_s=round(refused_after_s, 2),
        taken_again_within_s=round(taken_after_s, 2),
        delivering_again_within_s=round(delivering_after_s, 1),
        pipeline_starts_under_supervisor=starts,
        deltas_checked=deltas,
        catch_up_s=round(catch_up, 1),
    )
    figures.print()


@pytest.mark.timeout(420 + int(FULL_S))
def test_a_full_checkpoint_disk_pauses_the_views_and_recovers(tmp_path, disk):
    """The pipeline's checkpoints (Spark's offset and commit logs, its state) on the small file
    system, filled to the last byte under load: publishes are still taken, the gateway keeps
    serving what the views hold, nothing is set aside as a dead letter and no half-written
    checkpoint file stops a restart; once the space is freed the views catch up by themselves,
    each event counted once."""
    figures = Figures("checkpoint_disk_full", {"seed": KNOBS.seed, "full_s": FULL_S})
    store = EmbeddedStore(tmp_path / "store", free_port(), appendfsync="always")
    url = store.start()
    client = redis.Redis.from_url(url)
    pipeline = Pipeline(url, tmp_path, supervised=True)
    pipeline.env["LV_CHECKPOINT_DIR"] = str(disk / "checkpoints")
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
        filler = fill(disk, leave=0)
        progress = client.xlen("lv:{m}:progress")
        # Full until the pipeline has tried to write a checkpoint into it and failed, and
        # for as long as asked beyond that.
        wait_until("a micro-batch refused by the full disk",
                   lambda: "No space left on device" in pipeline.tail(400), timeout=120)  # fmt: skip
        time.sleep(FULL_S)
        stalled_batches = client.xlen("lv:{m}:progress") - progress
        assert snapshot_served(gateway.url), "the gateway stopped serving reads"
        acked_while_full = len(publisher.acked)
        filler.unlink()
        freed_at = time.monotonic()
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
        assert deadletters.listed(client) == [], "the full disk set events aside"
        deltas = logged_once(client, publisher.acked)
    finally:
        client.close()
        store.stop()
    assert dict(publisher.answers) == {"202": publisher.answers["202"]}, publisher.answers
    figures.values.update(
        disk_mb=DISK_MB,
        events_acknowledged=len(publisher.acked),
        acknowledged_while_full=acked_while_full,
        batches_written_while_full=stalled_batches,
        delivering_again_within_s=round(delivering_after_s, 1),
        pipeline_starts_under_supervisor=pipeline.supervised_starts(),
        deltas_checked=deltas,
        catch_up_s=round(catch_up, 1),
    )
    figures.print()
