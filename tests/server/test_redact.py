"""Tokens never reach a log line: a request's ``?access_token=`` is written by uvicorn into its
access log's request line and into each WebSocket's ``[accepted]`` line, and at debug level the
WebSocket library logs each handshake header (``Authorization``, ``Cookie``); all of it went to
the console and the log file as it was (``LV_LOG_LEVEL=debug``, or any access log an operator
turns on). Every line of uvicorn's and the gateway's loggers now shows ``[redacted]``."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import aiohttp
import pytest
import redis
from uvicorn.logging import AccessFormatter

from liveviews.gateway.redact import redact
from tests.support.gateway import ServedGateway, open_sse, wait_for
from tests.support.gateway_settings import settings_for


class Lines(logging.Handler):
    """Every line as a handler would write it; uvicorn's access lines with its own format."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.access = AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s')
        self.plain = logging.Formatter("%(name)s %(message)s")

    def emit(self, record: logging.LogRecord) -> None:
        formatter = self.access if record.name == "uvicorn.access" else self.plain
        self.lines.append(formatter.format(record))


@pytest.fixture()
def lines() -> Iterator[Lines]:
    """A handler on the root logger, with uvicorn's loggers as talkative as they get
    (``LV_LOG_LEVEL=debug``) and its access log on; all put back after the test."""
    handler = Lines()
    root = logging.getLogger()
    access = logging.getLogger("uvicorn.access")
    loggers = [logging.getLogger(n) for n in ("uvicorn.error", "uvicorn.access", "uvicorn.asgi")]
    levels, propagate = [lg.level for lg in loggers], access.propagate
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
        access.propagate = propagate


def test_redact_keeps_the_line_and_drops_the_token() -> None:
    token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"
    assert redact(f"GET /v1/views/profiles/alice/live?access_token={token}&x=1 HTTP/1.1") == (
        "GET /v1/views/profiles/alice/live?access_token=[redacted]&x=1 HTTP/1.1"
    )
    assert redact(f"authorization: Bearer {token}") == "authorization: Bearer [redacted]"
    assert redact("cookie: lv_token=not-even-a-jwt; theme=dark") == (
        "cookie: lv_token=[redacted]; theme=dark"
    )
    assert redact(f"headers [(b'x', b'{token}')]") == "headers [(b'x', b'[redacted]')]"


async def test_no_log_line_of_a_served_gateway_shows_a_query_token(
    store_url: str, store: redis.Redis, lines: Lines
) -> None:
    served = ServedGateway(settings_for(store_url), access_log=True)
    for name in ("uvicorn.error", "uvicorn.access", "uvicorn.asgi"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    logging.getLogger("uvicorn.access").propagate = True
    served.start()
    try:
        token = served.token("alice")
        async with aiohttp.ClientSession() as s:
            sse = await open_sse(s, served.url + "/v1/views/profiles/alice/live",
                                 params={"access_token": token})  # fmt: skip
            assert (await sse.next()).event == "snapshot"
            await sse.close()
            ws = await s.ws_connect(served.ws_url, params={"access_token": token})
            assert (await ws.receive_json(timeout=10))["type"] == "authenticated"
            await ws.close()
            # At debug level the WebSocket library logs every header of a handshake.
            headers = {"Authorization": f"Bearer {token}", "Cookie": f"lv_token={token}"}
            ws = await s.ws_connect(served.ws_url, headers=headers)
            assert (await ws.receive_json(timeout=10))["type"] == "authenticated"
            await ws.close()
            refused = await s.get(served.url + "/v1/views/profiles/alice",
                                  params={"access_token": token + "x"})  # fmt: skip
            assert refused.status == 401

        def logged(marker: str) -> bool:
            return any(marker in line for line in lines.lines)

        await wait_for(lambda: logged("/v1/views/profiles/alice?access_token"))
    finally:
        served.stop()
    text = "\n".join(lines.lines)
    assert token not in text
    assert token.split(".")[2] not in text  # not even the signature alone
    # The lines are still there, and say where the token was.
    assert '"WebSocket /v1/ws?access_token=[redacted]" [accepted]' in text
    assert '"GET /v1/views/profiles/alice/live?access_token=[redacted] HTTP/1.1" 200' in text
    assert '"GET /v1/views/profiles/alice?access_token=[redacted] HTTP/1.1" 401' in text
    assert "authorization: bearer [redacted]" in text.lower() and "lv_token=[redacted]" in text
