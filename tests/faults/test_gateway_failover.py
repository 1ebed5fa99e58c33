"""Two gateways behind nginx: SIGKILL one under subscribers, each resumes on the other.

Two ``python -m server`` processes on their own ports, behind nginx configured by
``deploy/nginx/liveviews.conf.template`` (least connections, a refused connection passed on to
the next gateway). Deltas keep flowing all along, written through the real sink as in
``test_gateway_kills``. Subscribers connect through nginx only: SSE readers (one per key), one
WebSocket carrying several subscriptions, and the JavaScript client in Chromium over WebSocket
and over SSE. The test SIGKILLs one gateway, waits until every subscriber has deltas again,
starts it again, then kills the other one: from the second kill on, every subscriber is on the
gateway being killed, so each must fail over, in both directions.

At the end each subscriber's deltas are exactly the change topic's for its key after its one
snapshot: no gap, no duplicate, no reset; and its rows are the stored rows.

``LV_FAULT_KILLS`` stops (default 2, alternating gateways; from the third on, every other
one a SIGTERM, as in a rolling restart), ``LV_FAULT_SEED``.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from tests.faults.clients import ClientLoop, Resumer, dev_token, sse_subscriber, ws_subscriber
from tests.faults.harness import SHARDS, Figures, Gateway, Knobs

# The steady delta writer and its keys are the single-gateway kill test's.
from tests.faults.test_gateway_kills import KEYS, DeltaPump
from tests.support.balancer import Balancer
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS
from tests.support.checks import assert_delivered_exactly
from tests.support.gateway import Event, free_port, stored_rows

KNOBS = Knobs.from_env(kills=2)

PAGE = """<!doctype html>
<meta charset="utf-8">
<title>failover subscriber</title>
<script type="module">
import { createClient } from '/client-js/index.js';
const params = new URLSearchParams(location.search);
const lv = window.lv = { records: {}, states: [], errors: [] };
const client = createClient({
  url: location.origin, token: params.get('token'), transport: params.get('transport'),
  backoff: { minDelay: 100, maxDelay: 1000 },
});
client.on('state', (e) => lv.states.push(e.newState));
client.on('error', (e) => lv.errors.push(String(e)));
for (const [view, key] of JSON.parse(params.get('subs'))) {
  const rec = lv.records[`${view}/${key}`] = { rows: {}, deltas: [], snapshots: [], recovering: 0 };
  client.subscribe(view, key, {
    snapshot: (e) => {
      rec.snapshots.push(e.eventId); if (e.wasRecovering) rec.recovering++;
      rec.rows = Object.fromEntries(e.rows);
    },
    change: (e) => { rec.deltas.push(e.eventId); rec.rows = Object.fromEntries(e.rows); },
    error: (e) => lv.errors.push(String(e)),
  });
}
lv.ready = true;
</script>
"""


@dataclass
class Recorded(Resumer):
    """A Python subscriber that also keeps the id of every snapshot it was sent."""

    snapshots: list[str] = field(default_factory=list)

    def apply(self, ev: Event) -> None:
        if ev.event == "snapshot" and ev.id is not None:
            self.snapshots.append(ev.id)
        super().apply(ev)

    def reached(self, rows: dict[str, Any]) -> bool:
        """Holds ``rows``, or has failed (and will never hold them)."""
        return self.state.rows == rows or self.failure is not None


def signal_of(kill: int) -> signal.Signals:
    """SIGKILL for the first two kills (one each way); then every other stop is a SIGTERM, as
    in a rolling restart, which must end the streams at once so clients move on."""
    return signal.SIGTERM if kill >= 2 and kill % 2 == 0 else signal.SIGKILL


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Polls ``predicate``; returns the seconds it took, fails naming ``what``."""
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{what} within {timeout} s")
        time.sleep(0.05)
    return time.monotonic() - t0


def open_pages(browser: Any, url: str, token: str) -> list[Any]:
    subs = orjson.dumps([list(k) for k in KEYS]).decode()
    pages = []
    for transport in ("ws", "sse"):
        page = browser.new_page()
        page.goto(f"{url}/failover.html?transport={transport}&token={token}&subs={subs}")
        page.wait_for_function("window.lv && window.lv.ready")
        pages.append(page)
    return pages


def page_counts(page: Any) -> tuple[int, list[int]]:
    """(times connected, deltas received by each subscription) of the page's client."""
    got: list[Any] = page.evaluate(
        "[window.lv.states.filter(s => s === 'connected').length,"
        " Object.values(window.lv.records).map(r => r.deltas.length)]"
    )
    return got[0], got[1]


@dataclass
class Mark:
    """Every subscriber's connects and deltas at one moment: (connects, [deltas per key])."""

    counts: list[tuple[int, list[int]]]


@dataclass
class Subscribers:
    """The Python subscribers and the pages, counted alike."""

    resumers: list[Recorded]
    pages: list[Any]

    def mark(self) -> Mark:
        python = [(r.connects, [len(r.state.ids)]) for r in self.resumers]
        return Mark(python + [page_counts(p) for p in self.pages])

    def fresh(self, since: Mark) -> bool:
        """Each subscription has had two deltas or more since ``since``."""
        return all(
            n > b + 1
            for (_, now), (_, before) in zip(self.mark().counts, since.counts, strict=True)
            for n, b in zip(now, before, strict=True)
        )

    def reconnected(self, since: Mark) -> list[bool]:
        """For each subscriber (Python ones, then pages): has it connected since ``since``?"""
        return [now > before for (now, _), (before, _) in zip(self.mark().counts, since.counts,
                                                              strict=True)]  # fmt: skip


