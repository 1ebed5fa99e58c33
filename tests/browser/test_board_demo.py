"""The board in Chromium: two people on one board, each in a browser context of their own.

The whole system runs in this process: the run's store, the board's three streaming queries on
the run's SparkSession and a real uvicorn gateway serving demo/web/board.html. A is ada, B is
ben. The page follows the board through query-shaped subscriptions only: its tasks by prefix
(with "My tasks" on, filtered by their assignee), the top 5 of its leaderboard as a window,
every board as the whole ``boards`` view. The tests are one story, in file order, each starting
from the state the previous one left.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from demo.board import app as board_app
from demo.board.activity import event, seed_events
from liveviews import EventLog
from tests.support.browser import ARTIFACTS, OPEN_PAGES, ROOT
from tests.support.chirp_system import System
from tests.support.gateway_settings import PARTITIONS

expect.set_options(timeout=30_000)
UPDATE = os.environ.get("LV_UPDATE_DEMO_ARTIFACTS") == "1"
BOARD = "sprint"
# Kudos on the test's board: ada, with one, is sixth, outside the window of five.
KUDOS = [("grace", 3), ("linus", 2), ("alan", 2), ("edsger", 1), ("barbara", 1), ("ada", 1)]
TIMINGS: dict[str, float] = {}


class BoardSystem(System):
    """The board's pipelines and a gateway serving it, with the test's board seeded."""

    def __init__(self, store_url: str, spark: Any, data_dir: Path) -> None:
        super().__init__(store_url, spark, data_dir, board_app, LV_APP="demo.board:app",
                         LV_MAX_SUBSCRIPTIONS_PER_SOCKET="20")  # fmt: skip

    def seed(self) -> None:
        now = int(time.time() * 1000)
        log = EventLog(self.client, board_app, PARTITIONS)
        log.append_batch(seed_events(now - 60_000))
        givers = ["erin", "frank"]
        log.append_batch([
            event("kudos_given", now, board=BOARD, giver=givers[i % 2], receiver=person)
            for person, n in KUDOS for i in range(n)
        ])  # fmt: skip
        self.pipeline.wait_until_caught_up(self.client, timeout=120)


@pytest.fixture(scope="module")
def system(
    store_url: str, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BoardSystem]:
    running = BoardSystem(store_url, spark, tmp_path_factory.mktemp("board"))
    try:
        running.seed()
        yield running
    finally:
        running.stop()


@dataclass
class Tab:
    user: str
    context: BrowserContext
    page: Page

    def id(self, testid: str) -> Any:
        return self.page.get_by_test_id(testid)

    def task(self, column: str, title: str) -> Any:
        return self.id(f"column-{column}").get_by_test_id("task").filter(has_text=title)

    def leaders(self, window: str = "leaderboard") -> list[str]:
        return list(self.page.eval_on_selector_all(
            f'[data-testid="{window}"] [data-testid="leader"]', "els => els.map(e => e.dataset.person)"
        ))  # fmt: skip

    def wait_for_leaders(self, order: list[str], window: str = "leaderboard") -> None:
        self.page.wait_for_function(
            "([window, order]) => JSON.stringify([...document.querySelectorAll("
            '`[data-testid="${window}"] [data-testid="leader"]`)].map(e => e.dataset.person))'
            " === JSON.stringify(order)",
            arg=[window, order],
        )

    def give_kudos(self, to: str, note: str = "") -> None:
        self.id("kudos-to").fill(to)
        self.id("kudos-note").fill(note)
        self.id("kudos-submit").click()
        self.done(f"Kudos to {to}")
        self.id("action-status").evaluate("line => { line.textContent = ''; }")

    def done(self, says: str) -> None:
        """The last action is in its view: the page waited for it (read-your-writes)."""
        expect(self.id("action-status")).to_have_text(says)

    def publish(self, kind: str, **payload: Any) -> dict[str, Any]:
        """Publish an event of this person's through the page's client, as the page does, and
        wait until the page's tasks reflect it; its offset."""
        event = {"type": kind, "payload": {"board": BOARD, "person": self.user, **payload}}
        return dict(self.page.evaluate(PUBLISH, event))

    def reflects(self, offset: dict[str, Any]) -> None:
        """Wait until the page's tasks subscription reflects ``offset``: every delta it caused
        on that subscription has been applied."""
        self.page.evaluate("(offset) => window.board.tasks.reflects(offset)", offset)


