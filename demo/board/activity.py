"""Board activity, made up: the seed a fresh demo starts from, and background activity.

Deterministic for a given seed. It does what people do: tasks created, moved back and forth,
renamed, assigned and unassigned, deleted once done, and kudos, some with a note.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from demo.board.events import COLUMNS

PEOPLE = ("ada", "grace", "alan", "linus", "barbara", "edsger")
SEED_BOARD = "launch"
SEED_TASKS = [
    ("notes", "Write the release notes", "grace", "todo"),
    ("login", "Fix the login redirect", "alan", "doing"),
    ("date", "Pick a date for the launch", None, "done"),
    ("blog", "Draft the blog post", "ada", "todo"),
]
SEED_KUDOS = [
    ("ada", "grace", "for the release plan"),
    ("alan", "grace", None),
    ("linus", "grace", "reviews within the hour"),
    ("grace", "alan", "found the redirect bug"),
    ("barbara", "alan", None),
    ("grace", "ada", None),
    ("alan", "barbara", "the new build"),
    ("ada", "linus", None),
    ("grace", "edsger", None),
]


def event(type_: str, time_ms: int | None, **payload: Any) -> dict[str, Any]:
    """An event as a client publishes it; without a time, the log's append time is its time."""
    if time_ms is None:
        return {"type": type_, "payload": payload}
    return {"type": type_, "payload": payload, "time": time_ms}


def seed_events(now_ms: int) -> list[dict[str, Any]]:
    """A board with tasks in every column and a leaderboard, so the demo looks alive on first
    start; with a rename, an assignment to nobody and a deletion, it takes every path of the
    views once (``App.samples``)."""
    out: list[dict[str, Any]] = []
    t = now_ms
    for task, title, assignee, status in SEED_TASKS:
        out.append(event("task_created", t, board=SEED_BOARD, task=task, title=title, person="ada"))
        if assignee is not None:
            out.append(event("task_assigned", t, board=SEED_BOARD, task=task, person="ada",
                             assignee=assignee))  # fmt: skip
        if status != "todo":
            out.append(event("task_moved", t, board=SEED_BOARD, task=task, person="grace",
                             status=status))  # fmt: skip
        t += 1
    out += [
        event("task_renamed", t, board=SEED_BOARD, task="blog", person="ada",
              title="Draft the launch blog post"),
        event("task_assigned", t, board=SEED_BOARD, task="date", person="grace"),
        event("task_created", t, board=SEED_BOARD, task="tmp", person="alan", title="Scratch"),
        event("task_deleted", t + 1, board=SEED_BOARD, task="tmp", person="alan"),
        event("task_created", t + 2, board="garden", task="seeds", person="linus",
              title="Order the seeds"),
    ]  # fmt: skip
    for i, (giver, receiver, note) in enumerate(SEED_KUDOS):
        kudos = {"board": SEED_BOARD, "giver": giver, "receiver": receiver}
        if note is not None:
            kudos["note"] = note
        out.append(event("kudos_given", t + 3 + i, **kudos))
    return out


class Activity:
    """An endless, reproducible stream of plausible board events, on tasks of its own (their
    ids start with ``prefix``), so that it never touches a task someone else made."""

    def __init__(self, board: str = SEED_BOARD, seed: int = 7, prefix: str = "bg") -> None:
        self.rng = random.Random(seed)
        self.board = board
        self.prefix = prefix
        self.columns: dict[str, str] = {}
        self.serial = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        rng, board = self.rng, self.board
        person = rng.choice(PEOPLE)
        roll = rng.random()
        if roll < 0.25:
            return self._kudos(person)
        if not self.columns or (roll < 0.40 and len(self.columns) < 8):
            self.serial += 1
            task = f"{self.prefix}-{self.serial}"
            self.columns[task] = "todo"
            return event("task_created", None, board=board, task=task, person=person,
                         title=f"Chore {self.serial}")  # fmt: skip
        task = rng.choice(sorted(self.columns))
        done = [t for t, c in self.columns.items() if c == "done"]
        if roll < 0.50 and len(done) > 2:
            task = rng.choice(sorted(done))
            del self.columns[task]
            return event("task_deleted", None, board=board, task=task, person=person)
        if roll < 0.80:
            status = rng.choice([c for c in COLUMNS if c != self.columns[task]])
            self.columns[task] = status
            return event("task_moved", None, board=board, task=task, person=person, status=status)
        if roll < 0.92:
            assignee = rng.choice([*PEOPLE, None])
            if assignee is None:
                return event("task_assigned", None, board=board, task=task, person=person)
            return event("task_assigned", None, board=board, task=task, person=person,
                         assignee=assignee)  # fmt: skip
        return event("task_renamed", None, board=board, task=task, person=person,
                     title=f"Chore {task.rpartition('-')[2]}, again")  # fmt: skip

    def _kudos(self, giver: str) -> dict[str, Any]:
        receiver = self.rng.choice([p for p in PEOPLE if p != giver])
        return event("kudos_given", None, board=self.board, giver=giver, receiver=receiver)

    def take(self, n: int) -> list[dict[str, Any]]:
        return [next(self) for _ in range(n)]