def check_page(store: redis.Redis, lv: dict[str, Any], name: str) -> int:
    """Each subscription of a page: one snapshot, then exactly the topic's deltas after it."""
    checked = 0
    for sub, rec in lv["records"].items():
        view, key = sub.split("/", 1)
        assert len(rec["snapshots"]) == 1 and rec["recovering"] == 0, (
            f"{name} {sub}: snapshots {rec['snapshots']}: a resume started over"
        )
        assert_delivered_exactly(store, f"{name} {sub}", view, key, SHARDS,
                                 rec["snapshots"][0], rec["deltas"])  # fmt: skip
        checked += len(rec["deltas"])
    assert not lv["errors"], f"{name}: {lv['errors']}"
    return checked


@pytest.mark.timeout(90 + 30 * KNOBS.kills)
def test_subscribers_fail_over_between_gateways_behind_nginx(
    store: redis.Redis, store_url: str, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    rng = KNOBS.rng()
    figures = Figures("gateway_failover", {"seed": KNOBS.seed})
    web = tmp_path / "web"
    web.mkdir()
    (web / "failover.html").write_text(PAGE)
    gateways = []
    for i in range(2):
        (tmp_path / f"gateway-{i}").mkdir()
        gateways.append(Gateway(store_url, tmp_path / f"gateway-{i}", free_port(),
                                LV_STATIC_DIR=str(web)))  # fmt: skip
    balancer = Balancer(tmp_path / "nginx", free_port(), [f"127.0.0.1:{g.port}" for g in gateways])
    token = dev_token("alice")
    pump = DeltaPump(store, KNOBS.seed)
    clients = ClientLoop()
    sse = [Recorded(f"sse-{v}-{k}", v, k) for v, k in KEYS]
    ws = [Recorded(f"ws-{v}-{k}", v, k) for v, k in KEYS]
    resumers = sse + ws
    resumed_s: list[float] = []
    reconnected: list[int] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            for g in gateways:
                g.start()
            balancer.start()
            pump.start()
            for r in sse:
                clients.spawn(sse_subscriber(balancer.url, token, r, clients.halt))
            clients.spawn(ws_subscriber(balancer.url, token, list[Resumer](ws), clients.halt))
            subscribers = Subscribers(resumers, open_pages(browser, balancer.url, token))
            pages = subscribers.pages
            start = subscribers.mark()
            wait_until(lambda: subscribers.fresh(start), 20, "every subscriber had deltas")
            for kill in range(KNOBS.kills):
                victim = gateways[kill % 2]
                time.sleep(rng.uniform(0.5, 1.5))
                before = subscribers.mark()
                t_kill = time.monotonic()
                victim.signal(signal_of(kill))
                # Live again: every subscription has deltas written after the kill.
                wait_until(partial(subscribers.fresh, before), 20,
                           f"every subscriber had deltas again after kill {kill + 1}")  # fmt: skip
                resumed_s.append(time.monotonic() - t_kill)
                moved = subscribers.reconnected(before)
                assert any(moved), f"kill {kill + 1} disconnected no subscriber"
                if kill > 0:  # everyone had moved onto the gateway just stopped
                    assert all(moved), f"kill {kill + 1}: not every subscriber resumed: {moved}"
                reconnected.append(sum(moved))
                victim.start()
            time.sleep(1)
            written = pump.stop()
            for r in resumers:
                want = stored_rows(store, r.view, r.key, SHARDS)
                wait_until(partial(r.reached, want), 20, f"{r.name} reached the stored rows")
                assert r.failure is None, f"{r.name}: {r.failure}"
            records = []
            for page in pages:
                want = {f"{v}/{k}": stored_rows(store, v, k, SHARDS) for v, k in KEYS}
                page.wait_for_function(
                    "want => Object.entries(want).every(([n, rows]) =>"
                    " JSON.stringify(Object.entries(window.lv.records[n].rows).sort())"
                    " === JSON.stringify(Object.entries(rows).sort()))",
                    arg=want, timeout=20_000,
                )  # fmt: skip
                records.append(page.evaluate("window.lv"))
        finally:
            pump.halt.set()
            clients.stop()
            browser.close()
            balancer.stop()
            for g in gateways:
                g.stop()
    python_checked = 0
    for r in resumers:
        assert r.state.resets == 0 and len(r.snapshots) == 1, (
            f"{r.name}: {r.state.resets} resets, snapshots {r.snapshots}"
        )
        assert_delivered_exactly(store, r.name, r.view, r.key, SHARDS, r.snapshots[0], r.state.ids)
        python_checked += len(r.state.ids)
    js_checked = sum(check_page(store, lv, f"page {i}") for i, lv in enumerate(records))
    figures.values.update(
        gateways=len(gateways),
        sigkills=sum(signal_of(k) == signal.SIGKILL for k in range(KNOBS.kills)),
        sigterms=sum(signal_of(k) == signal.SIGTERM for k in range(KNOBS.kills)),
        deltas_written=written,
        python_subscribers=len(resumers),
        python_resumes=sum(r.connects - 1 for r in resumers),
        python_deltas_checked=python_checked,
        js_clients=len(records),
        js_reconnects=sum(lv["states"].count("connected") - 1 for lv in records),
        js_deltas_checked=js_checked,
        subscribers_moved=reconnected,
        all_live_again_s=[round(s, 2) for s in resumed_s],
    )
    figures.print()