PUBLISH = """async (event) => {
    const offset = await window.board.client.publish(event);
    await window.board.tasks.reflects(offset);
    return offset;
}"""


def open_tab(browser: Any, url: str, user: str) -> Tab:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto(f"{url}/board.html?user={user}&board={BOARD}")
    tab = Tab(user, context, page)
    expect(tab.id("connection-state")).to_have_attribute("data-state", "connected")
    expect(tab.id("me-name")).to_have_text(user)
    OPEN_PAGES[user] = page
    return tab


@pytest.fixture(scope="module")
def tabs(browser: Any, system: BoardSystem) -> Iterator[tuple[Tab, Tab]]:
    a, b = open_tab(browser, system.url, "ada"), open_tab(browser, system.url, "ben")
    yield a, b
    OPEN_PAGES.clear()
    a.context.close()
    b.context.close()


TITLE = f"Cut the release {uuid.uuid4().hex[:6]}"


def test_both_pages_show_the_board_and_the_top_five(tabs: tuple[Tab, Tab]) -> None:
    for tab in tabs:
        expect(tab.id("leaderboard").get_by_test_id("leader")).to_have_count(5)
        assert tab.leaders() == ["grace", "linus", "alan", "edsger", "barbara"]
        boards = tab.id("board-list").get_by_test_id("board-item")
        expect(boards.filter(has_text="launch")).to_contain_text("5 tasks")
        expect(boards.filter(has_text=BOARD)).to_have_attribute("aria-pressed", "true")
    # The seed's launch board is a prefix of its own: none of its tasks shows on this board.
    expect(tabs[0].id("columns").get_by_test_id("task")).to_have_count(0)


def test_a_creates_and_moves_a_task_and_bs_page_follows(tabs: tuple[Tab, Tab]) -> None:
    a, b = tabs
    a.id("new-task-title").fill(TITLE)
    a.id("new-task-submit").click()
    a.done(f"Added “{TITLE}”")
    expect(b.task("todo", TITLE)).to_have_count(1)
    expect(b.task("todo", TITLE).get_by_test_id("task-assignee")).to_have_text("unassigned")

    started = time.monotonic()
    a.task("todo", TITLE).get_by_test_id("move-right").click()
    expect(b.task("doing", TITLE)).to_have_count(1)
    TIMINGS["move, A's click to B's page (ms)"] = (time.monotonic() - started) * 1000
    expect(b.task("todo", TITLE)).to_have_count(0)

    a.task("doing", TITLE).get_by_test_id("assign-me").click()
    expect(b.task("doing", TITLE).get_by_test_id("task-assignee")).to_have_text("ada")
    a.page.once("dialog", lambda dialog: dialog.accept(f"{TITLE}, signed"))
    a.task("doing", TITLE).get_by_test_id("task-title").click()
    expect(b.task("doing", f"{TITLE}, signed")).to_have_count(1)
    expect(b.id("board-list").get_by_test_id("board-item").filter(has_text=BOARD)).to_contain_text(
        "1 task ·"
    )


def test_b_gives_kudos_and_as_window_reorders(tabs: tuple[Tab, Tab]) -> None:
    a, b = tabs
    orders = [
        ["grace", "linus", "alan", "ada", "edsger"],  # ada, 2: in the window; barbara out
        ["grace", "ada", "linus", "alan", "edsger"],  # 3: level with grace, after her (row id)
        ["ada", "grace", "linus", "alan", "edsger"],  # 4: first
    ]
    for i, order in enumerate(orders):
        started = time.monotonic()
        b.give_kudos("ada", f"for the release, {i + 1}")
        a.wait_for_leaders(order)
        TIMINGS[f"kudos {i + 1}, B's click to A's window (ms)"] = (
            time.monotonic() - started
        ) * 1000
    top = a.id("leaderboard").get_by_test_id("leader").first
    expect(top.get_by_test_id("leader-kudos")).to_have_text("4")
    expect(top).to_contain_text("for the release, 3")


def test_a_pages_on_and_the_next_window_follows_the_first(tabs: tuple[Tab, Tab]) -> None:
    a, b = tabs
    a.id("leaders-more").click()
    a.wait_for_leaders(["barbara"], "leaderboard-next")
    expect(a.id("leaderboard-next").get_by_test_id("leader")).to_contain_text("6")
    for _ in range(2):  # barbara, 3: level with grace, after her; edsger drops to the next page
        b.give_kudos("barbara")
    a.wait_for_leaders(["ada", "grace", "barbara", "linus", "alan"])
    a.wait_for_leaders(["edsger"], "leaderboard-next")


