"""Chirp in Chromium: two users in two browser contexts see each other's actions live.

The whole system runs in this process (tests/browser/system.py): the run's store, the real
Spark streaming query and a real uvicorn gateway serving demo/web. A is ada, B is ben. The
tests are one story, in file order: each starts from the state the previous one left.

With ``LV_UPDATE_DEMO_ARTIFACTS=1`` the screenshot and the latency figures are also written
where the repository keeps them (docs/demo.png, bench/results/demo_latency.json); otherwise
only to test-artifacts/, so a test run changes no tracked file.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.support.browser import ARTIFACTS, OPEN_PAGES, ROOT
from tests.support.chirp_system import USERS, ChirpSystem

expect.set_options(timeout=30_000)
UPDATE = os.environ.get("LV_UPDATE_DEMO_ARTIFACTS") == "1"
LATENCY_POSTS = 10


@dataclass
class Tab:
    user: str
    context: BrowserContext
    page: Page

    def id(self, testid: str) -> Any:
        return self.page.get_by_test_id(testid)

    def timeline_post(self, text: str) -> Any:
        return self.id("timeline").get_by_test_id("tweet").filter(has_text=text)

    def my_post(self, text: str) -> Any:
        return self.id("my-posts").get_by_test_id("tweet").filter(has_text=text)

    def post(self, text: str) -> None:
        self.id("compose-text").fill(text)
        self.id("compose-submit").click()
        # Done once the post's own view reflects it (read-your-writes), not merely once sent.
        expect(self.id("compose-status")).to_contain_text("Posted")

    def timeline_ids(self) -> list[str]:
        return list(self.page.eval_on_selector_all(
            '[data-testid="timeline"] [data-testid="tweet"]', "els => els.map(e => e.dataset.tweetId)"
        ))  # fmt: skip


@pytest.fixture(scope="module")
def chirp(
    store_url: str, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChirpSystem]:
    system = ChirpSystem(store_url, spark, tmp_path_factory.mktemp("chirp"))
    try:
        system.seed()
        yield system
    finally:
        system.stop()


def open_tab(browser: Any, url: str, user: str) -> Tab:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto(url + "/")
    page.get_by_test_id("signin-handle").fill(user)
    page.get_by_test_id("signin-handle").press("Enter")
    tab = Tab(user, context, page)
    expect(tab.id("connection-state")).to_have_attribute("data-state", "connected")
    expect(tab.id("profile-name")).to_have_text(USERS[user])
    OPEN_PAGES[user] = page
    return tab


@pytest.fixture(scope="module")
def tabs(browser: Any, chirp: ChirpSystem) -> Iterator[tuple[Tab, Tab]]:
    a, b = open_tab(browser, chirp.url, "ada"), open_tab(browser, chirp.url, "ben")
    yield a, b
    OPEN_PAGES.clear()
    a.context.close()
    b.context.close()


def unique(words: str) -> str:
    return f"{words} {uuid.uuid4().hex[:6]}"


FIRST = unique("Hello from Philadelphia")


def test_a_follows_b_and_sees_what_b_posts(tabs: tuple[Tab, Tab]) -> None:
    a, b = tabs
    a.id("follow-handle").fill("ben")
    a.id("follow-handle").press("Enter")
    expect(a.id("follow-ben")).to_have_text("Following")
    b.post(FIRST)
    post = a.timeline_post(FIRST)
    expect(post).to_have_count(1)
    expect(post.get_by_test_id("tweet-author")).to_have_text("Ben Franklin")


def test_a_likes_it_and_the_count_changes_in_bs_tab(tabs: tuple[Tab, Tab]) -> None:
    a, b = tabs
    b.id("tab-posts").click()
    mine = b.my_post(FIRST)
    expect(mine.get_by_test_id("like-count")).to_have_text("0")
    theirs = a.timeline_post(FIRST)
    theirs.get_by_test_id("like-button").click()
    expect(theirs.get_by_test_id("like-button")).to_have_attribute("aria-pressed", "true")
    expect(theirs.get_by_test_id("like-count")).to_have_text("1")
    expect(mine.get_by_test_id("like-count")).to_have_text("1")


def test_b_renames_and_the_name_changes_on_as_timeline(tabs: tuple[Tab, Tab]) -> None:
    a, b = tabs
    b.id("rename-input").fill("Benjamin Franklin")
    b.id("rename-submit").click()
    expect(b.id("rename-status")).to_contain_text("Renamed")
    expect(b.id("profile-name")).to_have_text("Benjamin Franklin")
    expect(a.timeline_post(FIRST).get_by_test_id("tweet-author")).to_have_text("Benjamin Franklin")
    expect(a.page.locator('[data-testid="person"][data-user="ben"]')).to_contain_text(
        "Benjamin Franklin"
    )


# At every change of A's page (after each of its renders: a MutationObserver's callback runs
# once a render's changes are done), the names of ben on the page: in the people list and on
# each of his tweets in the timeline.
WATCH_NAMES = """() => {
    window.__names = [];
    const read = () => {
        const person = document.querySelector('[data-testid="person"][data-user="ben"] [data-role="name"]');
        const tweets = [...document.querySelectorAll('[data-testid="timeline"] [data-testid="tweet"][data-author="ben"]')];
        const names = [person?.textContent, ...tweets.map((t) => t.querySelector('[data-testid="tweet-author"]').textContent)];
        const last = window.__names.at(-1);
        if (!last || last.join('|') !== names.join('|')) window.__names.push(names);
    };
    read();
    new MutationObserver(read).observe(document.body, { subtree: true, childList: true, characterData: true });
}"""


def test_a_rename_never_shows_two_names_for_ben_on_as_page(tabs: tuple[Tab, Tab]) -> None:
    """A rename reaches ``profiles`` and A's timeline in two pipelines' micro-batches; the page
    follows both as one group (docs/PROTOCOL.md, section 5.3), so every state it renders has
    one name for ben: the people list's and every tweet's."""
    a, b = tabs
    a.page.evaluate(WATCH_NAMES)
    names = [f"Benjamin F. {uuid.uuid4().hex[:4]}" for _ in range(3)] + ["Benjamin Franklin"]
    for name in names:
        b.id("rename-input").fill(name)
        b.id("rename-submit").click()
        expect(a.timeline_post(FIRST).get_by_test_id("tweet-author")).to_have_text(name)
        expect(a.page.locator('[data-testid="person"][data-user="ben"]')).to_contain_text(name)
    seen: list[list[str]] = a.page.evaluate("window.__names")
    halves = [s for s in seen if len(set(s)) > 1]
    assert not halves, f"A's page showed two names for ben at once: {halves}"
    shown = [s[0] for s in seen]
    assert all(name in shown for name in names), (names, seen)


EVENTSOURCE_CLIENT = """async () => {
    const { createClient } = await import('/client-js/index.js');
    const answer = await fetch('/v1/dev/token', {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"user": "ada"}',
    });
    const { token } = await answer.json();
    const opened = [];
    class Counted extends EventSource {
        constructor(url, init) { super(url, init); opened.push(url); }
    }
    const client = createClient({ transport: 'sse', EventSource: Counted, token });
    const sub = client.subscribe('profiles', 'ben');
    await sub.ready();
    const names = [sub.rows.get('profile').name];
    sub.on('change', ({ rows }) => names.push(rows.get('profile').name));
    const refused = client.subscribe('timeline', 'ben');
    const error = await new Promise((resolve) => refused.on('error', resolve));
    window.viaEventSource = { client, names, opened, refused: error.code };
}"""


def test_the_client_also_reads_with_the_browsers_own_eventsource(tabs: tuple[Tab, Tab]) -> None:
    a, b = tabs
    a.page.evaluate(EVENTSOURCE_CLIENT)
    assert a.page.evaluate("() => window.viaEventSource.refused") == "forbidden"
    b.id("rename-input").fill("Ben Franklin")
    b.id("rename-submit").click()
    a.page.wait_for_function("() => window.viaEventSource.names.includes('Ben Franklin')")
    assert a.page.evaluate("() => window.viaEventSource.names") == [
        "Benjamin Franklin",
        "Ben Franklin",
    ]
    opened = a.page.evaluate("() => window.viaEventSource.opened")
    assert opened and all("access_token=" in url for url in opened)
    a.page.evaluate("() => window.viaEventSource.client.close()")
    expect(a.timeline_post(FIRST).get_by_test_id("tweet-author")).to_have_text("Ben Franklin")


def test_offline_a_gets_both_posts_once_and_in_order_when_back(tabs: tuple[Tab, Tab]) -> None:
    a, b = tabs
    before = a.timeline_ids()
    a.context.set_offline(True)
    expect(a.id("connection-state")).to_have_attribute("data-state", "disconnected")
    expect(a.id("connection-state")).to_have_text("Offline")
    second, third = unique("Second, while you were away"), unique("Third, still away")
    b.post(second)
    b.post(third)
    expect(b.my_post(third)).to_have_count(1)
    # The posts are in the views, and A's connection is down: A does not have them.
    assert a.timeline_ids() == before
    a.context.set_offline(False)
    expect(a.id("connection-state")).to_have_attribute("data-state", "connected")
    expect(a.timeline_post(second)).to_have_count(1)
    expect(a.timeline_post(third)).to_have_count(1)
    ids = a.timeline_ids()
    assert len(ids) == len(set(ids)) == len(before) + 2, ids
    # Resumed from where it was, not reloaded after a reset.
    expect(a.id("view-state")).not_to_contain_text("resynced")
    texts = a.id("timeline").get_by_test_id("tweet-text").all_inner_texts()
    assert texts.index(third) < texts.index(second) < texts.index(FIRST), texts


def visible_state(tab: Tab) -> dict[str, Any]:
    return dict(tab.page.evaluate("""() => ({
        name: document.querySelector('[data-testid="profile-name"]').textContent,
        timeline: [...document.querySelectorAll('[data-testid="timeline"] [data-testid="tweet"]')].map(el => [
            el.dataset.tweetId,
            el.querySelector('[data-testid="tweet-author"]').textContent,
            el.querySelector('[data-testid="tweet-text"]').textContent,
            el.querySelector('[data-testid="like-count"]').textContent,
            el.querySelector('[data-testid="like-button"]').getAttribute('aria-pressed'),
        ]),
        following: [...document.querySelectorAll('[data-testid="person"]')]
            .filter(el => el.querySelector('button').getAttribute('aria-pressed') === 'true')
            .map(el => el.dataset.user).sort(),
    })"""))  # fmt: skip


def test_a_reload_shows_the_same_state(tabs: tuple[Tab, Tab]) -> None:
    a, _ = tabs
    before = visible_state(a)
    assert len(before["timeline"]) >= 5 and "ben" in before["following"]
    a.page.reload()
    expect(a.id("connection-state")).to_have_attribute("data-state", "connected")
    expect(a.id("timeline").get_by_test_id("tweet")).to_have_count(len(before["timeline"]))
    expect(a.id("follow-ben")).to_have_text("Following")
    assert visible_state(a) == before


def test_the_demo_looks_right(tabs: tuple[Tab, Tab]) -> None:
    """The screenshot of the README: A's page, with the activity chart and the log filled."""
    a, _ = tabs
    a.page.get_by_test_id("log-entry").first.wait_for()
    bars = a.page.locator('[data-testid="activity-bar"]:not([data-total="0"])')
    expect(bars).not_to_have_count(0)
    a.page.mouse.move(0, 0)
    ARTIFACTS.mkdir(exist_ok=True)
    a.page.screenshot(path=str(ARTIFACTS / "demo.png"))
    if UPDATE:
        a.page.screenshot(path=str(ROOT / "docs" / "demo.png"))


