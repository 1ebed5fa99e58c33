"""Change data capture, measured: how fast PostgreSQL's committed row changes enter the log,
and how long a commit takes to reach a browser, each beside ``POST /v1/events`` in the same run.

**Throughput.** For each transaction size (1, 10, 100 rows), ``--changes`` row inserts are
committed into the shop's ``orders`` table while the CDC process is stopped, so that its
replication slot holds them all; then the CDC process starts, and the figure is the row
changes it appended per second, from its first appended entry to its last (by the store's own
entry ids; the start-up, from the process's start, is reported apart). The baseline posts the
same number of events of the same shape to the gateway in batches of the same sizes, from
``POST_CLIENTS`` concurrent clients, and counts events accepted per second.

**Latency.** The shop runs whole (PostgreSQL, CDC, its pipeline, a gateway) and Chromium
follows every customer's ``orders`` view through the JavaScript client over WebSocket. Each
tick (20 ms) one transaction updates the totals that are due at the rate, each to a value
never used before; a change's latency runs from just before its ``COMMIT`` to the
``change`` event that carries its value on the page, on one clock (``bench.latency.Phase``).
The baseline runs the same views and pipeline with the same updates published as events
(``bench.posted_shop``), one ``POST`` per tick, timed from just before the ``POST``. Each rate
runs after a lead-in of the same load, unrecorded, while the pipeline's JVM warms up.

    .venv/bin/python -m bench.cdc [--quick] [--changes 100000] [--tx-sizes 1,10,100]
        [--rates 100,1000] [--seconds 30] [--lead-in 20]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import psycopg2

from bench.browser import CHROMIUM, CHROMIUM_ARGS
from bench.common import Report, Row, save, token
from bench.latency import Phase, batch_figures, latency_stats
from bench.moment import Moment
from bench.system import PARTITIONS, ROOT, System, running_store
from demo.orders.database import create_schema
from liveviews.cdc.embedded import EmbeddedPostgres
from liveviews.log.eventlog import log_heads
from liveviews.log.events import entry_id_tuple, log_stream
from liveviews.store.embedded import free_port

SHOP = "demo.orders:app"
POSTED = "bench.posted_shop:app"
CUSTOMERS = 8
ORDERS = 40
"""Orders the latency phases update, round robin: ``ORDERS / CUSTOMERS`` per customer's view."""
POST_CLIENTS = 8
LIVE_COMMITS = 10_000
TICK_S = 0.02
MARK_BASE = 1_000_000_000
"""Update ``n`` sets a total of ``(MARK_BASE + n) / 100``: a value no earlier change set."""
GATEWAY_ENV = {"LV_PUBLISH_RATE": "off", "LV_MAX_BATCH_EVENTS": "1000"}

SUBSCRIBE = """
async ({token, customers}) => {
  const {createClient} = await import('/client-js/index.js');
  window.__arrivals = [];
  const client = createClient({url: location.origin, token, transport: 'ws'});
  const subs = customers.map((c) => client.subscribe('orders', c, {
    change: (e) => {
      const at = Date.now();
      for (const op of e.ops) if (op.op === 'upsert') window.__arrivals.push([op.value.total, at]);
    },
  }));
  await Promise.all(subs.map((s) => s.ready()));
  return client.transport;
}
"""


def mark(n: int) -> str:
    """The total that update ``n`` sets, as PostgreSQL writes a ``numeric(10,2)``."""
    cents = MARK_BASE + n
    return f"{cents // 100}.{cents % 100:02d}"


def customer_of(order: int) -> str:
    return f"c{order % CUSTOMERS}"


# -- the pieces: PostgreSQL, the CDC process, the log --------------------------------------


@contextmanager
def postgres() -> Iterator[str]:
    """An embedded PostgreSQL with the shop's table, in a directory its server user can reach."""
    root = Path(tempfile.mkdtemp(prefix="lv-bench-pg-"))
    root.chmod(0o711)
    try:
        with EmbeddedPostgres(root, free_port()) as url:
            conn = psycopg2.connect(url)
            create_schema(conn)
            conn.close()
            yield url
    finally:
        shutil.rmtree(root, ignore_errors=True)


