"""A request's body must arrive within ``LV_BODY_TIMEOUT_SECONDS`` of its headers.

Bug: only the headers had a time limit. A client that sent a request's headers and then its
body a byte at a time held its connection, and the request's task, for as long as it kept
trickling. Fix: ``liveviews.gateway._uvicorn.http`` arms a timer when the headers are in; a body not
complete when it fires is answered 408 ``body_timeout`` and the connection is closed.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.support.gateway import ServedGateway
from tests.support.gateway_settings import settings_for

BODY_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def slow_bodies(store_url: str) -> Iterator[ServedGateway]:
    served = ServedGateway(settings_for(
        store_url, LV_BODY_TIMEOUT_SECONDS=str(BODY_TIMEOUT), LV_HEADER_TIMEOUT_SECONDS="30"
    )).start()  # fmt: skip
    yield served
    served.stop()


def post_head(gw: ServedGateway, length: int) -> bytes:
    return (f"POST /v1/events HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {gw.token('alice')}\r\nContent-Length: {length}\r\n\r\n"
            ).encode()  # fmt: skip


def answer_of(s: socket.socket, until: float) -> bytes:
    """What the gateway wrote before closing ``s``, or by ``until`` if it did not close it."""
    got = b""
    while time.monotonic() < until:
        s.settimeout(max(0.01, until - time.monotonic()))
        try:
            part = s.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            break
        if not part:
            return got + b"<closed>"
        got += part
    return got


def test_a_trickled_body_is_answered_408_and_its_connection_closed(
    slow_bodies: ServedGateway,
) -> None:
    s = socket.create_connection(("127.0.0.1", slow_bodies.settings.port))
    start = time.monotonic()
    s.sendall(post_head(slow_bodies, 1000) + b'{"events": [')
    answer = b""
    # A byte every 0.2 s: the connection never goes quiet, the body never completes.
    while time.monotonic() - start < 4 * BODY_TIMEOUT and not answer:
        try:
            s.sendall(b" ")
        except OSError:
            break
        answer = answer_of(s, time.monotonic() + 0.2)
    if not answer.endswith(b"<closed>"):
        answer += answer_of(s, time.monotonic() + 2)
    took = time.monotonic() - start
    s.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:300]
    assert body.endswith(b"<closed>"), answer[-300:]
    error = json.loads(body.removesuffix(b"<closed>"))
    assert error["code"] == "body_timeout" and error["message"].endswith(".")
    assert took < BODY_TIMEOUT + 1.5


def test_a_body_that_arrives_in_time_is_served(slow_bodies: ServedGateway) -> None:
    body = json.dumps({"events": []}).encode()
    s = socket.create_connection(("127.0.0.1", slow_bodies.settings.port))
    s.sendall(post_head(slow_bodies, len(body)) + body[:5])
    time.sleep(BODY_TIMEOUT / 2)
    s.sendall(body[5:])
    answer = answer_of(s, time.monotonic() + 3)
    s.close()
    # Answered by the endpoint (an empty batch is refused), not by the timeout.
    assert answer.startswith(b"HTTP/1.1 422"), answer[:300]
    assert b"body_timeout" not in answer


def test_a_request_without_a_body_is_not_timed(slow_bodies: ServedGateway) -> None:
    """A kept-alive connection idles past the body timeout between requests."""
    s = socket.create_connection(("127.0.0.1", slow_bodies.settings.port))
    for _ in range(2):
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        answer = answer_of(s, time.monotonic() + 0.5)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
        time.sleep(BODY_TIMEOUT * 1.5)
    s.close()