OBSERVE = """(text) => {
    const timeline = document.querySelector('[data-testid="timeline"]');
    const arrived = () => [...timeline.querySelectorAll('[data-testid="tweet-text"]')]
        .some((el) => el.textContent === text);
    window.__arrival = new Promise((resolve) => {
        const observer = new MutationObserver(() => {
            if (arrived()) {
                observer.disconnect();
                resolve(performance.timeOrigin + performance.now());
            }
        });
        observer.observe(timeline, { childList: true, subtree: true, characterData: true });
    });
}"""
CLICK = """() => {
    const at = performance.timeOrigin + performance.now();
    document.querySelector('[data-testid="compose-submit"]').click();
    return at;
}"""


def test_publish_to_other_tab_latency(tabs: tuple[Tab, Tab], chirp: ChirpSystem) -> None:
    """From B's click on Post to the post in A's timeline, through log, Spark and gateway."""
    a, b = tabs
    samples = []
    for i in range(LATENCY_POSTS):
        text = unique(f"Latency probe {i + 1}")
        b.id("compose-text").fill(text)
        a.page.evaluate(OBSERVE, text)
        clicked = b.page.evaluate(CLICK)
        arrived = a.page.evaluate("() => window.__arrival")
        samples.append(arrived - clicked)
        expect(b.id("compose-status")).to_contain_text("Posted")
    p50 = statistics.median(samples)
    # How long the Spark micro-batches of that time took: most of the path is waiting for one.
    entities = next(q for q in chirp.pipeline.queries if q.name.endswith(".entities"))
    batches = [p["durationMs"]["triggerExecution"] for p in entities.recentProgress
               if p["numInputRows"] > 0][-LATENCY_POSTS:]  # fmt: skip
    result = {
        "what": "click on Post in one tab until the post shows in a follower's tab",
        "path": "browser -> gateway -> log -> Spark micro-batch -> change topic -> gateway -> browser",
        "transport": a.id("connection-state").get_attribute("data-transport"),
        "posts": len(samples),
        "p50_ms": round(p50, 1),
        "p90_ms": round(statistics.quantiles(samples, n=10)[-1], 1),
        "min_ms": round(min(samples), 1),
        "max_ms": round(max(samples), 1),
        "samples_ms": [round(s, 1) for s in samples],
        "spark_batch_p50_ms": statistics.median(batches) if batches else None,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} CPUs",
    }
    print(f"\npublish-to-other-tab latency: p50 {result['p50_ms']} ms over {len(samples)} posts "
          f"(min {result['min_ms']}, max {result['max_ms']}); Spark micro-batches: p50 "
          f"{result['spark_batch_p50_ms']} ms")  # fmt: skip
    ARTIFACTS.mkdir(exist_ok=True)
    text = json.dumps(result, indent=2) + "\n"
    (ARTIFACTS / "demo_latency.json").write_text(text)
    if UPDATE:
        Path(ROOT / "bench" / "results" / "demo_latency.json").write_text(text)
    assert all(s > 0 for s in samples)


