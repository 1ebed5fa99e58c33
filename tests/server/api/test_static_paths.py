"""Static paths that try to leave the served directories: answered not_found, no file leaks."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from tests.support.gateway import ServedGateway

# --- static paths that try to leave the served directories -----------------------------------

# What each target file holds, to recognise it in a body.
MARKERS = [b"root:x:0:0", b"[project]", b"[core]", b"DEV_JWT_SECRET", b"liveviews-dev-secret"]

TRAVERSALS = [
    "/../../pyproject.toml",
    "/../../../../../../../../etc/passwd",
    "/%2e%2e/%2e%2e/pyproject.toml",
    "/%2e%2e%2f%2e%2e%2fpyproject.toml",
    "/.%2e/.%2e/pyproject.toml",
    "/%252e%252e/%252e%252e/pyproject.toml",
    "/%252e%252e%252f%252e%252e%252fpyproject.toml",
    "/..\\..\\pyproject.toml",
    "/..%5c..%5cpyproject.toml",
    "/%2e%2e%5c%2e%2e%5cserver%5csettings.py",
    "//etc/passwd",
    "/%2fetc%2fpasswd",
    "/%2F%2Fetc%2Fpasswd",
    "/etc/passwd",
    "/....//....//pyproject.toml",
    "/%c0%ae%c0%ae/%c0%ae%c0%ae/pyproject.toml",
    "/..%00/..%00/pyproject.toml",
    "/index.html%00/../../../pyproject.toml",
    "/%00",
    "/../../.git/config",
    "/%2e%2e/%2e%2e/.git/config",
    "/../../server/settings.py",
    "/client-js/../../../etc/passwd",
    "/client-js/../../pyproject.toml",
    "/client-js/%2e%2e/%2e%2e/pyproject.toml",
    "/client-js/%2e%2e%2f%2e%2e%2f.git/config",
    "/client-js/..%2f..%2fserver%2fsettings.py",
    "/client-js/%252e%252e/%252e%252e/pyproject.toml",
    "/client-js/..\\..\\server\\settings.py",
    "/client-js//etc/passwd",
    "/client-js/%2fetc%2fpasswd",
    "/client-js/%00../../pyproject.toml",
    "http://127.0.0.1/../../pyproject.toml",
    "/v1/../../pyproject.toml",
    "/v1/%2e%2e/%2e%2e/pyproject.toml",
]


async def raw_request(port: int, target: bytes, method: bytes = b"GET") -> tuple[int, bytes]:
    """A request whose target is sent byte for byte, as no HTTP client library would send it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(method + b" " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def assert_refused(status: int, body: bytes) -> None:
    for marker in MARKERS:
        assert marker not in body, marker
    assert status in (400, 404), (status, body[:200])


@pytest.mark.parametrize("path", TRAVERSALS)
async def test_static_path_traversal_is_refused(gateway: ServedGateway, path: str) -> None:
    for method in (b"GET", b"HEAD"):
        status, body = await raw_request(gateway.settings.port, path.encode(), method)
        assert_refused(status, body)
        if status == 404 and method == b"GET":
            assert orjson.loads(body)["code"] == "not_found"


@pytest.mark.parametrize("path", ["/\x00../../pyproject.toml", "/client-js/\x00/../../etc/passwd"])
async def test_static_path_with_a_raw_nul_byte_is_refused(
    gateway: ServedGateway, path: str
) -> None:
    status, body = await raw_request(gateway.settings.port, path.encode())
    assert_refused(status, body)


async def test_static_files_are_still_served(gateway: ServedGateway) -> None:
    """The refusals above are not because nothing is served at all."""
    status, body = await raw_request(gateway.settings.port, b"/client-js/index.js")
    assert status == 200 and b"export" in body
    status, body = await raw_request(gateway.settings.port, b"/")
    assert status == 200 and b"<html" in body.lower()
