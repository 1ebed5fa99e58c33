"""End-to-end latency in a real browser: ``POST /v1/events`` until the JS client in Chromium
applies the delta.

The system and the load are those of ``bench.latency`` (renames at a fixed rate, every user's
``profiles`` view subscribed), with two Chromium pages instead of the Python subscriber: one
whose client reads over SSE, one over WebSocket. Each page notes ``Date.now()`` when its
subscription's ``change`` event fires; the publisher notes the wall clock before each POST.
Over SSE each subscription is a stream of its own, and a browser opens at most 6 HTTP/1.1
connections to one origin, so the SSE page follows 5 users; the WebSocket page follows all.

The measured minute comes after a lead-in of the same load, unrecorded (60 s by default): in
its first minute the pipeline's JVM is still compiling what each micro-batch runs, and its
batches then take ~1.6 times as long at the median (docs/PERFORMANCE.md). ``bench.latency``
measures 100 events/s after a minute at 10 events/s, so both start from the same point.

Then read-your-writes: three more pages each publish a rename of their own user and time
``publish()`` until ``sub.reflects(offset)`` resolves on their ``profiles`` subscription, then
pause for a random time up to 500 ms (writes at random moments of the pipeline's batches),
while 1,000 other subscriptions (ten WebSockets of a Python client, on the renamed users' keys)
are served and renames go on at the same total rate. One page reads over WebSocket, whose
``reflects`` asks the gateway for the covering frontier at once (a ``wait`` message); the
same-run baseline is a WebSocket page whose client does not send it, whose frontier comes at
the quiet rhythm (``LV_QUIET_PROGRESS_MS``, 5 s) unless its key changed. The SSE page's client
posts its waits (``POST /v1/streams/{stream}/wait``).

Both run twice, each on a system of its own: with ``profiles`` in micro-batches ("tuned") and
as Chirp declares it, in Spark's Real-Time Mode ("realtime").

    .venv/bin/python -m bench.browser [--quick] [--rate 100] [--seconds 60] [--lead-in 60]
        [--configurations tuned,realtime]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import orjson

from bench.common import Report, Row, percentile, save, token
from bench.latency import USERS, Phase, configuration_env, latency_stats, publish, seed
from bench.moment import Moment
from bench.system import running_store

CHROMIUM = "/usr/bin/chromium"
SSE_USERS = 5
LEAD_IN_S = 60
"""Seconds of the same load, unrecorded, before the measured ones."""
CONFIGURATIONS = ["tuned", "realtime"]
"""``profiles`` in micro-batches, then as Chirp declares it, in Real-Time Mode (bench.latency)."""
MODES = {"tuned": "micro-batches", "realtime": "Real-Time Mode"}
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip

SUBSCRIBE = """
async ({token, users, transport}) => {
  const {createClient} = await import('/client-js/index.js');
  window.__arrivals = [];
  const client = createClient({url: location.origin, token, transport});
  const subs = users.map((u) => client.subscribe('profiles', u, {
    change: (e) => {
      const at = Date.now();
      for (const op of e.ops) if (op.op === 'upsert') window.__arrivals.push([op.value.name, at]);
    },
  }));
  await Promise.all(subs.map((s) => s.ready()));
  return client.transport;
}
"""

REFLECTS = """
async ({token, user, transport, wait, count, everyMs}) => {
  const {createClient} = await import('/client-js/index.js');
  const client = createClient({url: location.origin, token, transport});
  if (!wait) client._wait = () => {};  // the baseline: reflects waits for the coalesced frontier
  const sub = client.subscribe('profiles', user);
  await sub.ready();
  const out = [];
  for (let i = 0; i < count; i++) {
    const started = performance.now();
    const offset = await client.publish({type: 'profile_set', payload: {user, name: `r${i}`}});
    const published = performance.now();
    await sub.reflects(offset);
    const reflected = performance.now();
    out.push([published - started, reflected - started, sub.rows.get('profile')?.name === `r${i}`]);
    // A random pause, so that writes fall at random moments of the pipeline's batches or
    // epochs rather than each just after the last one resolved, in step with them.
    await new Promise((resolve) => setTimeout(resolve, Math.random() * everyMs));
  }
  client.close();
  return out;
}
"""
REFLECT_PAGES = {"ws": ("ws", True), "ws_without_wait": ("ws", False), "sse": ("sse", True)}
"""Page name -> (transport, whether its client asks for the covering frontier at once)."""
REFLECT_EVERY_MS = 500
"""The longest pause of a read-your-writes page between one write resolved and the next."""
OTHER_SUBSCRIBERS = 1000


async def other_subscribers(base: str, n: int, ready: asyncio.Event, counted: list[int]) -> None:
    """``n`` subscriptions to the renamed users' profiles, 100 per WebSocket, read and dropped."""
    import aiohttp

    url = base.replace("http://", "ws://") + "/v1/ws"

    async def one_socket(session: aiohttp.ClientSession, first: int, count: int,
                         opened: asyncio.Event) -> None:  # fmt: skip
        async with session.ws_connect(url, params={"access_token": token("others")}) as ws:
            for i in range(first, first + count):
                sub = {"type": "subscribe", "sub": f"s{i}", "view": "profiles",
                       "key": f"u{i % USERS}"}  # fmt: skip
                await ws.send_str(orjson.dumps(sub).decode())
            snapshots = 0
            async for msg in ws:
                kind = orjson.loads(msg.data).get("type")
                counted[0] += 1
                if kind == "snapshot":
                    snapshots += 1
                    if snapshots == count:
                        opened.set()

    async with aiohttp.ClientSession() as session:
        per = 100
        opened = [asyncio.Event() for _ in range(0, n, per)]
        tasks = [asyncio.create_task(one_socket(session, i * per, min(per, n - i * per), e))
                 for i, e in enumerate(opened)]  # fmt: skip
        await asyncio.gather(*(e.wait() for e in opened))
        ready.set()
        await asyncio.gather(*tasks)


