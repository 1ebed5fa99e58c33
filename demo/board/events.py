"""The board's event types: the facts its people add to the log.

Every event names its board and is keyed by it, so one board's events are totally ordered in
one log partition: the newest title, column or assignee of a task is the one of its last event.
``person`` is who did it, and the gateway lets a signed-in user publish only as themselves.
"""

from __future__ import annotations

from typing import Any

from liveviews import App, Schema, String

COLUMNS = ("todo", "doing", "done")
"""A task's columns, left to right; a new task starts in the first."""

BOARD = String(max_length=32, pattern=r"[a-z0-9][a-z0-9-]{0,31}")
TASK = String(max_length=40, pattern=r"[a-z0-9][a-z0-9-]{0,39}")
PERSON = String(max_length=32, pattern=r"[a-z0-9_]{1,32}")
TITLE = String(max_length=120)
COLUMN = String(max_length=8, pattern="|".join(COLUMNS))


def _not_to_yourself(p: dict[str, Any]) -> str | None:
    if p["giver"] == p["receiver"]:
        return "kudos go to someone else: giver and receiver must differ."
    return None


def declare(app: App) -> None:
    def by_board(p: dict[str, Any]) -> str:
        return str(p["board"])

    def by_person(p: dict[str, Any]) -> str:
        return str(p["person"])

    def by_giver(p: dict[str, Any]) -> str:
        return str(p["giver"])

    task = {"board": BOARD, "task": TASK, "person": PERSON}
    app.event_type("task_created", Schema({**task, "title": TITLE}), by_board, author=by_person,
                   description="Someone adds a task to a board, in its first column.")  # fmt: skip
    app.event_type("task_moved", Schema({**task, "status": COLUMN}), by_board, author=by_person,
                   description="Someone moves a task to another column.")  # fmt: skip
    app.event_type("task_renamed", Schema({**task, "title": TITLE}), by_board, author=by_person,
                   description="Someone gives a task a new title.")  # fmt: skip
    app.event_type(
        "task_assigned",
        Schema({**task, "assignee": String(max_length=32, pattern=PERSON.pattern, optional=True)}),
        by_board,
        author=by_person,
        description="Someone assigns a task to a person, or to nobody (no assignee).",
    )
    app.event_type("task_deleted", Schema(task), by_board, author=by_person,
                   description="Someone takes a task off the board.")  # fmt: skip
    app.event_type(
        "kudos_given",
        Schema(
            {
                "board": BOARD,
                "giver": PERSON,
                "receiver": PERSON,
                "note": String(max_length=140, optional=True),
            },
            check=_not_to_yourself,
        ),
        by_board,
        author=by_giver,
        description="Someone thanks a teammate on a board.",
    )
