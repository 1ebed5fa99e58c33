"""Static files: the demo at ``/`` and the client at ``/client-js/``, and nothing outside them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from tests.support.gateway import ServedGateway
from tests.support.gateway_settings import settings_for

SECRET = "the-content-of-a-file-outside-the-web-root"


@pytest.fixture(scope="module")
def served(store_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedGateway]:
    root = tmp_path_factory.mktemp("static")
    web, client = root / "web", root / "client"
    (web / "css").mkdir(parents=True)
    client.mkdir()
    (web / "index.html").write_text("<!doctype html><title>Chirp</title>")
    (web / "css" / "app.css").write_text("body{}")
    (web / "outside").symlink_to(root / "secret.txt")
    (root / "secret.txt").write_text(SECRET)
    (client / "index.js").write_text("export const x = 1;\n")
    settings = settings_for(store_url, LV_STATIC_DIR=str(web), LV_CLIENT_JS_DIR=str(client))
    gw = ServedGateway(settings).start()
    yield gw
    gw.stop()


async def test_the_demo_and_the_client_are_served(served: ServedGateway) -> None:
    async with aiohttp.ClientSession() as s:
        index = await s.get(served.url + "/")
        assert index.status == 200 and "Chirp" in await index.text()
        assert index.headers["Content-Type"].startswith("text/html")
        assert index.headers["Cache-Control"] == "no-cache"
        css = await s.get(served.url + "/css/app.css")
        assert css.status == 200 and css.headers["Content-Type"].startswith("text/css")
        js = await s.get(served.url + "/client-js/index.js")
        assert js.status == 200 and "export const x" in await js.text()
        assert "javascript" in js.headers["Content-Type"]


@pytest.mark.parametrize(
    "path",
    [
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/css/..%2f..%2fsecret.txt",
        "/client-js/../secret.txt",
        "/client-js/%2e%2e/web/index.html",
        "/outside",
        "/nope.html",
    ],
)
async def test_nothing_outside_the_directories_is_served(served: ServedGateway, path: str) -> None:
    status, body = await raw_get(served.settings.port, path)
    assert SECRET.encode() not in body
    assert status == 404, (status, body)
    assert orjson.loads(body)["code"] == "not_found"


async def raw_get(port: int, path: str) -> tuple[int, bytes]:
    """GET with the path sent byte for byte: HTTP clients would normalise the dots away."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def test_api_paths_keep_their_errors(served: ServedGateway) -> None:
    async with aiohttp.ClientSession() as s:
        wrong = await s.get(served.url + "/v1/events")
        assert (wrong.status, (await wrong.json())["code"]) == (405, "method_not_allowed")
        missing = await s.get(served.url + "/v1/nothing")
        assert (missing.status, (await missing.json())["code"]) == (404, "not_found")
        post = await s.post(served.url + "/index.html")
        assert (post.status, (await post.json())["code"]) == (405, "method_not_allowed")


async def test_serving_can_be_turned_off(store_url: str) -> None:
    settings = settings_for(store_url, LV_STATIC_DIR="off", LV_CLIENT_JS_DIR="off")
    assert settings.static_dir is None and settings.client_js_dir is None
    gw = ServedGateway(settings).start()
    try:
        async with aiohttp.ClientSession() as s:
            resp = await s.get(gw.url + "/")
            assert (resp.status, (await resp.json())["code"]) == (404, "not_found")
    finally:
        gw.stop()


def test_the_default_serves_the_checkout(store_url: str) -> None:
    settings = settings_for(store_url)
    repo = Path(__file__).resolve().parents[3]
    assert settings.static_dir == repo / "demo" / "web"
    assert settings.client_js_dir == repo / "client-js" / "src"
