"""What a request names outside its body (``server/api/params.py``): each test is a bug the
fuzzing of every query parameter and header found, and states it with its fix.

- ``?recent=`` with over 4,300 digits answered 500: ``int()`` refuses such a string with an
  error of its own. Numbers are now read by one helper that checks the length first.
- A ``Last-Event-ID`` header sent twice: the first was taken and the second not even checked.
- ``access_token`` given twice or two ``Authorization`` headers: one token was taken (the
  last parameter, the first header), so a wrong one beside it passed unnoticed.
- A key whose %-escapes are not UTF-8 (``/v1/views/profiles/%FF``) was read as the key
  "\\ufffd", which the client never named; it now answers 404 ``invalid_key``.
- A ``Content-Length`` of another script's digits ("²") reached ``int()`` and raised; no
  server we run passes one on, but the body reader no longer trusts ``str.isdigit()``.
- ``If-None-Match`` in two lines: only the first was compared, so a tag that matched in the
  second answered 200 with the whole snapshot instead of 304. The lines are one list now.
- ``Last-Event-ID: e.1-0`` followed by a space was refused: the server drops the spaces
  before a header's value, not those after it, which are not part of it either.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
import requests
from multidict import CIMultiDict
from starlette.requests import Request
from starlette.types import Message
from yarl import URL

from liveviews.gateway.api.params import number_over, whole_number
from liveviews.gateway.api.responses import read_body
from liveviews.gateway.errors import PayloadTooLarge
from tests.support.gateway import ServedGateway

LOG = "/v1/log/live"
LIVE = "/v1/views/profiles/alice/live"
VIEW = "/v1/views/profiles/alice"


async def answer(resp: aiohttp.ClientResponse) -> tuple[int, str | None]:
    """The status and, for a refusal, its code; a stream that was accepted is not read."""
    return resp.status, (await resp.json())["code"] if resp.status >= 400 else None


@pytest.mark.parametrize(
    "raw",
    ["", " ", "-1", "+1", " 1", "1 ", "1\n", "1_0", "1e2", "0x1", "1.0", "\x00", "1\x00",
     "\ufffd", "²", "1²", "٣", "１", "𝟙", "101", "9" * 5000, "1" + "0" * 4400],
)  # fmt: skip
def test_only_ascii_digits_up_to_the_maximum_are_a_number(raw: str) -> None:
    assert whole_number(raw, 100) is None


@pytest.mark.parametrize(
    ("raw", "value"), [("0", 0), ("7", 7), ("007", 7), ("100", 100), ("0" * 5000 + "42", 42)]
)
def test_leading_zeros_are_the_same_number(raw: str, value: int) -> None:
    assert whole_number(raw, 100) == value


def test_a_number_over_a_limit_is_told_from_one_that_is_no_number() -> None:
    assert number_over("101", 100) and number_over("9" * 5000, 100)
    assert not any(number_over(raw, 100) for raw in ["100", "007", "²", "-5", "", "1e9"])


def test_a_huge_recent_count_is_refused_not_a_server_error(gateway: ServedGateway) -> None:
    for recent in ["9" * 5000, "1" + "0" * 30, "0" * 5000 + "101"]:
        with requests.get(gateway.url + LOG, params={"recent": recent}, timeout=5,
                          headers=gateway.headers(), stream=True) as resp:  # fmt: skip
            assert resp.status_code == 400
            assert resp.json()["code"] == "invalid_parameter"
    with requests.get(gateway.url + LOG, params={"recent": "0" * 5000 + "3"}, timeout=5,
                      headers=gateway.headers(), stream=True) as resp:  # fmt: skip
        assert resp.status_code == 200


async def test_a_last_event_id_header_sent_twice_is_refused(gateway: ServedGateway) -> None:
    # The second is malformed: under the old reading only the first was looked at.
    for second in ["garbage", "e.2-0"]:
        headers = CIMultiDict(gateway.headers())
        headers.add("Last-Event-ID", "e.1-0")
        headers.add("Last-Event-ID", second)
        async with aiohttp.ClientSession() as s, s.get(gateway.url + LIVE, headers=headers) as r:
            assert await answer(r) == (400, "invalid_last_event_id")


async def test_spaces_after_a_last_event_id_are_not_part_of_it(gateway: ServedGateway) -> None:
    headers = {**gateway.headers(), "Last-Event-ID": "e.1-0 \t "}
    async with aiohttp.ClientSession() as s, s.get(gateway.url + LIVE, headers=headers) as r:
        assert await answer(r) == (200, None)


async def test_if_none_match_in_two_lines_is_one_list(gateway: ServedGateway) -> None:
    async with aiohttp.ClientSession(headers=gateway.headers()) as s:
        async with s.get(gateway.url + VIEW) as r:
            etag = r.headers["ETag"]
        lines = CIMultiDict([("If-None-Match", '"other"'), ("If-None-Match", etag)])
        async with s.get(gateway.url + VIEW, headers=lines) as r:
            assert r.status == 304


@pytest.mark.parametrize("where", ["query", "header"])
async def test_a_token_given_twice_is_refused(gateway: ServedGateway, where: str) -> None:
    token = gateway.token("alice")
    twice = CIMultiDict([("Authorization", f"Bearer {token}"), ("Authorization", "Bearer x")])
    url = f"{gateway.url}{VIEW}?access_token=x&access_token={token}"
    async with aiohttp.ClientSession() as s:
        request = s.get(url) if where == "query" else s.get(gateway.url + VIEW, headers=twice)
        async with request as r:
            assert await answer(r) == (401, "token_invalid")
        # Once, either way, it is taken.
        async with s.get(gateway.url + VIEW, params={"access_token": token}) as r:
            assert r.status == 200


async def test_a_token_given_twice_does_not_open_a_socket(gateway: ServedGateway) -> None:
    token = gateway.token("alice")
    async with aiohttp.ClientSession() as s:
        ws = await s.ws_connect(f"{gateway.ws_url}?access_token=x&access_token={token}")
        async with asyncio.timeout(10):
            assert json.loads((await ws.receive()).data)["code"] == "token_invalid"
            await ws.receive()
        assert ws.close_code == 4401


async def test_a_key_that_is_not_utf8_is_refused(gateway: ServedGateway) -> None:
    async with aiohttp.ClientSession(headers=gateway.headers()) as s:
        for path in ["/v1/views/profiles/%FF", "/v1/views/profiles/a%C3", "/v1/views/%FF/a",
                     "/v1/views/profiles/%ED%A0%80/live"]:  # fmt: skip
            async with s.get(URL(gateway.url + path, encoded=True)) as r:
                assert await answer(r) == (404, "invalid_key"), path
        # U+FFFD itself, sent as UTF-8, is a key like any other.
        async with s.get(URL(gateway.url + "/v1/views/profiles/%EF%BF%BD", encoded=True)) as r:
            assert (r.status, (await r.json())["key"]) == (200, "\ufffd")


def posted(declared: str) -> Request:
    """A request as a server would hand it over, whose Content-Length says ``declared``."""
    sent: list[Message] = [{"type": "http.request", "body": b"{}", "more_body": False}]

    async def receive() -> Message:
        return sent.pop(0)

    # Servers hand header values over as bytes, which Starlette reads as Latin-1.
    headers = [(b"content-length", declared.encode("latin-1"))]
    return Request({"type": "http", "method": "POST", "headers": headers}, receive)


@pytest.mark.parametrize("declared", ["²", "¹2", "+2", " 2", "", "0x2"])
async def test_a_content_length_that_is_no_ascii_number_is_left_to_the_body(
    declared: str,
) -> None:
    assert await read_body(posted(declared), 100) == b"{}"


async def test_a_content_length_of_thousands_of_digits_is_too_large() -> None:
    with pytest.raises(PayloadTooLarge):
        await read_body(posted("2" * 5000), 100)