SNAPSHOTS_FROM_NOW = """() => {
    window.snapshotsSince = [];
    for (const sub of [window.board.tasks, window.board.leaders]) {
        sub.on('snapshot', (event) => window.snapshotsSince.push(event.wasRecovering));
    }
}"""


def test_offline_a_gets_what_b_did_once_when_back(tabs: tuple[Tab, Tab]) -> None:
    a, b = tabs
    a.page.evaluate(SNAPSHOTS_FROM_NOW)
    a.context.set_offline(True)
    expect(a.id("connection-state")).to_have_attribute("data-state", "disconnected")
    away = [f"Written while ada was away {uuid.uuid4().hex[:6]}", "And another"]
    for title in away:
        b.id("new-task-title").fill(title)
        b.id("new-task-submit").click()
        b.done(f"Added “{title}”")
    for _ in range(2):
        b.give_kudos("linus")
    # In the views, and not on A's page: A's connection is down.
    expect(b.id("leaderboard").get_by_test_id("leader").first).to_have_attribute(
        "data-person", "linus"
    )
    assert a.leaders()[0] == "ada"
    expect(a.id("columns").get_by_test_id("task")).to_have_count(1)

    a.context.set_offline(False)
    expect(a.id("connection-state")).to_have_attribute("data-state", "connected")
    for title in away:
        expect(a.task("todo", title)).to_have_count(1)
    expect(a.id("columns").get_by_test_id("task")).to_have_count(3)
    expect(a.id("leaderboard").get_by_test_id("leader").first).to_have_attribute(
        "data-person", "linus"
    )
    assert a.leaders() == ["linus", "ada", "grace", "barbara", "alan"]
    assert a.leaders("leaderboard-next") == ["edsger"]
    # Resumed from where each subscription was (the deltas it missed), not started over.
    assert a.page.evaluate("() => window.snapshotsSince") == []


def test_b_deletes_the_task_and_it_leaves_as_page(tabs: tuple[Tab, Tab]) -> None:
    a, b = tabs
    b.task("doing", TITLE).get_by_test_id("delete-task").click()
    b.done(f"Deleted “{TITLE}, signed”")
    expect(a.id("columns").get_by_test_id("task").filter(has_text=TITLE)).to_have_count(0)
    expect(a.id("columns").get_by_test_id("task")).to_have_count(2)
    print(TIMINGS)


def screenshot(page: Page) -> None:
    """The page as docs/TUTORIAL.md shows it: written there with ``LV_UPDATE_DEMO_ARTIFACTS=1``,
    else to test-artifacts/ only, so that a test run changes no tracked file."""
    ARTIFACTS.mkdir(exist_ok=True)
    targets = [ARTIFACTS / "board.png"] + ([ROOT / "docs" / "board.png"] if UPDATE else [])
    for target in targets:
        page.screenshot(path=str(target))


def test_a_newcomer_over_sse_signs_in_on_the_first_board_and_switches_boards(
    browser: Any, system: BoardSystem
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 700})
    try:
        page = context.new_page()
        # Each subscription a stream of its own: GET /v1/live for the prefix and the whole view,
        # GET /v1/views/leaderboard/<board>/live?limit=5 for the window.
        page.goto(f"{system.url}/board.html?transport=sse")
        page.get_by_test_id("signin-handle").fill("cleo")
        page.get_by_test_id("signin-handle").press("Enter")
        tab = Tab("cleo", context, page)
        expect(tab.id("me-name")).to_have_text("cleo")
        expect(tab.id("connection-state")).to_have_attribute("data-transport", "sse")
        expect(tab.id("board-name")).to_have_text("launch")
        expect(tab.id("columns").get_by_test_id("task")).to_have_count(4)  # the seed's, one deleted
        expect(tab.task("doing", "Fix the login redirect")).to_have_count(1)
        expect(tab.task("todo", "Draft the launch blog post")).to_have_count(1)
        expect(tab.id("leaderboard").get_by_test_id("leader").first).to_have_attribute(
            "data-person", "grace"
        )
        screenshot(page)
        tab.id("board-list").locator(f'[data-board="{BOARD}"]').click()
        expect(tab.id("board-name")).to_have_text(BOARD)
        expect(tab.id("columns").get_by_test_id("task")).to_have_count(2)
        expect(tab.id("leaderboard").get_by_test_id("leader").first).to_have_attribute(
            "data-person", "linus"
        )
        assert f"board={BOARD}" in page.url
        tab.task("todo", "And another").get_by_test_id("assign-me").click()  # published over HTTP
        tab.done("cleo took “And another”")
        expect(tab.task("todo", "And another").get_by_test_id("task-assignee")).to_have_text("cleo")
    finally:
        context.close()