def test_a_rebuilt_timeline_replaces_the_old_one_without_a_reload_or_an_empty_moment(
    tabs: tuple[Tab, Tab], chirp: ChirpSystem
) -> None:
    """The entities pipeline is built again beside the serving version and readers switch to
    it: the open page gets the new version's snapshot in place of the old rows, in the same
    page, and its timeline is never empty on screen meanwhile."""
    a, _ = tabs
    before = a.timeline_ids()
    assert before
    a.page.evaluate("""() => {
      window.__samePage = true;
      window.__emptyTimeline = 0;
      const list = document.querySelector('[data-testid="timeline"]');
      new MutationObserver(() => {
        if (!list.querySelector('[data-testid="tweet"]')) window.__emptyTimeline++;
      }).observe(list, { childList: true, subtree: true });
    }""")
    resets = chirp.gateway.gateway.metrics.resets
    chirp.pipeline.rebuild(chirp.client, "entities")
    active = chirp.client.hget("lv:{m}:active", "entities")
    assert active is not None and active.startswith(b"@")
    # Every open subscription of the pipeline's views was reset onto the new version.
    deadline = time.monotonic() + 30
    while chirp.gateway.gateway.metrics.resets == resets:
        assert time.monotonic() < deadline, "no subscriber was reset onto the new version"
        time.sleep(0.05)
    expect(a.id("connection-state")).to_have_attribute("data-state", "connected")
    assert a.timeline_ids() == before
    assert a.page.evaluate("window.__samePage") is True, "the page was reloaded"
    assert a.page.evaluate("window.__emptyTimeline") == 0, "the timeline was empty on screen"
    # The new version is live: a post still reaches the page.
    text = unique("After the rebuild")
    tabs[1].post(text)
    expect(a.timeline_post(text)).to_have_count(1)
