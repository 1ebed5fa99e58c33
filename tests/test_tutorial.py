"""docs/TUTORIAL.md, run as its reader runs it, so that it cannot rot.

The reader starts with ``pip install 'liveviews[spark]'`` in a folder of their own. Here the
wheel built from this checkout, installed with its ``spark`` extra in a virtualenv outside the
checkout (``tests/support/installed.py``, shared with tests/test_install.py), stands for that
install. Then, in a temporary folder:

- the setup block's first line (``mkdir ... && cd ...``) makes the project's folder;
- each ``<!-- file: PATH -->`` block is written there whole, and each ``<!-- append: PATH -->``
  block is added to the end of its file; the page is written after ``liveviews dev`` started,
  as the tutorial has it;
- ``liveviews dev MODULE:app`` runs there as the tutorial writes it, on a free port and a data
  folder of its own (``LV_PORT``, ``LV_DATA_DIR``, ``LV_EMBEDDED_PORT``);
- every other shell block runs in bash there, with the virtualenv's bin/ first on the PATH (as
  ``. .venv/bin/activate`` has it), after the block that defines ``token`` and ``publish``, and
  with the tutorial's ``localhost:8000`` made the test's port;
- an ``<!-- answer: NAME -->`` block is what the shell block before it prints last, as JSON, key
  for key in order;
- the page the tutorial opens shows in headless Chromium the views by prefix, by key and as a
  window, follows the events the tutorial publishes next, and adds a task from its form;
- the reader's test of their views passes with the pytest the tutorial installs.

Without the install: every block is a file, an answer or a command this test knows; commands,
paths and links name what exists; the reader's test feeds a pipeline the columns it gets.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from liveviews import load_app
from tests.support.browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS
from tests.support.gateway import free_port
from tests.support.installed import ROOT, clean_env, run, stop_dev
from tests.support.running import wait_while_running

TUTORIAL = ROOT / "docs" / "TUTORIAL.md"
BLOCK = re.compile(r"(?:<!-- (file|append|answer): (\S+) -->\n)?```(\w+)\n(.*?)\n```", re.S)
PORT = "8000"
SHOWN_WITHIN_MS = 60_000
"""The first micro-batches of a fresh pipeline, on 2 cores shared with the rest of the run."""


@dataclass(frozen=True)
class Block:
    marker: str  # file, append, answer, or "" for a command
    path: str
    language: str
    text: str


def blocks() -> list[Block]:
    return [Block(*found) for found in BLOCK.findall(TUTORIAL.read_text())]


def files() -> dict[str, str]:
    """The reader's files as they end: each file block, and what the tutorial appends to it."""
    out: dict[str, str] = {}
    for block in blocks():
        if block.marker == "file":
            assert block.path not in out, f"{block.path} is created twice"
            out[block.path] = block.text + "\n"
        elif block.marker == "append":
            assert block.path in out, f"{block.path} is appended to before it is created"
            out[block.path] += block.text + "\n"
    return out


@dataclass(frozen=True)
class Commands:
    """The tutorial's shell blocks by what they do, each with the answer block after it."""

    setup: str
    dev: str
    functions: str
    published: list[str]  # the blocks that only publish, in order
    read: str
    tests: list[str]  # pip install pytest, then pytest
    repository: str  # the demo, from a clone
    answers: dict[str, str]  # a command block -> the answer block after it


def commands() -> Commands:
    found: dict[str, list[str]] = {k: [] for k in ("setup", "dev", "functions", "published",
                                                  "read", "tests", "repository")}  # fmt: skip
    answers: dict[str, str] = {}
    previous: Block | None = None
    for block in blocks():
        if block.marker == "answer":
            assert previous is not None and previous.language == "sh", block.text
            answers[previous.text] = block.text
        elif block.language == "sh":
            text = block.text
            lines = text.splitlines()
            if "pip install 'liveviews[spark]'" in text:
                kind = "setup"
            elif text.startswith("liveviews dev "):
                kind = "dev"
            elif "publish() {" in text:
                kind = "functions"
            elif all(line.startswith("publish ") for line in lines):
                kind = "published"
            elif text.startswith("curl -s localhost:8000/v1/views/"):
                kind = "read"
            elif text.startswith(("pip install pytest", "pytest ")):
                kind = "tests"
            elif "make " in text:
                kind = "repository"
            else:
                pytest.fail(f"a command this test does not run; teach it:\n{text}")
            found[kind].append(text)
        previous = block
    singles = {k: v for k, v in found.items() if k not in ("published", "tests")}
    for kind, texts in singles.items():
        assert len(texts) == 1, f"{len(texts)} {kind} blocks"
    return Commands(**{k: v[0] for k, v in singles.items()}, published=found["published"],
                    tests=found["tests"], answers=answers)  # fmt: skip


# -- what the blocks name ----------------------------------------------------------------


