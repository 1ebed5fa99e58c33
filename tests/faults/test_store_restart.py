"""Restart the store: SIGKILL the embedded store, start it again on its data; then SIGTERM.

A store of this test's own (``EmbeddedStore`` on its data directory) serves a pipeline process
and a gateway process. A store process that will be SIGKILLed runs with ``LV_STORE_FSYNC=always``,
the setting under which a crash of the store loses nothing acknowledged; one that will be
SIGTERMed runs with ``everysec``, whose shutdown writes and syncs everything first
(``test_store_durability`` shows what ``everysec`` loses to a SIGKILL). Events are published all along
through the gateway's ``POST /v1/events``; every event answered 202 is recorded with its
offset. While the store is down a publish must answer 503 ``store_unavailable`` (never a 500).
After each restart every acknowledged offset must be in the log; the pipeline and the gateway
must carry on by themselves (nobody restarts them); a subscriber keeps receiving; at the end
the views are consistent with the log and the change topic, and the subscriber's rows are the
stored rows. docs/reliability/durability.md states the contract this checks.

``LV_FAULT_KILLS`` restarts (default 2: SIGKILL, then SIGTERM), ``LV_FAULT_SEED``.
"""

from __future__ import annotations

import signal
import time

import pytest
import redis

from liveviews.store.embedded import EmbeddedStore
from tests.faults.clients import (
    ClientLoop,
    Publisher,
    Resumer,
    dev_token,
    missing_acked,
    sse_subscriber,
)
from tests.faults.harness import (
    PARTITIONS,
    SHARDS,
    Figures,
    Gateway,
    Knobs,
    Pipeline,
    wait_caught_up,
    wait_for_progress,
)
from tests.support.checks import assert_views_consistent
from tests.support.gateway import free_port, stored_rows

KNOBS = Knobs.from_env(kills=2)
DOWN_S = 1.5
"""How long the store stays down: publishes meanwhile must be refused with 503."""


def policy_for(signals: list[signal.Signals], n: int) -> str:
    """The fsync policy of the store process that will get ``signals[n]``."""
    return "always" if n < len(signals) and signals[n] == signal.SIGKILL else "everysec"


@pytest.mark.timeout(240 + 30 * KNOBS.kills)
def test_store_sigkill_and_sigterm_restarts(tmp_path):
    rng = KNOBS.rng()
    figures = Figures("store_restart", {"seed": KNOBS.seed})
    signals = [signal.SIGKILL if i % 2 == 0 else signal.SIGTERM for i in range(KNOBS.kills)]
    store = EmbeddedStore(tmp_path / "store", free_port(), appendfsync=policy_for(signals, 0))
    url = store.start()
    client = redis.Redis.from_url(url)
    pipeline = Pipeline(url, tmp_path)
    gateway = Gateway(url, tmp_path, free_port(), LV_LOG_FEED="true")
    clients = ClientLoop()
    watcher = Resumer("sse-activity", "activity", "global")
    publisher = Publisher(gateway.url, KNOBS.seed)
    checked_after_restart = []
    try:
        gateway.start()
        pipeline.start()
        publisher.start()
        wait_for_progress(client, 0, pipeline)
        clients.spawn(sse_subscriber(gateway.url, dev_token("watcher"), watcher, clients.halt))
        for n, sig in enumerate(signals):
            time.sleep(rng.uniform(1.0, 3.0))
            acked_before = len(publisher.acked)
            assert store.process is not None
            store.process.send_signal(sig)
            store.process.wait(30)
            store.process = None
            time.sleep(DOWN_S)
            store.appendfsync = policy_for(signals, n + 1)
            store.start()
            missing = missing_acked(client, publisher.acked[:acked_before])
            assert not missing, f"acknowledged events lost after {sig.name}: {missing[:5]}"
            checked_after_restart.append(acked_before)
            deltas_seen = len(watcher.state.ids)
            progress = client.xlen("lv:{m}:progress")
            wait_for_progress(client, progress, pipeline, timeout=90)
            deadline = time.monotonic() + 60
            while len(watcher.state.ids) <= deltas_seen and time.monotonic() < deadline:
                time.sleep(0.1)
            assert len(watcher.state.ids) > deltas_seen, "the subscriber got nothing after restart"
        time.sleep(1)
        publisher.stop()
        catch_up = wait_caught_up(client, pipeline)
        assert pipeline.starts == 1 and pipeline.alive(), "the pipeline did not carry on by itself"
        want = stored_rows(client, "activity", "global", SHARDS)
        deadline = time.monotonic() + 20
        while watcher.state.rows != want and time.monotonic() < deadline:
            time.sleep(0.1)
        assert watcher.failure is None, watcher.failure
        assert watcher.state.rows == want
    finally:
        publisher.halt.set()
        clients.stop()
        gateway.stop()
        pipeline.stop()
        store.stop()
    store.start()  # once more from its files: everything acknowledged is still there
    try:
        missing = missing_acked(client, publisher.acked)
        assert not missing, f"acknowledged events lost: {missing[:5]}"
        deltas = assert_views_consistent(client, PARTITIONS, SHARDS)
    finally:
        client.close()
        store.stop()
    refused = {k: v for k, v in publisher.answers.items() if k != "202"}
    assert set(refused) <= {"503 store_unavailable"}, (refused, publisher.refused_bodies[:3])
    figures.values.update(
        restarts=len(signals),
        sigkills=signals.count(signal.SIGKILL),
        sigterms=signals.count(signal.SIGTERM),
        events_acknowledged=len(publisher.acked),
        acknowledged_checked_after_restarts=sum(checked_after_restart) + len(publisher.acked),
        publishes_refused_503=refused.get("503 store_unavailable", 0),
        subscriber_resumes=watcher.connects - 1,
        subscriber_deltas=len(watcher.state.ids),
        deltas_checked=deltas,
        catch_up_s=round(catch_up, 1),
    )
    figures.print()
