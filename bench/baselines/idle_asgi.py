"""The least an idle stream can cost under uvicorn: a bare ASGI app that holds it open.

Any GET gets an SSE response with one comment and then nothing until the client leaves; any
WebSocket is accepted and its messages are read and dropped. No framework, no subscription,
no store: what remains per connection is uvicorn's (its protocol, its request cycle, the
ASGI task and its coroutine), which every ASGI gateway on uvicorn pays. ``bench.memory`` runs
it with the gateway's own uvicorn settings, as the floor beside the gateway's figure.
"""

from __future__ import annotations

from typing import Any

HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store")]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
    elif scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        await send({"type": "http.response.body", "body": b": open\n\n", "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass
    elif scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        while (await receive())["type"] != "websocket.disconnect":
            pass
