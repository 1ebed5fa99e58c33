"""Tokens from a provider: refreshed on the open socket before they expire, and, when that
fails, fetched again after the gateway closes the socket for the expired one (4401); the
subscription resumes with no gap and no duplicate either way."""

from __future__ import annotations

import asyncio

from liveviews.client import ClientState
from tests.client_py.proxy import Proxy
from tests.client_py.support import Collected, client_of, task, titles
from tests.support.gateway import ServedGateway, Writer


async def write_for(seconds: float, got: Collected, writer: Writer) -> int:
    """Write a delta every 0.1 s for ``seconds``; the number of the last one, once it came."""
    n = 0
    for n in range(1, int(seconds / 0.1) + 1):
        writer.write([("tasks", "b1/t1", "task", task(f"t{n}"))])
        await asyncio.sleep(0.1)
    await got.until(lambda c: titles(c[-1:]) == [f"t{n}"])
    return n


async def test_a_token_is_refreshed_on_the_socket_before_it_expires(
    proxy: Proxy, gateway: ServedGateway, writer: Writer
) -> None:
    calls = 0

    async def provider() -> str:
        nonlocal calls
        calls += 1
        return gateway.token("alice", ttl=3)  # 2 to 3 s: expiry is a whole second

    async with client_of(gateway, url=proxy.url, token_provider=provider) as client:
        sub = client.subscribe("tasks", "b1/t1")
        got = Collected(sub)
        await sub.ready()
        n = await write_for(4.0, got, writer)
        assert calls >= 2 and proxy.connections == 1, "new tokens, and the socket never closed"
        assert titles(got.deltas()) == [f"t{i}" for i in range(1, n + 1)]
        await got.stop()


async def test_an_expired_socket_reconnects_with_a_token_from_the_provider(
    proxy: Proxy, gateway: ServedGateway, writer: Writer
) -> None:
    """The refresh before expiry fails (the token service was out of reach): the gateway closes
    the socket with 4401 at expiry, and the client asks the provider again and resumes."""
    calls = 0

    def provider() -> str:  # a plain function is a provider too
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError("the token service is out of reach")
        return gateway.token("alice", ttl=3 if calls == 1 else 60)

    async with client_of(gateway, url=proxy.url, token_provider=provider) as client:
        sub = client.subscribe("tasks", "b1/t1")
        got = Collected(sub)
        await sub.ready()
        n = await write_for(4.5, got, writer)
        assert (calls, proxy.connections, client.state) == (3, 2, ClientState.CONNECTED)
        assert len(got.snapshots()) == 1, "resumed, not reset"
        assert titles(got.deltas()) == [f"t{i}" for i in range(1, n + 1)]
        await got.stop()
