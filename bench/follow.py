"""Follows keys of one view through ``liveviews.client`` and counts the deltas it applies, for
``bench.clients``: ``python -m bench.follow URL TOKEN VIEW KEY...``. Prints ``ready`` once every
subscription has its snapshot, and on SIGTERM one JSON line with the deltas applied and the
process's CPU seconds since then."""

from __future__ import annotations

import asyncio
import signal
import sys
import time

import orjson

from liveviews.client import Client


async def follow(url: str, token: str, view: str, keys: list[str]) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    counted = [0]
    async with Client(url, token=token) as client:
        subs = [client.subscribe(view, key) for key in keys]
        await asyncio.gather(*(s.ready() for s in subs))

        async def count(sub: object) -> None:
            async for change in sub:  # type: ignore[attr-defined]
                if change.kind == "delta":
                    counted[0] += 1

        tasks = [asyncio.create_task(count(s)) for s in subs]
        await asyncio.sleep(0.1)  # the snapshots the iterators yield first are not counted
        counted[0] = 0
        began = time.process_time()
        print("ready", flush=True)
        await stop.wait()
        cpu = time.process_time() - began
        for t in tasks:
            t.cancel()
    print(orjson.dumps({"deltas": counted[0], "cpu_s": cpu}).decode(), flush=True)


def main() -> None:
    url, token, view, *keys = sys.argv[1:]
    asyncio.run(follow(url, token, view, keys))


if __name__ == "__main__":
    main()
