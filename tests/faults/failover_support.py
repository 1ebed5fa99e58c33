"""Gateways stopped behind nginx while subscribers read through it: the scenario and its checks.

``run_failover`` starts two ``python -m liveviews.gateway`` processes and nginx in front of them
(``deploy/nginx/liveviews.conf.template``), subscribes Python SSE readers, a Python WebSocket
and the JavaScript client in Chromium (over WebSocket and over SSE) through nginx only, while a
source writes deltas. It stops one gateway, waits until every subscription has deltas again,
starts it again, then stops the other one: from the second stop on, every subscriber is on the
gateway being stopped, so each must fail over, in both directions. At the end each
subscription's deltas must be exactly the change topic's for its key after its one snapshot,
and its rows the stored rows.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import orjson
import redis

from tests.faults.clients import (
    ClientLoop,
    Resumer,
    dev_token,
    sse_subscriber,
    write_page,
    ws_subscriber,
)
from tests.faults.harness import SHARDS, Gateway
from tests.support.balancer import Balancer
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS
from tests.support.checks import assert_delivered_exactly
from tests.support.gateway import Event, free_port, stored_rows

Sub = tuple[str, str]
"""(view, key)"""


class Source(Protocol):
    """What writes the deltas: started before the subscribers, stopped before the checks."""

    def start(self) -> None: ...

    def stop(self) -> int:
        """Stops writing; returns once the views hold everything written, and how much."""
        ...

    def halt(self) -> None:
        """Stops writing at once, on the way out of a failed test."""
        ...


@dataclass(frozen=True)
class Plan:
    """Who subscribes to what. Each Python SSE reader and each page is one user's; the Python
    WebSocket carries ``ws`` for ``ws_user``. Pages: (user, transport, subscriptions)."""

    sse: list[tuple[str, Sub]]
    ws_user: str
    ws: list[Sub]
    pages: list[tuple[str, str, list[Sub]]]


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


def signal_of(stop: int) -> signal.Signals:
    """SIGKILL for the first two stops (one each way); then every other stop is a SIGTERM, as
    in a rolling restart, which must end the streams at once so clients move on."""
    return signal.SIGTERM if stop >= 2 and stop % 2 == 0 else signal.SIGKILL


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Polls ``predicate``; returns the seconds it took, fails naming ``what``."""
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{what} within {timeout} s")
        time.sleep(0.05)
    return time.monotonic() - t0


def open_page(browser: Any, url: str, user: str, transport: str, subs: list[Sub]) -> Any:
    page = browser.new_page()
    listed = orjson.dumps([list(s) for s in subs]).decode()
    token = dev_token(user)
    page.goto(f"{url}/faults.html?transport={transport}&token={token}&subs={listed}")
    page.wait_for_function("window.lv && window.lv.ready")
    return page


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


def rows_match(page: Any, want: dict[str, Any]) -> None:
    """Waits until the page's rows of each subscription are ``want``'s."""
    page.wait_for_function(
        "want => Object.entries(want).every(([n, rows]) =>"
        " JSON.stringify(Object.entries(window.lv.records[n].rows).sort())"
        " === JSON.stringify(Object.entries(rows).sort()))",
        arg=want, timeout=30_000,
    )  # fmt: skip


def run_failover(
    store: redis.Redis, store_url: str, tmp_path: Path, plan: Plan, source: Source,
    stops: int, rng: random.Random, live_again_s: float = 20,
) -> dict[str, Any]:  # fmt: skip
    """The scenario of this module; returns its figures."""
    from playwright.sync_api import sync_playwright

    web = tmp_path / "web"
    write_page(web)
    gateways = []
    for i in range(2):
        (tmp_path / f"gateway-{i}").mkdir()
        gateways.append(Gateway(store_url, tmp_path / f"gateway-{i}", free_port(),
                                LV_STATIC_DIR=str(web)))  # fmt: skip
    balancer = Balancer(tmp_path / "nginx", free_port(), [f"127.0.0.1:{g.port}" for g in gateways])
    clients = ClientLoop()
    sse = [Recorded(f"sse-{u}-{v}-{k}", v, k) for u, (v, k) in plan.sse]
    ws = [Recorded(f"ws-{plan.ws_user}-{v}-{k}", v, k) for v, k in plan.ws]
    resumers = sse + ws
    live_again: list[float] = []
    moved_counts: list[int] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            for g in gateways:
                g.start()
            balancer.start()
            source.start()
            for (user, _), r in zip(plan.sse, sse, strict=True):
                clients.spawn(sse_subscriber(balancer.url, dev_token(user), r, clients.halt))
            clients.spawn(ws_subscriber(balancer.url, dev_token(plan.ws_user), list[Resumer](ws),
                                        clients.halt))  # fmt: skip
            pages = [open_page(browser, balancer.url, u, t, s) for u, t, s in plan.pages]
            subscribers = Subscribers(resumers, pages)
            start = subscribers.mark()
            wait_until(partial(subscribers.fresh, start), 60, "every subscriber had deltas")
            for stop in range(stops):
                victim = gateways[stop % 2]
                time.sleep(rng.uniform(0.5, 1.5))
                before = subscribers.mark()
                t_stop = time.monotonic()
                victim.signal(signal_of(stop))
                # Live again: every subscription has deltas written after the stop.
                wait_until(partial(subscribers.fresh, before), live_again_s,
                           f"every subscriber had deltas again after stop {stop + 1}")  # fmt: skip
                live_again.append(time.monotonic() - t_stop)
                moved = subscribers.reconnected(before)
                assert any(moved), f"stop {stop + 1} disconnected no subscriber"
                if stop > 0:  # everyone had moved onto the gateway just stopped
                    assert all(moved), f"stop {stop + 1}: not every subscriber resumed: {moved}"
                moved_counts.append(sum(moved))
                victim.start()
            time.sleep(1)
            written = source.stop()
            for r in resumers:
                want = stored_rows(store, r.view, r.key, SHARDS)
                wait_until(partial(r.reached, want), 30, f"{r.name} reached the stored rows")
                assert r.failure is None, f"{r.name}: {r.failure}"
            records = []
            for page, (_, _, subs) in zip(pages, plan.pages, strict=True):
                rows_match(page, {f"{v}/{k}": stored_rows(store, v, k, SHARDS) for v, k in subs})
                records.append(page.evaluate("window.lv"))
        finally:
            source.halt()
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
    return {
        "gateways": len(gateways),
        "sigkills": sum(signal_of(s) == signal.SIGKILL for s in range(stops)),
        "sigterms": sum(signal_of(s) == signal.SIGTERM for s in range(stops)),
        "written": written,
        "python_subscriptions": len(resumers),
        "python_resumes": sum(r.connects - 1 for r in resumers),
        "python_deltas_checked": python_checked,
        "js_clients": len(records),
        "js_reconnects": sum(lv["states"].count("connected") - 1 for lv in records),
        "js_deltas_checked": js_checked,
        "subscribers_moved": moved_counts,
        "all_live_again_s": [round(s, 2) for s in live_again],
    }
