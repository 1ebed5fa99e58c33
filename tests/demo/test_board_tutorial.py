"""docs/TUTORIAL.md cannot rot: its code blocks are checked against what they claim to be.

- A block marked ``<!-- excerpt: PATH -->`` is copied from PATH: each of its parts (split at a
  line ``# ...`` or ``// ...``) is a run of whole lines of that file, in the block's order.
- A block marked ``<!-- file: PATH -->`` is a whole file the reader creates. The tutorial's
  application and page are written to a directory of their own and run as the tutorial runs
  them: the application's pipelines on the run's SparkSession, a gateway with ``LV_APP`` naming
  it and serving the page, and the page in Chromium, which must show the reader's view by key,
  as a window and the board's tasks by prefix, and follow new events.
- A block marked ``<!-- answer: events -->`` is what the gateway answers the event that the
  tutorial's ``curl`` publishes, byte for byte as JSON.
- Shell blocks name only make targets, applications and test files that exist.
"""

from __future__ import annotations

import importlib
import re
import shutil
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from demo.board.activity import event, seed_events
from liveviews import EventLog, load_app
from liveviews.pipeline.settings import Settings
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS
from tests.support.gateway import ServedGateway
from tests.support.gateway_settings import PARTITIONS, SHARDS, settings_for
from tests.support.pipeline import RunningPipeline

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "TUTORIAL.md"
BLOCK = re.compile(r"(?:<!-- (excerpt|file|answer): (\S+) -->\n)?```(\w+)\n(.*?)\n```", re.S)
GAP = re.compile(r"^\s*(#|//) \.\.\.$")
SHOWN_WITHIN_MS = 30_000


def blocks(kind: str | None = None, language: str | None = None) -> list[tuple[str, str]]:
    """(path, text) of the tutorial's blocks of a kind (``excerpt``, ``file``) or language."""
    found = BLOCK.findall(TUTORIAL.read_text())
    return [
        (path, text)
        for marked, path, lang, text in found
        if (kind is None or marked == kind) and (language is None or lang == language)
    ]


def parts(text: str) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for line in text.splitlines():
        if GAP.match(line):
            out.append([])
        else:
            out[-1].append(line)
    return [p for p in out if p]


def test_each_excerpt_is_copied_from_the_file_it_names() -> None:
    excerpts = blocks("excerpt")
    assert len(excerpts) >= 7
    for path, text in excerpts:
        lines = (ROOT / path).read_text().splitlines()
        start = 0
        for part in parts(text):
            at = next(
                (i for i in range(start, len(lines)) if lines[i : i + len(part)] == part), None
            )
            assert at is not None, f"docs/TUTORIAL.md quotes {path}, which has no lines:\n" + (
                "\n".join(part)
            )
            start = at + len(part)


def test_every_code_block_is_marked_or_a_command() -> None:
    for path, text in blocks():
        assert path or text.lstrip().startswith(("make", "LV_APP", "T=", "curl", ".venv")), text


def test_the_commands_name_what_exists() -> None:
    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), re.M))
    own = {f"{Path(p).stem}:app" for p, _ in blocks("file") if p.endswith(".py")}
    commands = "\n".join(text for _, text in blocks(language="sh"))
    assert re.findall(r"\bmake (\w+)", commands)
    for target in re.findall(r"\bmake (\w+)", commands):
        assert target in targets, f"make {target}: no such target"
    for spec in re.findall(r"LV_APP=(\S+)", commands):
        assert spec in own or load_app(spec), spec
    for path in re.findall(r"pytest -q ((?:tests/\S+ ?)+)", commands):
        for name in path.split():
            assert (ROOT / name).exists(), f"{name}: no such test file"


# -- the reader's application and page, run ------------------------------------------------


