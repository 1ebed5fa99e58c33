"""Network faults between the store and a gateway, and between the store and the pipeline:
delay, packet loss and a full partition, each for seconds, under load.

The gateway and the pipeline each run in a network namespace of their own (``netns.py``) and
reach the store through a link the test can slow, thin or cut; publishers and subscribers reach
the gateway over that namespace's link too, but only the store's traffic is touched. A publisher
posts through the gateway (sending a batch again under its idempotency key when the answer is
lost or is a 503), an SSE and a WebSocket subscriber follow ``activity/global``, and the
pipeline runs under ``liveviews.supervise``. After each fault: every acknowledged event is in the
log, and both subscribers receive again, resumed with no gap and no duplicate (``State`` asserts
both on every frame). At the end every acknowledged event is in the log exactly once, nothing
else is, the views are consistent with the log and the change topic, and each subscriber's
rows are the stored rows.

``LV_FAULT_STALL_S`` makes every fault that long (default 4 s; ``make faults STALL=30``);
``LV_FAULT_KILLS`` rounds of the six faults (default 1); ``LV_FAULT_SEED``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable

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
from tests.faults.netns import DelayProxy, Namespace, with_host
from tests.support.gateway import free_port

KNOBS = Knobs.from_env(kills=1)
# scripts/faults.sh passes 0 when no STALL is given: the default then.
FAULT_S = float(os.environ.get("LV_FAULT_STALL_S") or 0) or 4.0
DELAY_S = 0.2
"""Each way, on every round trip to the store: a slow cross-zone link."""
LOSS_PERCENT = 30

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("nft") is None,
    reason="network namespaces and nftables need root and the nftables package (scripts/setup.sh)",
)


@pytest.mark.timeout(420 + 6 * KNOBS.kills * (60 + int(FAULT_S)))
def test_delay_loss_and_partitions_lose_nothing(tmp_path):
    rng = KNOBS.rng()
    figures = Figures("network", {"seed": KNOBS.seed, "rounds": KNOBS.kills, "fault_s": FAULT_S})
    spaces = {"gateway": Namespace(0), "pipeline": Namespace(1)}
    proxies: dict[str, DelayProxy] = {}
    store = EmbeddedStore(tmp_path / "store", free_port(), appendfsync="always")
    clients = ClientLoop()
    sse = Resumer("sse-activity", "activity", "global")
    ws = Resumer("ws-activity", "activity", "global")
    publisher: Publisher | None = None
    gateway: Gateway | None = None
    pipeline: Pipeline | None = None
    recovered: list[dict[str, object]] = []
    try:
        for ns in spaces.values():
            ns.create()
        url = store.start()
        client = redis.Redis.from_url(url)
        for name, ns in spaces.items():
            proxies[name] = DelayProxy(ns.host, ("127.0.0.1", store.port))
        gateway = Gateway(
            with_host(url, spaces["gateway"].host, proxies["gateway"].port), tmp_path,
            free_port(), host=spaces["gateway"].peer, prefix=spaces["gateway"].prefix,
        )  # fmt: skip
        pipeline = Pipeline(
            with_host(url, spaces["pipeline"].host, proxies["pipeline"].port), tmp_path,
            supervised=True, prefix=spaces["pipeline"].prefix,
        )  # fmt: skip
        # The namespace has only its loopback and its link: Spark must not look for the
        # machine's own address there.
        pipeline.env["SPARK_LOCAL_IP"] = "127.0.0.1"
        publisher = Publisher(gateway.url, KNOBS.seed, resend=True)
        gateway.start()
        pipeline.start()
        publisher.start()
        wait_for_progress(client, 0, pipeline, timeout=240)
        clients.spawn(sse_subscriber(gateway.url, dev_token("sse"), sse, clients.halt))
        clients.spawn(ws_subscriber(gateway.url, dev_token("ws"), [ws], clients.halt))
        wait_until("both subscribers have a snapshot",
                   lambda: sse.state.last_id is not None and ws.state.last_id is not None)  # fmt: skip
        faults: list[tuple[str, str]] = [
            (target, kind) for target in spaces for kind in ("delay", "loss", "partition")
        ]
        for _ in range(KNOBS.kills):
            for target, kind in rng.sample(faults, k=len(faults)):
                time.sleep(rng.uniform(0.5, 2.0))
                ns, proxy = spaces[target], proxies[target]
                inject: Callable[[], None] = {
                    "delay": lambda proxy=proxy: setattr(proxy, "delay", DELAY_S),
                    "loss": lambda ns=ns, proxy=proxy: ns.lose(proxy.port, LOSS_PERCENT),
                    "partition": lambda ns=ns, proxy=proxy: ns.cut(proxy.port),
                }[kind]
                acked_before = len(publisher.acked)
                answered = publisher.answers.copy()
                inject()
                try:
                    time.sleep(FAULT_S)
                finally:
                    proxy.delay = 0.0
                    ns.heal()
                healed = time.monotonic()
                seen = {r.name: len(r.state.ids) for r in (sse, ws)}
                for r in (sse, ws):
                    wait_until(f"{r.name} receives after a {kind} to the {target}",
                               lambda r=r, seen=seen: len(r.state.ids) > seen[r.name] or r.failure is not None,
                               timeout=120)  # fmt: skip
                    assert r.failure is None, r.failure
                missing = missing_acked(client, publisher.acked[:acked_before])
                assert not missing, f"acknowledged events lost in a {kind}: {missing[:5]}"
                recovered.append({
                    "fault": f"{kind} to the {target}",
                    "answers": dict(publisher.answers - answered),
                    "recovered_s": round(time.monotonic() - healed, 1),
                })  # fmt: skip
                assert gateway.process is not None and gateway.process.poll() is None
        time.sleep(1)
        catch_up = wind_down(client, pipeline, publisher, (sse, ws), timeout=240)
    finally:
        if publisher is not None:
            publisher.halt.set()
        clients.stop()
        if gateway is not None:
            gateway.stop()
        if pipeline is not None:
            pipeline.stop()
        for proxy in proxies.values():
            proxy.close()
        for ns in spaces.values():
            ns.delete()
        store.stop()
    store.start()  # on loopback only; the proxies were its only clients on the links
    try:
        deltas = logged_once(client, publisher.acked)
    finally:
        client.close()
        store.stop()
    assert publisher.refused_bodies == [], (recovered, publisher.refused_bodies[:3])
    figures.values.update(
        faults=recovered,
        pipeline_starts=pipeline.starts,
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