async def measure_reflects(base: str, rate: int, seconds: float, others: int = OTHER_SUBSCRIBERS
                           ) -> dict[str, Any]:  # fmt: skip
    """Publish -> ``reflects()`` resolved in Chromium, per page, under the load above."""
    import aiohttp
    from playwright.async_api import async_playwright

    count = max(1, int(seconds * 1000 / REFLECT_EVERY_MS))
    ready, counted = asyncio.Event(), [0]
    serving = asyncio.create_task(other_subscribers(base, others, ready, counted))
    await asyncio.wait_for(ready.wait(), 60)
    own_rate = len(REFLECT_PAGES) * 1000 / REFLECT_EVERY_MS
    phase = Phase(max(1, round(rate - own_rate)), clock=time.time)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        pages = {}
        for name in REFLECT_PAGES:
            page = await (await browser.new_context()).new_page()
            await page.goto(f"{base}/client-js/index.js")
            pages[name] = page
        async with aiohttp.ClientSession() as session:
            writer = asyncio.create_task(publish(session, base, phase, seconds + 5, f"o{rate}x"))
            runs = await asyncio.gather(*(
                page.evaluate(REFLECTS, {
                    "token": token(f"me_{name}"), "user": f"me_{name}", "transport": transport,
                    "wait": wait, "count": count, "everyMs": REFLECT_EVERY_MS,
                })
                for name, page in pages.items()
                for transport, wait in [REFLECT_PAGES[name]]
            ))  # fmt: skip
            await writer
        await browser.close()
    serving.cancel()
    out: dict[str, Any] = {"others": others, "other_frames": counted[0],
                           "renames_by_others_per_s": phase.rate, "every_ms": REFLECT_EVERY_MS,
                           "publish_errors": phase.errors}  # fmt: skip
    for name, run in zip(pages, runs, strict=True):
        out[name] = {
            **latency_stats([r[1] for r in run]),
            "publish_p50_ms": round(percentile([r[0] for r in run], 50), 1),
            "shown_when_resolved": round(sum(1 for r in run if r[2]) / len(run), 4),
            "n": len(run),
        }
    return out


async def measure(base: str, rate: int, seconds: float, lead_in: float = 0) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    followed = {"sse": [f"u{u}" for u in range(SSE_USERS)], "ws": [f"u{u}" for u in range(USERS)]}
    phase = Phase(rate, clock=time.time)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        pages = {}
        for transport in ("sse", "ws"):
            page = await (await browser.new_context()).new_page()
            await page.goto(f"{base}/client-js/index.js")
            users = followed[transport]
            args = {"token": token("observer"), "users": users, "transport": transport}
            used = await page.evaluate(SUBSCRIBE, args)
            assert used == transport, f"the client chose {used}, not {transport}"
            pages[transport] = page
        import aiohttp

        async with aiohttp.ClientSession() as session:
            if lead_in > 0:
                await publish(session, base, Phase(rate, clock=time.time), lead_in, f"w{rate}x")
                for page in pages.values():  # the lead-in's changes are not measured
                    await page.evaluate("() => { window.__arrivals = []; }")
            await publish(session, base, phase, seconds, f"b{rate}x")
        await asyncio.sleep(5)
        out = {}
        for transport, page in pages.items():
            arrivals = await page.evaluate("() => window.__arrivals")
            latencies = phase.replay([(name, at / 1000) for name, at in arrivals])
            mine = [s for s in phase.sent.values() if f"u{s[0]}" in followed[transport]]
            reflected = round(len(latencies) / len(mine), 4) if mine else 0.0
            out[transport] = {**latency_stats(latencies), "reflected_fraction": reflected}
        await browser.close()
    return {"rate": rate, "seconds": seconds, "lead_in_s": lead_in,
            "changes_posted": len(phase.sent), **out}  # fmt: skip