class Reader:
    """The tutorial's files written to a directory of their own, importable from there."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = {path: text + "\n" for path, text in blocks("file")}
        assert set(self.files) == {"myboard.py", "demo/web/mine.html"}
        root.mkdir()
        (root / "myboard.py").write_text(self.files["myboard.py"])
        # The page's directory as the reader's checkout has it: the board's pages beside theirs.
        self.web = root / "demo" / "web"
        shutil.copytree(ROOT / "demo" / "web", self.web)

    def write_page(self) -> None:
        (self.web / "mine.html").write_text(self.files["demo/web/mine.html"])

    def __enter__(self) -> Any:
        sys.path.insert(0, str(self.root))
        return importlib.import_module("myboard").app

    def __exit__(self, *exc: object) -> None:
        sys.path.remove(str(self.root))
        sys.modules.pop("myboard", None)


@pytest.fixture()
def reader(tmp_path: Path) -> Iterator[tuple[Reader, Any]]:
    files = Reader(tmp_path / "checkout")
    with files as app:
        yield files, app


def post(url: str, body: Any, token: str = "") -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=orjson.dumps(body), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, orjson.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, orjson.loads(exc.read())


def assert_shown(items: Any, texts: list[str]) -> None:
    """The items show ``texts``, in any order, within ``SHOWN_WITHIN_MS``."""
    deadline = time.monotonic() + SHOWN_WITHIN_MS / 1000
    while sorted(shown := items.all_inner_texts()) != sorted(texts):
        assert time.monotonic() < deadline, f"shown: {shown}, not {texts}"
        time.sleep(0.05)


def test_the_readers_view_runs_and_their_page_follows_it(
    reader: tuple[Reader, Any], store_url: str, spark: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    files, app = reader
    client = redis.Redis.from_url(store_url)
    client.flushdb()
    settings = Settings.from_env({
        "REDIS_URL": store_url,
        "LV_DATA_DIR": str(tmp_path / "data"),
        "LV_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "LV_LOG_PARTITIONS": str(PARTITIONS),
        "LV_CHANGE_SHARDS": str(SHARDS),
        "LV_SHUFFLE_PARTITIONS": "2",
    })  # fmt: skip
    log = EventLog(client, app, PARTITIONS)
    log.append_batch(seed_events(int(time.time() * 1000)))
    running = RunningPipeline(spark, settings, app)
    gateway = ServedGateway(settings_for(store_url, LV_APP="myboard:app", LV_STATIC_DIR=str(
        files.web), LV_HEARTBEAT_SECONDS="5", LV_MAX_SUBSCRIPTIONS_PER_SOCKET="20")).start()  # fmt: skip
    try:
        running.wait_until_caught_up(client, timeout=120)
        # Section 3's refused event, as its curl sends it, and the answer the tutorial shows.
        _, answer = post(gateway.url + "/v1/dev/token", {"user": "ada"})
        sent = re.search(
            r"/v1/events .*?-d '(.*?)'", "\n".join(t for _, t in blocks(language="sh")), re.S
        )
        assert sent is not None
        status, refused = post(
            gateway.url + "/v1/events", orjson.loads(sent.group(1)), answer["token"]
        )
        assert status == 422
        assert [refused] == [orjson.loads(text) for _, text in blocks("answer")]

        files.write_page()  # after the gateway started: it serves the file as it is now
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
            try:
                page = chromium.new_page()
                page.goto(gateway.url + "/mine.html?user=grace")
                # The seed: ada, alan and linus each thanked grace once.
                by_key, top, tasks = (
                    page.locator(f"#{id} li") for id in ("thanked-by", "top", "tasks")
                )
                assert_shown(by_key, ["ada: 1", "alan: 1", "linus: 1"])  # in no set order
                expect(top).to_have_text(["linus (1)", "alan (1)", "ada (1)"])
                expect(tasks.filter(has_text="Write the release notes: todo")).to_have_count(1)

                kudos = event("kudos_given", None, board="launch", giver="ada", receiver="grace")
                log.append_batch([kudos, kudos])
                expect(top).to_have_text(["ada (3)", "linus (1)", "alan (1)"], timeout=SHOWN_WITHIN_MS)  # fmt: skip
                assert_shown(by_key, ["ada: 3", "alan: 1", "linus: 1"])
                log.append(event("task_moved", None, board="launch", task="notes", person="ada",
                                 status="doing"))  # fmt: skip
                expect(tasks.filter(has_text="Write the release notes: doing")).to_have_count(
                    1, timeout=SHOWN_WITHIN_MS
                )
            finally:
                chromium.close()
    finally:
        gateway.stop()
        running.stop()
        client.close()
