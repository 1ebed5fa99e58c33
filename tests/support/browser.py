"""What the browser tests share with their conftest: Chromium, and where failures are kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

OPEN_PAGES: dict[str, Any] = {}
"""Pages by name, registered by the tests, screenshotted when a test fails."""