def test_every_block_is_a_file_an_answer_or_a_command() -> None:
    kinds = {"file": {"python", "html"}, "append": {"python", "html"}, "answer": {"json"},
             "": {"sh"}}  # fmt: skip
    for block in blocks():
        assert block.language in kinds[block.marker], block
    assert set(files()) == {"board.py", "web/index.html", "test_board.py"}
    every = commands()
    assert len(every.published) == 4 and len(every.tests) == 2 and len(every.answers) == 2
    # The publishing blocks: the events, two refused (each with its answer), then more events.
    assert [text in every.answers for text in every.published] == [False, True, True, False]


def test_the_commands_and_paths_name_what_exists() -> None:
    from liveviews.cli import cli

    text = TUTORIAL.read_text()
    shell = "\n".join(b.text for b in blocks() if b.language == "sh")
    for name in re.findall(r"^liveviews (\w+)", shell, re.M) + re.findall(
        r"`liveviews (\w+)", text
    ):
        assert name in cli.commands, f"liveviews {name}: no such command"
    modules = {Path(p).stem for p in files() if p.endswith(".py")}
    for module in re.findall(r"^liveviews dev (\w+):app$", shell, re.M):
        assert module in modules, f"liveviews dev {module}:app: the tutorial writes no {module}.py"
    for name in re.findall(r"^pytest -q (\S+)$", shell, re.M):
        assert name in files(), f"pytest {name}: the tutorial writes no such file"
    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), re.M))
    for target in re.findall(r"\bmake (\w+)", shell):
        assert target in targets, f"make {target}: no such target"
    for spec in re.findall(r"LV_APP=(\S+)", shell):
        assert load_app(spec), spec
    # The repository's paths it names, and its links.
    tops = {p.name for p in ROOT.iterdir() if p.is_dir()}
    for path in re.findall(r"`([\w.-]+/[\w./-]*)`", text):
        if path.split("/")[0] in tops:
            assert (ROOT / path).exists(), f"{path}: no such file in the repository"
    for link in re.findall(r"\]\(([^)#:]+)\)", text):
        assert (TUTORIAL.parent / link).exists(), f"({link}): no such file"


def test_the_setup_installs_what_this_test_installs() -> None:
    setup = commands().setup.splitlines()
    assert setup[0].startswith("mkdir -p ") and " && cd " in setup[0]
    assert setup[1:] == [
        "python3 -m venv .venv && . .venv/bin/activate",
        "pip install 'liveviews[spark]'",
    ]
    assert "`pip install '/path/to/clone[spark]'`" in TUTORIAL.read_text()
    assert '\nspark = ["pyspark' in (ROOT / "pyproject.toml").read_text()


def test_the_readers_test_feeds_a_pipeline_the_columns_it_gets() -> None:
    from liveviews.pipeline.views import EVENT_SCHEMA

    declared = re.search(r"EVENTS = \((.*?)\)\n", files()["test_board.py"], re.S)
    assert declared is not None
    ddl = "".join(re.findall(r'"(.*?)"', declared.group(1)))
    columns = [c.strip().split() for c in ddl.split(",")]
    assert [name for name, _ in columns] == EVENT_SCHEMA.fieldNames()
    spark_types = {"INT": "integer", "STRING": "string", "BIGINT": "long"}
    assert [spark_types[kind] for _, kind in columns] == [
        f.dataType.typeName() for f in EVENT_SCHEMA.fields
    ]


# -- the reader's project, run -----------------------------------------------------------


@dataclass
class Project:
    folder: Path
    bin: Path
    port: int

    def env(self, **extra: str) -> dict[str, str]:
        """A shell of the project's folder with its virtualenv activated."""
        path = f"{self.bin}{os.pathsep}{os.environ['PATH']}"
        return clean_env(PATH=path, VIRTUAL_ENV=str(self.bin.parent), **extra)

    def write(self, path: str) -> None:
        target = self.folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(files()[path])

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=5) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def status_of(self, published: str) -> int:
        """The HTTP status of the one event ``publish USER 'EVENT'`` posts."""
        user, event = re.fullmatch(r"publish (\w+) '(.*)'", published).groups()  # type: ignore[union-attr]
        token = orjson.loads(self.post("/v1/dev/token", {"user": user})[1])["token"]
        return self.post("/v1/events", orjson.loads(event), token)[0]

    def post(self, path: str, body: Any, token: str = "") -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", orjson.dumps(body), headers
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read()

    def sh(self, *scripts: str) -> str:
        """The scripts in one bash, at the test's port; what they print."""
        script = "\n".join(scripts)
        assert set(re.findall(r"(?:localhost|127\.0\.0\.1):(\d+)", script)) <= {PORT}, script
        script = script.replace(f"localhost:{PORT}", f"localhost:{self.port}")
        return run(["bash", "-e", "-c", script], cwd=self.folder, env=self.env(),
                   timeout=600).stdout  # fmt: skip