def measure_configuration(name: str, quick: bool, rate: int, seconds: float,
                          lead_in: float) -> dict[str, Any]:  # fmt: skip
    """Both measures on a system of its own, its pipeline run as ``name`` (``bench.latency``)."""
    with running_store() as system:
        seed(system)
        system.start_gateway()
        system.start_pipeline(configuration_env(name))
        system.wait_until_caught_up(timeout=300)
        figures = asyncio.run(measure(system.base, rate, seconds, lead_in))
        others = 100 if quick else OTHER_SUBSCRIBERS
        figures["reflects"] = asyncio.run(measure_reflects(system.base, rate, seconds, others))
    return figures


def rows_of(figures: dict[str, Any], rate: int, mode: str,
            baseline: dict[str, Any] | None) -> list[Row]:  # fmt: skip
    """The report's rows of one configuration; ``baseline`` the same figures of the first."""

    def stats(f: dict[str, Any]) -> str:
        return (f"{f['p50_ms']:.0f} / {f['p95_ms']:.0f} / {f['p99_ms']:.0f} / "
                f"{f['max_ms']:.0f}")  # fmt: skip

    # Real-Time Mode's targets, for the push and for reflects() over a WebSocket with wait.
    fast = mode == "realtime"
    target = "p50 <= 25, p99 <= 60" if fast else "p50 <= 200, p99 <= 500" if rate == 100 else ""
    rows = [
        Row(f"POST to change event in Chromium ({t.upper()}), {rate} events/s, {mode}, "
            "p50 / p95 / p99 / max (ms)", stats(figures[t]), target,
            f"micro-batches: {stats(baseline[t])}" if baseline else "")
        for t in ("sse", "ws")
    ]  # fmt: skip
    r, b = figures["reflects"], (baseline or {}).get("reflects")
    target = "p50 <= 25, p99 <= 60" if fast else "p50 <= 200, p99 <= 400" if rate == 100 else ""
    rows += [
        Row(f"publish() to reflects() in Chromium ({label}), {rate} events/s, {mode}, "
            f"{r['others']:,} other subscribers, p50 / p95 / p99 / max (ms)", stats(r[name]),
            target if name == "ws" else "",
            f"micro-batches: {stats(b[name])}" if b else "baseline" if name != "ws" else "")
        for name, label in [("ws", "WebSocket, wait"), ("ws_without_wait", "WebSocket, no wait"),
                            ("sse", "SSE")]
    ]  # fmt: skip
    return rows


def run(quick: bool = False, rate: int = 100, seconds: float = 60,
        lead_in: float = LEAD_IN_S, configurations: list[str] | None = None) -> Report:  # fmt: skip
    if quick:
        rate, seconds, lead_in, configurations = 10, 4, 0, ["tuned"]
    chosen = configurations or CONFIGURATIONS
    moment = Moment()
    results = {c: measure_configuration(c, quick, rate, seconds, lead_in) for c in chosen}
    # The first configuration's figures at the top, as before there were two; the others beside.
    figures: dict[str, Any] = {**results[chosen[0]], "configuration": chosen[0]}
    figures.update({c: results[c] for c in chosen[1:]})
    save("browser", figures, moment)
    first = results[chosen[0]] if chosen[0] == "tuned" else None
    rows = [
        row
        for c in chosen
        for row in rows_of(results[c], rate, MODES[c], first if c != "tuned" else None)
    ]
    return Report("browser", "End-to-end latency in Chromium", "python -m bench.browser",
                  figures, rows, moment=moment.finish())  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--lead-in", type=float, default=LEAD_IN_S, metavar="SECONDS",
                        help="the same load, unrecorded, before the measured seconds")  # fmt: skip
    parser.add_argument(
        "--configurations",
        default=",".join(CONFIGURATIONS),
        help="tuned (micro-batches), realtime (profiles in Real-Time Mode)",
    )
    args = parser.parse_args()
    run(
        args.quick,
        args.rate,
        args.seconds,
        args.lead_in,
        [c for c in args.configurations.split(",") if c],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
