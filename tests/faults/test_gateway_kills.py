"""Crash the gateway: SIGKILL it, restart it on the same port; SIGTERM it, restart it again.

The gateway runs as ``python -m liveviews.gateway``. Deltas keep flowing all along, written by the tests'
``Writer`` through the real ``ChangeTopicSink`` (what Spark's batches call): the gateway cannot
tell them from the pipeline's, and the test spends its time on gateway restarts instead of
JVM starts (the pipeline's own crashes are ``test_pipeline_kills``). Subscribers: SSE readers
(one per key), one WebSocket carrying several subscriptions, and the JavaScript client in
Chromium over WebSocket and over SSE, loaded from the gateway's ``/client-js/``. Each must
resume after every restart with no delta twice and none missing (ids strictly increasing, or a
reset and a snapshot), and end with exactly the rows the store holds.

On SIGTERM the gateway must end its streams at once, so clients resume on the next process
instead of waiting for a dead connection: the test measures how long the streams stayed open.

``LV_FAULT_KILLS`` restarts (default 3: SIGKILL, SIGTERM, SIGKILL), ``LV_FAULT_SEED``.
"""

from __future__ import annotations

import itertools
import random
import signal
import threading
import time
from typing import Any

import orjson
import pytest
import redis

from demo.chirp import app as chirp
from tests.faults.clients import (
    ClientLoop,
    Resumer,
    check_delta_ids,
    dev_token,
    sse_subscriber,
    write_page,
    ws_subscriber,
)
from tests.faults.harness import RETENTION, SHARDS, Figures, Gateway, Knobs
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS
from tests.support.gateway import Writer, free_port, stored_rows

KNOBS = Knobs.from_env(kills=3)
KEYS = [("profiles", "u1"), ("profiles", "u2"), ("likes", "t1"), ("tweets", "t2")]
GRACEFUL_CLOSE_S = 2.0
"""On SIGTERM, every stream must have ended within this long (uvicorn's grace is 5 s)."""


class DeltaPump(threading.Thread):
    """Writes a change to one of KEYS every few milliseconds, through the real sink."""

    def __init__(self, client: redis.Redis, seed: int) -> None:
        super().__init__(daemon=True)
        self.writer = Writer(client, chirp, SHARDS, retention=RETENTION)
        self.rng = random.Random(seed)
        self.halt = threading.Event()
        self.written = 0

    def run(self) -> None:
        for i in itertools.count():
            if self.halt.is_set():
                return
            view, key = self.rng.choice(KEYS)
            row = f"r{self.rng.randint(0, 5)}"
            value = None if self.rng.random() < 0.15 else {"n": i, "score": i}
            self.writer.write([(view, key, row, value)])
            self.written += 1
            time.sleep(0.02)

    def stop(self) -> int:
        self.halt.set()
        self.join(10)
        return self.written


def _open_pages(browser: Any, url: str, token: str) -> list[Any]:
    subs = orjson.dumps([list(k) for k in KEYS]).decode()
    pages = []
    for transport in ("ws", "sse"):
        page = browser.new_page()
        page.goto(f"{url}/faults.html?transport={transport}&token={token}&subs={subs}")
        page.wait_for_function("window.lv && window.lv.ready")
        pages.append(page)
    return pages


def _wait_all(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout} s")
        time.sleep(0.05)


@pytest.mark.timeout(120 + 20 * KNOBS.kills)
def test_gateway_sigkill_and_sigterm_restarts(store, store_url, tmp_path):
    from playwright.sync_api import sync_playwright

    rng = KNOBS.rng()
    figures = Figures("gateway_kills", {"seed": KNOBS.seed})
    write_page(tmp_path / "web")
    gateway = Gateway(store_url, tmp_path, free_port(), LV_STATIC_DIR=str(tmp_path / "web"))
    token = dev_token("alice")
    pump = DeltaPump(store, KNOBS.seed)
    clients = ClientLoop()
    sse = [Resumer(f"sse-{v}-{k}", v, k) for v, k in KEYS]
    ws = [Resumer(f"ws-{v}-{k}", v, k) for v, k in KEYS]
    resumers = sse + ws
    signals = [signal.SIGKILL if i % 2 == 0 else signal.SIGTERM for i in range(KNOBS.kills)]
    graceful_close: list[float] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            pump.start()
            gateway.start()
            for r in sse:
                clients.spawn(sse_subscriber(gateway.url, token, r, clients.halt))
            clients.spawn(ws_subscriber(gateway.url, token, ws, clients.halt))
            pages = _open_pages(browser, gateway.url, token)
            _wait_all(lambda: all(r.state.ids for r in resumers), 20, "every subscriber had deltas")
            for sig in signals:
                time.sleep(rng.uniform(0.5, 1.5))
                before = [len(r.closed_at) for r in resumers]
                t_sig = time.monotonic()
                gateway.signal(sig)
                if sig == signal.SIGTERM:
                    _wait_all(
                        lambda b=before: all(len(r.closed_at) > n for r, n in zip(resumers, b, strict=True)),
                        10, "streams ended after SIGTERM",
                    )  # fmt: skip
                    graceful_close.append(max(r.closed_at[-1] for r in resumers) - t_sig)
                time.sleep(rng.uniform(0.1, 1.0))  # deltas the clients must catch up on
                connects = [r.connects for r in resumers]
                gateway.start()
                _wait_all(
                    lambda c0=connects: all(r.connects > c for r, c in zip(resumers, c0, strict=True)),
                    20, "every subscriber reconnected",
                )  # fmt: skip
            time.sleep(1)
            written = pump.stop()
            for r in resumers:
                want = stored_rows(store, r.view, r.key, SHARDS)
                _wait_all(lambda r=r, want=want: r.state.rows == want or r.failure is not None,
                          20, f"{r.name} reached the stored rows")  # fmt: skip
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
            gateway.stop()
            browser.close()
    js_deltas = js_reconnects = js_recovering = 0
    for lv in records:
        for name, rec in lv["records"].items():
            check_delta_ids(rec["deltas"])
            js_deltas += len(rec["deltas"])
            js_recovering += rec["recovering"]
            assert len(rec["snapshots"]) >= 1, name
        js_reconnects += lv["states"].count("connected") - 1
    assert js_reconnects >= len(signals) * len(records), lv["states"]
    for r in resumers:
        check_delta_ids(r.state.ids)
    assert all(s <= GRACEFUL_CLOSE_S for s in graceful_close), graceful_close
    figures.values.update(
        restarts=len(signals),
        sigkills=signals.count(signal.SIGKILL),
        sigterms=signals.count(signal.SIGTERM),
        deltas_written=written,
        python_subscribers=len(resumers),
        python_resumes=sum(r.connects - 1 for r in resumers),
        python_deltas_checked=sum(len(r.state.ids) for r in resumers),
        python_resets=sum(r.state.resets for r in resumers),
        js_clients=len(records),
        js_reconnects=js_reconnects,
        js_deltas_checked=js_deltas,
        js_recovering_snapshots=js_recovering,
        sigterm_streams_closed_s=[round(s, 2) for s in graceful_close],
    )
    figures.print()
