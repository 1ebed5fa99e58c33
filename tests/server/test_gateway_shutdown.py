"""On SIGTERM the gateway ends its open streams at once, and their clients resume elsewhere.

The bug: once SSE frames were written straight to the connection (``liveviews.gateway.live.sse``), no
part of the gateway watched for uvicorn's graceful shutdown any more (sse-starlette's response
used to). An open stream then stayed open until uvicorn's ``timeout_graceful_shutdown`` ran out
(~5 s) and was cut off, so its clients sat on a dying process instead of resuming on the next.
The fix: the process's SSE ticker watches for the server's ``should_exit`` and closes every
stream cleanly (and any stream opened after it), so ``EventSource`` resumes with
``Last-Event-ID``. uvicorn closes WebSockets itself, with 1012 (service restart).

The gateway runs as ``python -m liveviews.gateway`` so it gets a real signal, as in production.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import aiohttp
import orjson
import pytest
import redis

from demo.chirp import app as chirp
from tests.faults.clients import dev_token
from tests.faults.harness import RETENTION, SHARDS, Gateway
from tests.support.gateway import SSE, Writer, free_port

PROMPTLY_S = 1.5
"""How soon after SIGTERM each stream must have ended."""
GRACE_S = 5.0
"""uvicorn's ``timeout_graceful_shutdown`` (``liveviews.gateway.serve``): exiting later means a stream
held the process until it was cut off."""


async def _open_sse(s: aiohttp.ClientSession, url: str, token: str, last_id: str | None
                    ) -> aiohttp.ClientResponse:  # fmt: skip
    headers = {"Authorization": f"Bearer {token}"}
    if last_id is not None:
        headers["Last-Event-ID"] = last_id
    resp = await s.get(f"{url}/v1/views/profiles/sd1/live", headers=headers)
    assert resp.status == 200, await resp.text()
    return resp


async def _ws_next(ws: aiohttp.ClientWebSocketResponse, kind: str) -> dict[str, object]:
    async with asyncio.timeout(10):
        while True:
            m = await ws.receive()
            assert m.type == aiohttp.WSMsgType.TEXT, m
            msg: dict[str, object] = orjson.loads(m.data)
            if msg["type"] == kind:
                return msg


async def _sse_ended(stream: SSE, t_sig: float) -> float:
    """Seconds from the signal to the stream's clean end; no frame may come before it."""
    with pytest.raises(EOFError):
        while True:
            ev = await stream.next(timeout=10)
            assert ev.event == "progress", f"unexpected {ev.event} frame while shutting down"
    return time.monotonic() - t_sig


async def _ws_closed(ws: aiohttp.ClientWebSocketResponse, t_sig: float) -> tuple[float, int]:
    async with asyncio.timeout(10):
        while True:
            m = await ws.receive()
            if m.type != aiohttp.WSMsgType.TEXT:
                return time.monotonic() - t_sig, ws.close_code or 0


@pytest.mark.timeout(120)
async def test_sigterm_ends_sse_and_ws_streams_at_once_and_sse_resumes(
    store: redis.Redis, store_url: str, tmp_path: Path
) -> None:
    gateway = Gateway(store_url, tmp_path, free_port(), LV_STATIC_DIR="off")
    writer = Writer(store, chirp, SHARDS, retention=RETENTION)
    token = dev_token("alice")

    async def first_process() -> tuple[str, float, list[float], int]:
        async with aiohttp.ClientSession() as s:
            resp = await _open_sse(s, gateway.url, token, None)
            sse = SSE(resp)
            assert (await sse.next(skip=("progress",))).event == "snapshot"
            ws = await s.ws_connect(gateway.url.replace("http", "ws") + "/v1/ws")
            await ws.send_str(orjson.dumps({"type": "auth", "token": token}).decode())
            await ws.send_str(
                orjson.dumps(
                    {"type": "subscribe", "sub": "a", "view": "profiles", "key": "sd1"}
                ).decode()
            )
            await _ws_next(ws, "snapshot")
            writer.write([("profiles", "sd1", "name", {"v": 1})])
            delta = await sse.next(skip=("progress",))
            assert delta.event == "delta" and delta.id is not None
            await _ws_next(ws, "delta")

            t_sig = time.monotonic()
            assert gateway.process is not None
            gateway.process.send_signal(signal.SIGTERM)
            sse_s, (ws_s, ws_code) = await asyncio.gather(
                _sse_ended(sse, t_sig), _ws_closed(ws, t_sig)
            )
            resp.close()
            await ws.close()
            return delta.id, t_sig, [sse_s, ws_s], ws_code

    gateway.start()
    try:
        last_id, t_sig, (sse_s, ws_s), ws_code = await first_process()
        print(f"SIGTERM -> SSE ended {sse_s:.2f} s, WebSocket closed {ws_s:.2f} s")
        assert sse_s <= PROMPTLY_S, f"the SSE stream stayed open {sse_s:.2f} s after SIGTERM"
        assert ws_s <= PROMPTLY_S, f"the WebSocket stayed open {ws_s:.2f} s after SIGTERM"
        assert ws_code == 1012, ws_code  # uvicorn's "service restart"
        assert gateway.process is not None
        # After its graceful shutdown uvicorn raises the signal again, as the process's owner expects.
        assert gateway.process.wait(10) == -signal.SIGTERM, gateway.tail()
        exited_s = time.monotonic() - t_sig
        assert exited_s < GRACE_S, f"the gateway took {exited_s:.2f} s to exit"

        # A change made while no gateway runs reaches the client once, after it resumes.
        writer.write([("profiles", "sd1", "name", {"v": 2})])
        gateway.start()

        async def resume() -> None:
            async with aiohttp.ClientSession() as s:
                sse = SSE(await _open_sse(s, gateway.url, token, last_id))
                ev = await sse.next(skip=("progress",))
                assert ev.event == "delta", ev
                assert ev.data["ops"] == [{"op": "upsert", "row": "name", "value": {"v": 2}}]
                writer.write([("profiles", "sd1", "name", {"v": 3})])
                ev = await sse.next(skip=("progress",))
                assert ev.data["ops"] == [{"op": "upsert", "row": "name", "value": {"v": 3}}]

        await resume()
    finally:
        gateway.stop()
