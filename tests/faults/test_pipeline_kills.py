"""Crash the stream processor: SIGKILL the Spark driver JVM at random moments, restart, repeat.

``python -m liveviews.pipeline`` runs as a child process over the run's store with its own checkpoint;
Chirp activity is appended to the log all along, with bad entries among it: some that no
pipeline can decode, and tweets dated in year 9999. Each cycle waits until the restarted
pipeline has written its first batch, then waits a random (seeded) delay and kills the driver
JVM: the moment falls during a batch's Spark work, during the sink's writes, or between
batches. At the end the writes stop, the views catch up with the log, and every view must
equal the offline recomputation and the replay of the change topic, with no delta duplicated,
none missing, and each key's recorded position its newest delta.

The same runs again with Chirp's ``profiles`` in Real-Time Mode, as Chirp declares it (the suite
runs every pipeline in micro-batches unless a test asks: ``LV_REALTIME``).

``LV_FAULT_KILLS`` (default 3), ``LV_FAULT_SECONDS`` (least seconds of writes, default 0),
``LV_FAULT_SEED`` (default 1). The long run: ``make faults KILLS=50``.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from liveviews.changes.topic import read_deltas
from liveviews.log import deadletters
from tests.faults.harness import (
    PARTITIONS,
    SHARDS,
    Figures,
    Knobs,
    LogWriter,
    Pipeline,
    batch_spread,
    wait_caught_up,
    wait_for_progress,
)
from tests.support.checks import assert_views_consistent

KNOBS = Knobs.from_env(kills=3)
MAX_DELAY_S = 4.0
"""Kill within this many seconds of the run's first batch: a few batches' time on 2 cores."""


@pytest.mark.timeout(300 + 120 * KNOBS.kills + int(KNOBS.seconds))
@pytest.mark.parametrize("realtime", [False, True], ids=["micro-batches", "realtime"])
def test_sigkill_driver_jvm_repeatedly(store, store_url, tmp_path, realtime):
    rng = KNOBS.rng()
    figures = Figures("pipeline_kills" + ("_realtime" if realtime else ""), {"seed": KNOBS.seed})
    pipeline = Pipeline(store_url, tmp_path)
    if realtime:
        # A kill falls in the middle of profiles' epoch, which Spark runs again from its start
        # after the restart (docs/REALTIME.md).
        pipeline.env["LV_REALTIME"] = "on"
    writer = LogWriter(store, seed=KNOBS.seed, bad_every=3)
    t0 = time.monotonic()
    kills, mid_sink, hangs, restart_s = 0, 0, 0, []
    try:
        writer.start()
        pipeline.start()
        for _ in range(KNOBS.kills):
            started = time.monotonic()
            wait_for_progress(store, store.xlen("lv:{m}:progress"), pipeline)
            restart_s.append(time.monotonic() - started)
            time.sleep(rng.uniform(0, MAX_DELAY_S))
            hangs += not pipeline.kill_jvm()
            kills += 1
            mid_sink += batch_spread(store)
            pipeline.start()
        while time.monotonic() - t0 < KNOBS.seconds:
            time.sleep(0.5)
        wait_for_progress(store, store.xlen("lv:{m}:progress"), pipeline)
        events = writer.stop()
        catch_up = wait_caught_up(store, pipeline)
    finally:
        writer.halt.set()
        pipeline.stop()
    streamed = ("profiles",) if realtime else ()
    if realtime:  # several deltas of one key in one epoch: profiles ran in Real-Time Mode
        epochs = Counter((d.batch, d.key) for shard in range(SHARDS)
                         for d in read_deltas(store, shard) if d.view == "profiles")  # fmt: skip
        assert epochs and max(epochs.values()) > 1
    deltas = assert_views_consistent(
        store, PARTITIONS, SHARDS, skip=writer.undecodable, streamed=streamed
    )
    # Each undecodable entry is a dead letter of each pipeline once, whichever moment a kill
    # fell on. Tweets from year 9999 are none: entities shows them, activity leaves them out.
    recorded = [(f[b"pipeline"].decode(), f[b"offset"].decode())
                for _, f in store.xrange(deadletters.ORDER_STREAM)]  # fmt: skip
    assert len(recorded) == len(set(recorded)), "a dead letter was recorded twice"
    # The Real-Time Mode source sets aside an entry without its time but does not check
    # payloads against their schema (docs/REALTIME.md).
    for name in ("entities", "activity", *(() if realtime else ("profiles",))):
        assert {o for p, o in recorded if p == name} == set(writer.undecodable), name
    if realtime:
        assert {o for p, o in recorded if p == "profiles"} == set(writer.untimed)
    assert writer.untimed and writer.from_the_future, "the writer wrote no bad entries"
    figures.values.update(
        kills_survived=kills,
        kills_mid_sink=mid_sink,
        launcher_outlived_jvm=hangs,
        events_written=events,
        deltas_checked=deltas,
        restart_to_first_batch_s=round(sum(restart_s) / len(restart_s), 1) if restart_s else 0,
        catch_up_s=round(catch_up, 1),
        wall_s=round(time.monotonic() - t0, 1),
    )
    figures.print()
    assert kills == KNOBS.kills
    for hang in sorted(tmp_path.glob("launcher-hang-*.txt")):
        print(f"--- {hang.name}\n{hang.read_text()[-4000:]}")
    assert events > 0 and deltas > 0
    # python -m liveviews.pipeline watches its driver and exits at once when it dies.
    assert hangs == 0, f"the pipeline process outlived its killed driver {hangs} times"
