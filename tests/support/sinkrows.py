"""Row changes as a pipeline's query hands them to the sink, for tests that drive the sink
directly: an application of two views (one whole, one with a limit) and a row change of it."""

from __future__ import annotations

from typing import Any

from liveviews.app import App


def make_app() -> App:
    app = App("t")
    app.view("plain")
    app.view("top", limit=3)
    return app


def row(view: str, key: str, row_id: str, value: str | None, score: float = 0.0) -> dict[str, Any]:
    return {"view": view, "key": key, "row": row_id, "value": value, "score": score}
