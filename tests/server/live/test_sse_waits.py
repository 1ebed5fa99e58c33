"""Read-your-writes over SSE: a stream named by its client (``stream``) takes waits posted to
any gateway process (``POST /v1/streams/{stream}/wait``), and a key that did not change is
passed the newest frontier at the quiet rhythm only (docs/PROTOCOL.md, section 4)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tests.support.gateway import SSE, ServedGateway, Writer, open_sse
from tests.support.gateway_settings import settings_for

QUIET = "/v1/views/profiles/quiet/live"


async def _nothing_for(sse: SSE, seconds: float) -> None:
    with pytest.raises(TimeoutError):
        await sse.next(timeout=seconds)


async def _wait(s: aiohttp.ClientSession, served: ServedGateway, stream: str, user: str,
                offsets: object) -> aiohttp.ClientResponse:  # fmt: skip
    return await s.post(f"{served.url}/v1/streams/{stream}/wait", json={"offsets": offsets},
                        headers=served.headers(user))  # fmt: skip


async def test_a_wait_posted_to_any_gateway_brings_the_frontier_to_the_named_stream(
    store_url: str, writer: Writer
) -> None:
    env = {"LV_PROGRESS_INTERVAL_MS": "100", "LV_QUIET_PROGRESS_MS": "60000"}
    holder = ServedGateway(settings_for(store_url, **env)).start()
    other = ServedGateway(settings_for(store_url, **env)).start()
    try:
        async with aiohttp.ClientSession() as s:
            sse = await open_sse(s, holder.url + QUIET, holder.headers("alice"),
                                 params={"stream": "tab-1_x"})  # fmt: skip
            assert (await sse.next()).event == "snapshot"
            writer.write([("profiles", "quiet", "profile", {"name": "one"})], {0: "100-0"})
            first = await sse.next(skip=("delta",))  # with its key's delta
            assert first.data["frontier"] == {"0": "100-0"}
            writer.write([("profiles", "busy", "profile", {"name": "two"})], {0: "200-0"})
            await _nothing_for(sse, 1.0)  # its key did not change: the quiet rhythm holds it

            # Read already, not yet passed on: the wait is answered at once, through the
            # other gateway and the store.
            answer = await _wait(s, other, "tab-1_x", "alice", [{"partition": 0, "id": "200-0"}])
            assert answer.status == 204
            got = await sse.next(timeout=5)
            assert (got.event, got.data["frontier"]) == ("progress", {"0": "200-0"})

            # Not read yet: answered by the first frontier that covers it.
            answer = await _wait(s, holder, "tab-1_x", "alice", [{"partition": 0, "id": "300-0"}])
            assert answer.status == 204
            await asyncio.sleep(0.3)  # the wait reaches the holder before the frontier
            writer.write([("profiles", "busy", "profile", {"name": "three"})], {0: "300-0"})
            got = await sse.next(timeout=5)
            assert (got.event, got.data["frontier"]) == ("progress", {"0": "300-0"})

            # Another subject's wait, or one for another stream, does nothing to it.
            writer.write([("profiles", "busy", "profile", {"name": "four"})], {0: "400-0"})
            for user, stream in (("bob", "tab-1_x"), ("alice", "tab-2")):
                answer = await _wait(s, other, stream, user, [{"partition": 0, "id": "400-0"}])
                assert answer.status == 204
            await _nothing_for(sse, 1.0)
            await sse.close()
    finally:
        other.stop()
        holder.stop()


async def test_a_malformed_stream_id_or_wait_is_refused_with_a_sentence(
    gateway: ServedGateway,
) -> None:
    async with aiohttp.ClientSession() as s:
        bad = await s.get(gateway.url + QUIET, params={"stream": "not an id"},
                          headers=gateway.headers("alice"))  # fmt: skip
        assert bad.status == 400
        assert (await bad.json())["code"] == "invalid_parameter"
        for body, status, code in [
            ({"offsets": []}, 422, "invalid_offsets"),
            ({"offsets": [{"partition": 0, "id": "x"}]}, 422, "invalid_offsets"),
            ([1], 422, "invalid_offsets"),
        ]:
            answer = await s.post(gateway.url + "/v1/streams/tab/wait", json=body,
                                  headers=gateway.headers("alice"))  # fmt: skip
            assert answer.status == status
            error = await answer.json()
            assert error["code"] == code and "offset" in error["message"]
        answer = await s.post(gateway.url + "/v1/streams/a.b/wait", json={"offsets": []},
                              headers=gateway.headers("alice"))  # fmt: skip
        assert (answer.status, (await answer.json())["code"]) == (400, "invalid_parameter")
        answer = await s.post(gateway.url + "/v1/streams/tab/wait", data=b"{",
                              headers={**gateway.headers("alice"),
                                       "Content-Type": "application/json"})  # fmt: skip
        assert (answer.status, (await answer.json())["code"]) == (400, "malformed_json")
