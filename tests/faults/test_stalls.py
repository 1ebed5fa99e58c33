"""Stall each process: ``SIGSTOP`` the store, a gateway, and the pipeline's driver (its Python
process and its JVM) for seconds, then ``SIGCONT``, under load.

A frozen process is what a GC pause, a stalled VM or an overloaded host looks like: it holds
its sockets and answers nothing. Publishers keep posting through the gateway, an SSE and a
WebSocket subscriber keep following, and the pipeline runs under ``liveviews.supervise`` as
``make run`` and ``liveviews dev`` run it. After each stall: every acknowledged event is in
the log, the subscribers receive again (having resumed, if their connection gave up, with no
gap and no duplicate: ``State`` asserts both on every frame), the supervisor started no second
pipeline beside the frozen one, and nobody was restarted. At the end the views are consistent
with the log and the change topic, and each subscriber's rows are the stored rows.

``LV_FAULT_KILLS`` rounds (default 1: each process stalled once, in a random order);
``LV_FAULT_STALL_S`` makes every stall that long (default: 3 s for the store, 7 s for the
gateway, longer than a subscriber waits on a silent connection, and 5 s for the pipeline;
``make faults STALL=30`` runs the long version); ``LV_FAULT_SEED``.
"""

from __future__ import annotations

import os
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
    ws_subscriber,
)
from tests.faults.ending import logged_once, wind_down
from tests.faults.harness import (
    Figures,
    Gateway,
    Knobs,
    Pipeline,
    wait_for_progress,
    wait_until,
)
from tests.support.gateway import free_port
from tests.support.processes import descendants, spark_jvm

KNOBS = Knobs.from_env(kills=1)
STALL_S = float(os.environ.get("LV_FAULT_STALL_S") or 0)
DEFAULT_STALL_S = {"store": 3.0, "gateway": 7.0, "pipeline": 5.0}


def stall(pids: list[int], seconds: float) -> None:
    """Freeze ``pids`` for ``seconds``; they are thawed even if the test fails meanwhile."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def _child_of(pid: int) -> int:
    """The one direct child of ``pid`` (the supervised process)."""
    children = [p for p in descendants(pid) if _parent(p) == pid]
    assert len(children) == 1, f"the supervisor runs {len(children)} processes: {children}"
    return children[0]


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        # The command may hold spaces and parentheses: the fields after its last ')' are fixed.
        return int(stat.read().rsplit(")", 1)[1].split()[1])


@pytest.mark.timeout(300 + 3 * KNOBS.kills * (60 + int(STALL_S)))
def test_stalled_store_gateway_and_pipeline_lose_nothing(tmp_path):
    rng = KNOBS.rng()
    figures = Figures("stalls", {"seed": KNOBS.seed, "rounds": KNOBS.kills})
    store = EmbeddedStore(tmp_path / "store", free_port(), appendfsync="always")
    url = store.start()
    client = redis.Redis.from_url(url)
    pipeline = Pipeline(url, tmp_path, supervised=True)
    gateway = Gateway(url, tmp_path, free_port())
    clients = ClientLoop()
    sse = Resumer("sse-activity", "activity", "global")
    ws = Resumer("ws-activity", "activity", "global")
    publisher = Publisher(gateway.url, KNOBS.seed, resend=True)
    stalled: dict[str, float] = {}
    during: list[tuple[str, dict[str, int]]] = []
    """Each stall, and how publishes made around it were answered."""
    try:
        gateway.start()
        pipeline.start()
        publisher.start()
        wait_for_progress(client, 0, pipeline)
        supervised = _child_of(pipeline.pid())
        clients.spawn(sse_subscriber(gateway.url, dev_token("sse"), sse, clients.halt))
        clients.spawn(ws_subscriber(gateway.url, dev_token("ws"), [ws], clients.halt))
        wait_until("both subscribers have a snapshot",
                   lambda: sse.state.last_id is not None and ws.state.last_id is not None)  # fmt: skip
        for _ in range(KNOBS.kills):
            for target in rng.sample(sorted(DEFAULT_STALL_S), k=len(DEFAULT_STALL_S)):
                seconds = STALL_S or DEFAULT_STALL_S[target]
                time.sleep(rng.uniform(0.5, 2.0))
                acked_before = len(publisher.acked)
                seen = {r.name: len(r.state.ids) for r in (sse, ws)}
                assert store.process is not None and gateway.process is not None
                pids = {
                    "store": [store.process.pid],
                    "gateway": [gateway.process.pid],
                    "pipeline": [supervised, spark_jvm(supervised)],
                }[target]
                answered = publisher.answers.copy()
                stall(pids, seconds)
                stalled[target] = stalled.get(target, 0.0) + seconds
                time.sleep(1.0)  # what was held by the stall is answered now
                during.append((target, dict(publisher.answers - answered)))
                missing = missing_acked(client, publisher.acked[:acked_before])
                assert not missing, f"acknowledged events lost in a {target} stall: {missing[:5]}"
                for r in (sse, ws):
                    wait_until(f"{r.name} receives after the {target} stall",
                               lambda r=r, seen=seen: len(r.state.ids) > seen[r.name] or r.failure is not None,
                               timeout=90)  # fmt: skip
                    assert r.failure is None, r.failure
                assert _child_of(pipeline.pid()) == supervised, "the supervisor restarted it"
                assert gateway.process.poll() is None and store.process.poll() is None
        time.sleep(1)
        catch_up = wind_down(client, pipeline, publisher, (sse, ws))
        assert pipeline.alive() and _child_of(pipeline.pid()) == supervised
    finally:
        publisher.halt.set()
        clients.stop()
        gateway.stop()
        pipeline.stop()
        store.stop()
    store.start()
    try:
        deltas = logged_once(client, publisher.acked)
    finally:
        client.close()
        store.stop()
    # A lost answer (a connection the thawed gateway closed as idle, with the request unread)
    # is sent again; nothing is refused for good.
    assert publisher.refused_bodies == [], (during, publisher.refused_bodies[:3])
    figures.values.update(
        stalled_s=stalled,
        answers_around_stalls=during,
        events_acknowledged=len(publisher.acked),
        publishes_resent=publisher.resent,
        sse_resumes=sse.connects - 1,
        ws_resumes=ws.connects - 1,
        sse_deltas=len(sse.state.ids),
        ws_deltas=len(ws.state.ids),
        deltas_checked=deltas,
        catch_up_s=round(catch_up, 1),
    )
    figures.print()
