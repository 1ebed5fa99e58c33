"""Browser fixtures: Debian's Chromium driven by Playwright, and a screenshot of every open
page when a test fails (to test-artifacts/, which git ignores)."""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, OPEN_PAGES


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (make test does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and OPEN_PAGES:
        ARTIFACTS.mkdir(exist_ok=True)
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.name)
        for name, page in OPEN_PAGES.items():
            try:
                page.screenshot(path=str(ARTIFACTS / f"{stem}-{name}.png"), full_page=True)
            except Exception as exc:  # a closed page must not hide the test's own failure
                print(f"no screenshot of {name}: {exc}")
