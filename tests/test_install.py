"""The package as a team adopts it: a wheel built from this checkout, installed in a fresh
virtualenv outside it, running an application in the team's own folder with ``liveviews dev``;
then a second virtualenv without the Spark extra serving the same store with ``liveviews
serve``, following the same view."""

from __future__ import annotations

import http.client
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.support.gateway import free_port
from tests.support.installed import ROOT, clean_env, make_venv, stop_dev
from tests.support.running import wait_while_running


def readme_app() -> str:
    """The README's example application (the Python block that starts ``# notes_app.py``):
    what this test runs is what a newcomer reads."""
    text = (ROOT / "README.md").read_text()
    start = text.index("```python\n# notes_app.py")
    return text[start + len("```python\n") : text.index("```", start + 3)]


PAGE = "<!doctype html><title>Notes</title><h1>My notes</h1>\n"


def test_the_wheel_carries_one_package_and_what_a_gateway_serves(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"liveviews"}
    for needed in ("liveviews/gateway/client_js/index.js", "liveviews/log/append.lua",
                   "liveviews/pipeline/sink.lua", "liveviews/py.typed",
                   "liveviews/gateway/py.typed"):  # fmt: skip
        assert needed in names
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    metadata = zipfile.ZipFile(wheel).read(meta).decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert "Provides-Extra: spark" in metadata and "Provides-Extra: postgres" in metadata
    assert "Requires-Dist: pyspark" in metadata and 'extra == "spark"' in metadata
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "my-notes"
    (folder / "web").mkdir(parents=True)
    (folder / "notes_app.py").write_text(readme_app())
    (folder / "web" / "index.html").write_text(PAGE)
    return folder


class Http:
    def __init__(self, port: int) -> None:
        self.port = port

    def request(self, method: str, path: str, body: object = None,
                token: str | None = None) -> tuple[int, bytes]:  # fmt: skip
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            conn.request(method, path, None if body is None else orjson.dumps(body), headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def ready(self) -> bool:
        try:
            return self.request("GET", "/readyz")[0] == 200
        except OSError:
            return False

    def token(self, user: str) -> str:
        status, body = self.request("POST", "/v1/dev/token", {"user": user})
        assert status == 200, body
        return str(orjson.loads(body)["token"])

    def publish(self, token: str, author: str, text: str) -> None:
        event = {"type": "note_added", "payload": {"author": author, "text": text}}
        status, body = self.request("POST", "/v1/events", event, token)
        assert status == 202, body

    def follow(self, view: str, key: str, token: str) -> Iterator[tuple[str, dict[str, object]]]:
        """The stream's frames, as (kind, data)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request("GET", f"/v1/views/{view}/{key}/live",
                     headers={"Authorization": f"Bearer {token}"})  # fmt: skip
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        kind = None
        try:
            while line := resp.fp.readline():
                text = line.decode().rstrip("\n")
                if text.startswith("event: "):
                    kind = text[len("event: ") :]
                elif text.startswith("data: ") and kind is not None:
                    yield kind, orjson.loads(text[len("data: ") :])
        finally:
            conn.close()


def _rows_until(frames: Iterator[tuple[str, dict[str, object]]], wanted: dict[str, object]) -> None:
    """Apply the stream's snapshot and deltas until the key's row is ``wanted``."""
    rows: dict[str, object] = {}
    for kind, data in frames:
        if kind == "snapshot":
            rows = dict(data["rows"])  # type: ignore[call-overload]
        elif kind == "delta":
            for op in data["ops"]:  # type: ignore[attr-defined]
                if op["op"] == "upsert":
                    rows[op["row"]] = op["value"]
                else:
                    rows.pop(op["row"], None)
        if rows.get("notes") == wanted:
            return
    pytest.fail(f"the stream ended before the row was {wanted}")


@pytest.mark.timeout(1500)
def test_an_application_of_its_own_folder_runs_from_the_installed_package(
    wheel: Path, spark_venv: Path, project: Path, tmp_path: Path
) -> None:
    full = spark_venv  # shared with tests/test_tutorial.py: one install per run
    bare = make_venv(tmp_path / "venv-gateway", wheel, "")
    # The gateways' host has no Spark, and says so when asked for the pipeline.
    assert subprocess.run([bare / "python", "-c", "import pyspark"]).returncode != 0
    refused = subprocess.run([bare / "liveviews", "pipeline"], capture_output=True, text=True,
                             cwd=project, env=clean_env(), timeout=60)  # fmt: skip
    assert refused.returncode == 2 and "pip install 'liveviews[spark]'" in refused.stderr

    data, port, second = tmp_path / "data", free_port(), free_port()
    env = clean_env(LV_DATA_DIR=str(data), LV_EMBEDDED_PORT=str(free_port()))
    logs = tmp_path / "logs"
    logs.mkdir()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        with open(logs / "dev", "wb") as out:
            procs["dev"] = subprocess.Popen(
                [full / "liveviews", "dev", "notes_app:app", "--port", str(port)], cwd=project,
                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        dev = Http(port)
        wait_while_running("liveviews dev's gateway", dev.ready, procs, logs, timeout=300)
        # The folder's pages and the JavaScript client, from the installed package.
        assert dev.request("GET", "/") == (200, PAGE.encode())
        status, client = dev.request("GET", "/client-js/index.js")
        assert status == 200 and b"createClient" in client

        token = dev.token("ada")
        frames = dev.follow("notes", "ada", token)
        assert next(frames)[0] == "snapshot"
        dev.publish(token, "ada", "hello")
        _rows_until(frames, {"notes": 1, "last": "hello"})

        # A gateway-only host: the same store, the same application's folder.
        with open(logs / "serve", "wb") as out:
            procs["serve"] = subprocess.Popen(
                [bare / "liveviews", "serve"], cwd=project, stdout=out,
                stderr=subprocess.STDOUT, env={**env, "LV_APP": "notes_app:app",
                                               "LV_PORT": str(second)},
            )  # fmt: skip
        gateway = Http(second)
        wait_while_running("liveviews serve", gateway.ready, procs, logs, timeout=300)
        followed = gateway.follow("notes", "ada", gateway.token("ada"))
        _rows_until(followed, {"notes": 1, "last": "hello"})
        gateway.publish(token, "ada", "from the second gateway")
        _rows_until(followed, {"notes": 2, "last": "from the second gateway"})
        _rows_until(frames, {"notes": 2, "last": "from the second gateway"})
    finally:
        if "serve" in procs and procs["serve"].poll() is None:
            procs["serve"].terminate()
            procs["serve"].wait(timeout=30)
        if "dev" in procs:
            stop_dev(procs["dev"])