class Cdc:
    """``python -m liveviews.cdc`` for the shop, started and stopped as a benchmark needs."""

    def __init__(self, system: System, url: str) -> None:
        self.env = system.env({"DATABASE_URL": url, "LV_APP": SHOP})
        self.log = system.data / "cdc.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        out = open(self.log, "ab")  # noqa: SIM115 - the child owns it
        command = [sys.executable, "-m", "liveviews.cdc"]
        self.proc = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=out,
                                     stderr=subprocess.STDOUT)  # fmt: skip

    def wait_following(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while "following" not in self.log.read_text(errors="replace"):
            self.check(deadline)
            time.sleep(0.05)

    def check(self, deadline: float) -> None:
        if self.proc is None or self.proc.poll() is not None or time.monotonic() > deadline:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the CDC process stopped or stalled: {tail}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
        self.proc = None


def log_size(system: System) -> int:
    return sum(int(system.client.xlen(log_stream(p))) for p in range(PARTITIONS))


def append_span_ms(system: System, before: dict[int, str]) -> float:
    """From the first entry appended after ``before`` (each partition's head then) to the
    last, by the store's entry ids: the time the appends took, on the store's clock."""
    firsts, lasts = [], []
    for p in range(PARTITIONS):
        start = f"({before[p]}" if p in before else "-"
        first: Any = system.client.xrange(log_stream(p), min=start, count=1)
        last: Any = system.client.xrevrange(log_stream(p), count=1)
        if first:
            firsts.append(entry_id_tuple(first[0][0].decode())[0])
            lasts.append(entry_id_tuple(last[0][0].decode())[0])
    return float(max(lasts) - min(firsts)) if firsts else float("nan")


# -- throughput ------------------------------------------------------------------------------


def write_backlog(url: str, changes: int, size: int, wait_for_disk: bool = False) -> float:
    """Insert ``changes`` orders in transactions of ``size`` rows; the seconds it took. Unless
    ``wait_for_disk``, the commits do not wait for their WAL to reach the disk
    (``synchronous_commit = off``): faster, when only the backlog is wanted, but PostgreSQL
    sends such a commit to a replication slot only once its WAL writer has flushed it (every
    200 ms), which a live reader would count as its own delay."""
    conn = psycopg2.connect(url)
    started = time.monotonic()
    with conn.cursor() as cur:
        if not wait_for_disk:
            cur.execute("SET synchronous_commit = off")
        for _ in range(changes // size):
            cur.execute(
                "INSERT INTO orders (customer, status, total)"
                " SELECT 'c' || (g %% %s), 'open', 1.00 FROM generate_series(1, %s) g",
                (CUSTOMERS, size),
            )
            conn.commit()
    conn.close()
    return time.monotonic() - started


def cdc_throughput(system: System, cdc: Cdc, url: str, changes: int, size: int) -> dict[str, Any]:
    cdc.stop()
    before, heads = log_size(system), log_heads(system.client, PARTITIONS)
    written_s = write_backlog(url, changes, size)
    started = time.monotonic()
    cdc.start()
    deadline = started + 600
    while log_size(system) < before + changes:
        cdc.check(deadline)
        time.sleep(0.02)
    wall_s = time.monotonic() - started
    span_ms = append_span_ms(system, heads)
    # Entry ids tell milliseconds: a backlog appended within one (a quick run's 600 changes)
    # is timed as one millisecond, and its rate is a lower bound.
    rate = changes / (max(span_ms, 1) / 1000)
    print(f"CDC, transactions of {size}: {rate:,.0f} changes/s ({changes} in {span_ms:.0f} ms;"
          f" {wall_s:.1f} s from the process's start)", flush=True)  # fmt: skip
    return {"tx_rows": size, "changes": changes, "changes_per_s": round(rate),
            "append_span_ms": span_ms, "rate_is_lower_bound": span_ms < 1,
            "from_process_start_s": round(wall_s, 2),
            "backlog_written_s": round(written_s, 2),
            "live": follow_live(system, cdc, url, changes, size)}  # fmt: skip


def follow_live(system: System, cdc: Cdc, url: str, changes: int, size: int) -> dict[str, Any]:
    """Writes of the same size with the CDC process following as they commit, each commit
    waiting for the disk as by default (at most ``LIVE_COMMITS`` of them): how far behind the
    last commit its last append came. The writer, one connection, sets the pace."""
    changes = min(changes, LIVE_COMMITS * size)
    before = log_size(system)
    started = time.time()
    written_s = write_backlog(url, changes, size, wait_for_disk=True)
    committed = time.time()
    deadline = time.monotonic() + 600
    while log_size(system) < before + changes:
        cdc.check(deadline)
        time.sleep(0.01)
    heads = log_heads(system.client, PARTITIONS)
    last_ms = max(entry_id_tuple(h)[0] for h in heads.values())
    behind_ms = last_ms - committed * 1000
    rate = changes / (last_ms / 1000 - started)
    print(f"  live: {rate:,.0f} changes/s into the log as they commit ({changes / written_s:,.0f}"
          f" committed/s); the last append {behind_ms:.0f} ms after the last commit",
          flush=True)  # fmt: skip
    return {"changes": changes, "changes_per_s": round(rate),
            "committed_per_s": round(changes / written_s),
            "last_append_after_last_commit_ms": round(behind_ms)}  # fmt: skip


async def post_throughput(base: str, changes: int, size: int, first_id: int) -> dict[str, Any]:
    """``changes`` inserts posted in batches of ``size`` by ``POST_CLIENTS`` clients."""
    headers = {"Authorization": f"Bearer {token('bench')}", "Content-Type": "application/json"}
    bodies = [
        orjson.dumps([
            {"type": "orders_insert", "payload": {"id": first_id + i + j,
             "customer": customer_of(i + j), "status": "open", "total": "1.00"}}
            for j in range(size)
        ])
        for i in range(0, changes - changes % size, size)
    ]  # fmt: skip
    refused = 0

    async def client(session: aiohttp.ClientSession, mine: list[bytes]) -> None:
        nonlocal refused
        for body in mine:
            async with session.post(f"{base}/v1/events", data=body, headers=headers) as r:
                await r.read()
                refused += r.status != 202

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        started = time.monotonic()
        await asyncio.gather(*(client(session, bodies[k::POST_CLIENTS])
                               for k in range(POST_CLIENTS)))  # fmt: skip
        took = time.monotonic() - started
    sent = len(bodies) * size
    rate = sent / took
    print(f"POST, batches of {size}: {rate:,.0f} events/s ({sent} in {took:.1f} s,"
          f" {refused} refused)", flush=True)  # fmt: skip
    return {"batch_events": size, "events": sent, "events_per_s": round(rate),
            "seconds": round(took, 2), "refused": refused}  # fmt: skip


def one_at_a_time(system: System, transactions: int) -> dict[str, Any]:
    """Bound: store transactions of one event and a position (an ``XADD`` and an ``HSET`` in a
    MULTI), one after the other from one client, as the CDC process appends a transaction. With
    the store's ``appendfsync always`` each waits for its own fsync."""
    key = "bench:cdc:bound"
    started = time.monotonic()
    for i in range(transactions):
        with system.client.pipeline(transaction=True) as pipe:
            pipe.xadd(key, {"type": "orders_insert", "payload": b"x" * 80})
            pipe.hset(f"{key}:position", "lsn", str(i))
            pipe.execute()
    took = time.monotonic() - started
    system.client.delete(key, f"{key}:position")
    rate = transactions / took
    print(f"bound: {rate:,.0f} store transactions/s one at a time", flush=True)
    return {
        "transactions": transactions,
        "per_s": round(rate),
        "each_us": round(took / transactions * 1e6),
    }


def throughput(changes: int, sizes: list[int]) -> dict[str, Any]:
    with running_store() as system, postgres() as url:
        cdc = Cdc(system, url)
        cdc.start()  # makes the slot and takes the (empty) table's snapshot
        cdc.wait_following()
        out = [cdc_throughput(system, cdc, url, changes, size) for size in sizes]
        cdc.stop()
        bound = one_at_a_time(system, min(changes, 3000))
        system.start_gateway({"LV_APP": POSTED, **GATEWAY_ENV})
        posted = []
        for i, size in enumerate(sizes):
            run = post_throughput(system.base, changes, size, first_id=(i + 1) * 10_000_000)
            posted.append(asyncio.run(run))
    return {"cdc": out, "post": posted, "one_at_a_time": bound}


# -- latency -------------------------------------------------------------------------------


Send = Callable[[list[tuple[int, str]], Callable[[], None]], None]
"""``send(updates, mark)``: write the updates (order, total), calling ``mark()`` just before
the moment that makes them happen (a COMMIT, a POST)."""


def drive(send: Send, phase: Phase, rate: int, seconds: float, counter: list[int]) -> None:
    """Updates at ``rate`` per second, round robin over the orders: each tick, the ones due."""
    start = time.monotonic()
    first = counter[0]
    while (elapsed := time.monotonic() - start) < seconds:
        batch = []
        while counter[0] - first < elapsed * rate:
            n = counter[0]
            batch.append((n % ORDERS + 1, mark(n)))
            counter[0] += 1
        if batch:

            def noted(batch: list[tuple[int, str]] = batch, seq: int = counter[0]) -> None:
                now = phase.clock()
                for i, (order, total) in enumerate(batch):
                    phase.posted(order, seq - len(batch) + i, total, now)

            send(batch, noted)
        time.sleep(max(0.0, TICK_S - (time.monotonic() - start - elapsed)))


def sql_sender(url: str) -> tuple[Send, Callable[[], None]]:
    conn = psycopg2.connect(url)

    def send(batch: list[tuple[int, str]], noted: Callable[[], None]) -> None:
        with conn.cursor() as cur:
            for order, total in batch:
                cur.execute("UPDATE orders SET total = %s WHERE id = %s", (total, order))
        noted()
        conn.commit()

    return send, conn.close


def post_sender(base: str) -> tuple[Send, Callable[[], None]]:
    address = base.removeprefix("http://")
    conn = http.client.HTTPConnection(address, timeout=30)
    headers = {"Authorization": f"Bearer {token('bench')}", "Content-Type": "application/json"}

    def post(body: bytes, again: bool = True) -> int:
        nonlocal conn
        try:
            conn.request("POST", "/v1/events", body, headers)
            response = conn.getresponse()
        except OSError:  # the gateway closed the idle connection between phases: open another
            conn.close()
            conn = http.client.HTTPConnection(address, timeout=30)
            if not again:
                raise
            return post(body, again=False)
        response.read()
        return response.status

    def send(batch: list[tuple[int, str]], noted: Callable[[], None]) -> None:
        body = orjson.dumps([
            {"type": "orders_update", "payload": {"id": order, "customer": customer_of(order),
             "status": "open", "total": total, "old_key": {"id": order}}}
            for order, total in batch
        ])  # fmt: skip
        noted()
        status = post(body)
        if status != 202:
            raise RuntimeError(f"POST /v1/events answered {status}")

    return send, lambda: conn.close()


def to_the_log(system: System, heads: dict[int, str], phase: Phase) -> list[float]:
    """Each change's time from its send to its entry in the log (the store's entry id, on the
    same clock): the part of the latency before the pipeline."""
    out = []
    for p in range(PARTITIONS):
        start = f"({heads[p]}" if p in heads else "-"
        entries: Any = system.client.xrange(log_stream(p), min=start)
        for entry_id, fields in entries:
            sent = phase.sent.get(orjson.loads(fields[b"payload"]).get("total"))
            if sent is not None:
                out.append(entry_id_tuple(entry_id.decode())[0] - sent[2] * 1000)
    return out


def measure(system: System, send: Send, rates: list[int], seconds: float, lead_in: float
            ) -> list[dict[str, Any]]:  # fmt: skip
    from playwright.sync_api import sync_playwright

    out, counter = [], [0]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(f"{system.base}/client-js/index.js")
        customers = [f"c{c}" for c in range(CUSTOMERS)]
        used = page.evaluate(SUBSCRIBE, {"token": token("observer"), "customers": customers})
        assert used == "ws", f"the client chose {used}, not ws"
        for rate in rates:
            if lead_in > 0:
                drive(send, Phase(rate, clock=time.time), rate, lead_in, counter)
                time.sleep(2)
                page.evaluate("() => { window.__arrivals = []; }")
            phase = Phase(rate, clock=time.time)
            heads = log_heads(system.client, PARTITIONS)
            since = time.time()
            drive(send, phase, rate, seconds, counter)
            time.sleep(5)  # the last changes' frames
            arrivals = page.evaluate("() => window.__arrivals.splice(0)")
            latencies = phase.replay([(total, at / 1000) for total, at in arrivals])
            reflected = round(len(latencies) / len(phase.sent), 4) if phase.sent else 0.0
            logged = latency_stats(to_the_log(system, heads, phase))
            out.append({"rate": rate, "seconds": seconds, "lead_in_s": lead_in,
                        "changes": len(phase.sent), **latency_stats(latencies),
                        "reflected_fraction": reflected, "to_the_log": logged,
                        "batches": batch_figures(system, since)})  # fmt: skip
            print(f"  {rate}/s: p50 {out[-1]['p50_ms']} ms, p99 {out[-1]['p99_ms']} ms,"
                  f" {reflected:.1%} reflected; into the log p50 {logged['p50_ms']} ms,"
                  f" p99 {logged['p99_ms']} ms", flush=True)  # fmt: skip
        browser.close()
    return out


def seed_rows() -> list[tuple[int, str]]:
    return [(order, customer_of(order)) for order in range(1, ORDERS + 1)]


def cdc_latency(rates: list[int], seconds: float, lead_in: float) -> list[dict[str, Any]]:
    print("commit to browser, through CDC:", flush=True)
    with running_store() as system, postgres() as url:
        conn = psycopg2.connect(url)
        with conn.cursor() as cur:
            for order, customer in seed_rows():
                cur.execute("INSERT INTO orders (id, customer, status, total)"
                            " VALUES (%s, %s, 'open', 0)", (order, customer))  # fmt: skip
        conn.commit()
        conn.close()
        cdc = Cdc(system, url)
        cdc.start()
        system.start_pipeline({"LV_APP": SHOP})
        system.start_gateway({"LV_APP": SHOP})
        try:
            deadline = time.monotonic() + 120
            while log_size(system) < ORDERS:
                cdc.check(deadline)
                time.sleep(0.05)
            system.wait_until_caught_up()
            send, close = sql_sender(url)
            try:
                return measure(system, send, rates, seconds, lead_in)
            finally:
                close()
        finally:
            cdc.stop()


def post_latency(rates: list[int], seconds: float, lead_in: float) -> list[dict[str, Any]]:
    print("POST to browser:", flush=True)
    with running_store() as system:
        system.start_pipeline({"LV_APP": POSTED})
        system.start_gateway({"LV_APP": POSTED, **GATEWAY_ENV})
        send, close = post_sender(system.base)
        seed = [
            {"type": "orders_insert",
             "payload": {"id": order, "customer": customer, "status": "open", "total": "0.00"}}
            for order, customer in seed_rows()
        ]  # fmt: skip
        conn = http.client.HTTPConnection(system.base.removeprefix("http://"), timeout=30)
        conn.request("POST", "/v1/events", orjson.dumps(seed),
                     {"Authorization": f"Bearer {token('bench')}",
                      "Content-Type": "application/json"})  # fmt: skip
        assert conn.getresponse().status == 202
        conn.close()
        system.wait_until_caught_up()
        try:
            return measure(system, send, rates, seconds, lead_in)
        finally:
            close()


# -- the report ----------------------------------------------------------------------------


def run(
    quick: bool = False, changes: int = 100_000, sizes: list[int] | None = None,
    rates: list[int] | None = None, seconds: float = 30, lead_in: float = 20,
) -> Report:  # fmt: skip
    sizes, rates = sizes or [1, 10, 100], rates or [100, 1000]
    if quick:
        changes, rates, seconds, lead_in = 600, [10], 3, 0
    moment = Moment()
    figures: dict[str, Any] = {"throughput": throughput(changes, sizes)}
    figures["latency"] = {"cdc": cdc_latency(rates, seconds, lead_in),
                          "post": post_latency(rates, seconds, lead_in)}  # fmt: skip
    figures.update(post_clients=POST_CLIENTS, orders=ORDERS, customers=CUSTOMERS)
    save("cdc", figures, moment)
    rows = []
    for cdc, post in zip(figures["throughput"]["cdc"], figures["throughput"]["post"], strict=True):
        rows.append(Row(
            figure=f"row changes into the log per second, transactions of {cdc['tx_rows']} rows"
                   f" ({cdc['changes']:,} changes, from the slot's backlog)",
            measured=f"{cdc['changes_per_s']:,}; following the commits live:"
                     f" {cdc['live']['changes_per_s']:,} (the writer's pace), the last append"
                     f" {cdc['live']['last_append_after_last_commit_ms']:,} ms after the last"
                     " commit",
            baseline=f"POST /v1/events, batches of {post['batch_events']}, {POST_CLIENTS} clients:"
                     f" {post['events_per_s']:,} events/s",
        ))  # fmt: skip
    bound = figures["throughput"]["one_at_a_time"]
    rows.append(Row(
        figure="bound: store transactions per second, one at a time from one client (an event"
               " and a position in a MULTI)",
        measured=f"{bound['per_s']:,} ({bound['each_us']:,} µs each)",
        baseline="the CDC process appends each transaction so, waiting for the store's fsync",
    ))  # fmt: skip
    for cdc, post in zip(figures["latency"]["cdc"], figures["latency"]["post"], strict=True):
        rows.append(Row(
            figure=f"COMMIT to change event in Chromium (WebSocket), {cdc['rate']} changes/s,"
                   " p50 / p95 / p99 / max (ms)",
            measured=f"{cdc['p50_ms']:.0f} / {cdc['p95_ms']:.0f} / {cdc['p99_ms']:.0f}"
                     f" / {cdc['max_ms']:.0f}",
            baseline=f"POST to change event: {post['p50_ms']:.0f} / {post['p95_ms']:.0f} /"
                     f" {post['p99_ms']:.0f} / {post['max_ms']:.0f}; into the log, p50 / p99:"
                     f" COMMIT {cdc['to_the_log']['p50_ms']:.0f} /"
                     f" {cdc['to_the_log']['p99_ms']:.0f}, POST"
                     f" {post['to_the_log']['p50_ms']:.0f} / {post['to_the_log']['p99_ms']:.0f}",
        ))  # fmt: skip
    return Report("cdc", "Change data capture from PostgreSQL", "python -m bench.cdc", figures,
                  rows, moment=moment.finish())  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--tx-sizes", default="1,10,100")
    parser.add_argument("--rates", default="100,1000")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--lead-in", type=float, default=20, metavar="SECONDS")
    args = parser.parse_args()
    run(args.quick, args.changes, [int(s) for s in args.tx_sizes.split(",")],
        [int(r) for r in args.rates.split(",")], args.seconds, args.lead_in)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