ASSIGNEES_SHOWN = """() => {
    // The assignee of every task card drawn from now on, whichever subscription drew it.
    window.assigneesShown = [];
    new MutationObserver((records) => {
        for (const node of records.flatMap((record) => [...record.addedNodes])) {
            if (node.dataset?.testid !== 'task') continue;
            window.assigneesShown.push(node.querySelector('[data-testid="task-assignee"]').textContent);
        }
    }).observe(document.querySelector('[data-testid="columns"]'), { childList: true, subtree: true });
}"""


def test_my_tasks_follows_only_the_tasks_assigned_to_a_as_they_come_and_go(
    tabs: tuple[Tab, Tab],
) -> None:
    """The "My tasks" toggle subscribes to the board's tasks with a filter on their assignee
    (docs/PROTOCOL.md, section 5.2): a task moves in when it is assigned to ada and out when it
    is taken from her, and no task of anyone else reaches her page while it is on."""
    a, b = tabs
    suffix = uuid.uuid4().hex[:6]
    hers, theirs = f"Review the notes {suffix}", f"Book a room {suffix}"
    for title in (hers, theirs):
        b.id("new-task-title").fill(title)
        b.id("new-task-submit").click()
        b.done(f"Added “{title}”")
    b.task("todo", theirs).get_by_test_id("assign-me").click()
    b.done(f"ben took “{theirs}”")
    expect(a.task("todo", theirs).get_by_test_id("task-assignee")).to_have_text("ben")
    # Another key's delta, maybe of another shard: not in order with the one of `theirs`.
    expect(a.task("todo", hers)).to_have_count(1)
    everything = a.id("columns").get_by_test_id("task").count()
    task, other = (a.task("todo", t).get_attribute("data-task") for t in (hers, theirs))

    a.page.evaluate(ASSIGNEES_SHOWN)
    a.id("my-tasks").click()
    expect(a.id("my-tasks")).to_have_attribute("aria-pressed", "true")
    expect(a.id("tasks-scope")).to_have_text("Only the tasks assigned to ada")
    a.page.wait_for_function("() => window.board.tasks.state === 'live'")
    assert a.page.evaluate("() => window.board.tasks.filter") == {"field": "assignee", "eq": "ada"}
    expect(a.id("columns").get_by_test_id("task")).to_have_count(0)  # none is ada's yet

    b.publish("task_assigned", task=task, assignee="ada")  # it moves in
    expect(a.task("todo", hers).get_by_test_id("task-assignee")).to_have_text("ada")
    a.reflects(b.publish("task_assigned", task=other, assignee="cleo"))
    expect(a.id("columns").get_by_test_id("task")).to_have_count(1)  # cleo's stays away

    a.task("todo", hers).get_by_test_id("unassign").click()  # it moves out
    a.done(f"“{hers}” is unassigned")
    expect(a.id("columns").get_by_test_id("task")).to_have_count(0)
    b.publish("task_assigned", task=task, assignee="ada")
    expect(a.task("todo", hers)).to_have_count(1)
    a.reflects(b.publish("task_assigned", task=task, assignee="ben"))  # to someone else
    expect(a.id("columns").get_by_test_id("task")).to_have_count(0)
    assert a.page.evaluate("() => window.board.tasks.keys.size") == 0
    shown = a.page.evaluate("() => window.assigneesShown")
    assert shown and set(shown) == {"ada"}, shown

    a.id("my-tasks").click()  # the whole board again
    expect(a.id("my-tasks")).to_have_attribute("aria-pressed", "false")
    expect(a.id("columns").get_by_test_id("task")).to_have_count(everything)
    expect(a.task("todo", hers).get_by_test_id("task-assignee")).to_have_text("ben")
    expect(a.task("todo", theirs).get_by_test_id("task-assignee")).to_have_text("cleo")