@pytest.fixture(scope="module")
def project(spark_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Project:
    """The setup block's folder, made by its first line, with the application's module."""
    home = tmp_path_factory.mktemp("reader")
    first = commands().setup.splitlines()[0]
    run(["bash", "-e", "-c", first], cwd=home)
    folder = home / shlex.split(first)[2].split("/")[0]
    assert folder.is_dir(), first
    made = Project(folder, spark_venv, free_port())
    made.write("board.py")
    return made


def answer_named(name: str) -> str:
    (found,) = (b.text for b in blocks() if b.marker == "answer" and b.path == name)
    return found


def last_json(printed: str) -> Any:
    return orjson.loads(printed.strip().splitlines()[-1])


def assert_shown(items: Any, texts: list[str]) -> None:
    """The items show ``texts``, in any order, within ``SHOWN_WITHIN_MS``."""
    deadline = time.monotonic() + SHOWN_WITHIN_MS / 1000
    while sorted(shown := items.all_inner_texts()) != sorted(texts):
        assert time.monotonic() < deadline, f"shown: {shown}, not {texts}"
        time.sleep(0.1)


@pytest.mark.timeout(1500)
def test_the_reader_runs_their_board_publishes_with_curl_and_their_page_follows_it(
    project: Project, tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    steps = commands()
    env = project.env(LV_PORT=str(project.port), LV_DATA_DIR=str(tmp_path / "data"),
                      LV_EMBEDDED_PORT=str(free_port()))  # fmt: skip
    logs = tmp_path / "logs"
    logs.mkdir()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        with open(logs / "dev", "wb") as out:
            procs["dev"] = subprocess.Popen(
                ["bash", "-c", f"exec {steps.dev}"], cwd=project.folder, env=env, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

        wait_while_running("liveviews dev's gateway", project.ready, procs, logs, timeout=300)

        # Section 5: the events, each answered with its offset.
        events, refused_schema, refused_author, more = steps.published
        for line in project.sh(steps.functions, events).splitlines():
            assert [set(o) for o in orjson.loads(line)["offsets"]] == [{"partition", "id", "token"}]
        thanked = {"ada": {"last_note": None, "times": 1},
                   "ben": {"last_note": "great demo", "times": 1},
                   "cy": {"last_note": None, "times": 1}}  # fmt: skip
        deadline = time.monotonic() + SHOWN_WITHIN_MS / 1000
        while (read := last_json(project.sh(steps.functions, steps.read)))["rows"] != thanked:
            assert time.monotonic() < deadline, read
            time.sleep(0.5)
        for refused in (refused_schema, refused_author):
            answer = orjson.loads(steps.answers[refused])
            printed = last_json(project.sh(steps.functions, refused))
            assert list(printed.items()) == list(answer.items())
        # The status the tutorial gives the schema's refusal, which curl -s does not print.
        status = re.search(
            r"\n\nanswers `(\d+)`[^\n]*\n\n<!-- answer: events -->", TUTORIAL.read_text()
        )
        assert status is not None and steps.answers[refused_schema] == answer_named("events")
        assert project.status_of(refused_schema) == int(status.group(1))
        said = re.search(r"the console\s+says\s+`([^`]+)`", TUTORIAL.read_text())
        assert said is not None and said.group(1) in (logs / "dev").read_text()

        # Section 6: the page, written while liveviews dev runs.
        project.write("web/index.html")
        shown = re.search(rf"<http://127\.0\.0\.1:{PORT}(/\?[^>]*)>", TUTORIAL.read_text())
        assert shown is not None
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
            page = chromium.new_page()
            try:
                page.goto(f"http://127.0.0.1:{project.port}{shown.group(1)}")
                tasks, by_key, top = (page.locator(f"#{id} li") for id in ("tasks", "thanked-by", "top"))  # fmt: skip
                assert_shown(tasks, ["Write the release notes: todo", "Record the demo: todo"])
                assert_shown(by_key, ["ada: 1", "ben: 1", "cy: 1"])
                # Equal scores: the highest row id first.
                expect(top).to_have_text(["cy (1)", "ben (1)"], timeout=SHOWN_WITHIN_MS)

                project.sh(steps.functions, more)
                expect(top).to_have_text(["ada (3)", "cy (1)"], timeout=SHOWN_WITHIN_MS)
                assert_shown(by_key, ["ada: 3", "ben: 1", "cy: 1"])
                assert_shown(tasks, ["Write the release notes: doing", "Record the demo: todo"])

                page.locator("#title").fill("Book the room")
                page.locator("#add button").click()
                # Said only once the view reflects it, so the list has it by then.
                expect(page.locator("#added")).to_have_text("added: Book the room", timeout=SHOWN_WITHIN_MS)  # fmt: skip
                assert "Book the room: todo" in tasks.all_inner_texts()
            except BaseException:
                ARTIFACTS.mkdir(exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / "tutorial.png"))
                raise
            finally:
                chromium.close()
    finally:
        if "dev" in procs:
            stop_dev(procs["dev"])


@pytest.mark.timeout(900)
def test_the_readers_test_of_their_views_passes(project: Project) -> None:
    project.write("test_board.py")
    install, tests = commands().tests
    project.sh(install)
    printed = project.sh(tests)
    assert re.search(r"^\d+ passed in ", printed, re.M) and "failed" not in printed, printed
