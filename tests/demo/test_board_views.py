"""The board's views (demo/board), declared as Spark queries: random events, with the edge
cases people cause (a move before the task exists, a move after it was deleted, an assignment
to nobody, event times out of order), go through the real streaming queries in several
micro-batches; the stored views must equal a recomputation in Python from the same events in
log order, and a replay of the change topic.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import pytest

from demo.board import app, views
from demo.board.activity import Activity, seed_events
from demo.board.app import LEADERS
from demo.board.events import COLUMNS
from liveviews import EventLog, InvalidEvent
from liveviews.log.events import log_stream
from liveviews.pipeline.views import EVENT_SCHEMA
from tests.support.checks import replayed_views, stored_views
from tests.support.pipeline import RunningPipeline
from tests.support.reference import Views

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
BOARDS = ("launch", "garden", "q3")
PEOPLE = [f"p{i:02d}" for i in range(LEADERS + 4)]  # more than a leaderboard serves


def random_events(rng: random.Random, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for _ in range(n):
        board, person = rng.choice(BOARDS), rng.choice(PEOPLE)
        task = f"t{rng.randrange(8)}"
        time_ms = T0 + rng.randrange(600_000)  # not in log order: the views must not care
        base = {"board": board, "task": task, "person": person}
        roll = rng.random()
        e: dict[str, Any]
        if roll < 0.15:
            e = {
                "type": "task_created",
                "payload": {**base, "title": f"do {task} {rng.random():.3f}"},
            }
        elif roll < 0.35:
            e = {"type": "task_moved", "payload": {**base, "status": rng.choice(COLUMNS)}}
        elif roll < 0.45:
            e = {"type": "task_renamed", "payload": {**base, "title": f"redo {rng.random():.3f}"}}
        elif roll < 0.55:
            assignee = rng.choice([*PEOPLE[:4], None])
            e = {"type": "task_assigned", "payload": {**base, "assignee": assignee}}
        elif roll < 0.60:
            e = {"type": "task_deleted", "payload": base}
        else:
            # Kudos skewed towards a few people, so the top of a leaderboard has ties and gaps.
            receiver = PEOPLE[min(int(rng.expovariate(0.25)), len(PEOPLE) - 1)]
            giver = rng.choice([p for p in PEOPLE if p != receiver])
            kudos = {"board": board, "giver": giver, "receiver": receiver}
            if rng.random() < 0.5:
                kudos["note"] = f"thanks {rng.randrange(100)}"
            e = {"type": "kudos_given", "payload": kudos}
        out.append({**e, "time": time_ms})
    return out


def recompute(events: list[dict[str, Any]]) -> Views:
    """The three views from the events in log order (a board's events are in one partition)."""
    tasks: dict[tuple[str, str], dict[str, Any]] = {}
    kudos: dict[tuple[str, str], dict[str, Any]] = {}
    boards: dict[str, dict[str, Any]] = {}
    for e in events:
        p, kind, t = e["payload"], e["type"], e["time"]
        b = boards.setdefault(p["board"], {"tasks": 0, "kudos": 0, "last_at": t})
        b["last_at"] = max(b["last_at"], t)
        b["last_by"] = p.get("person", p.get("giver"))
        if kind == "kudos_given":
            b["kudos"] += 1
            k = kudos.setdefault((p["board"], p["receiver"]), {"kudos": 0})
            k["kudos"] += 1
            k["last_giver"], k["last_note"] = p["giver"], p.get("note")
            continue
        s = tasks.setdefault((p["board"], p["task"]), {
            "title": None, "status": None, "assignee": None, "created_at": None,
            "changed_at": t, "deleted": False,
        })  # fmt: skip
        s["changed_at"], s["changed_by"] = max(s["changed_at"], t), p["person"]
        if kind == "task_created":
            b["tasks"] += 1
            s["status"] = "todo"
            s["created_at"] = t if s["created_at"] is None else min(s["created_at"], t)
        s["title"] = p.get("title", s["title"])
        s["status"] = p.get("status", s["status"])
        if kind == "task_assigned":
            s["assignee"] = p.get("assignee")
        s["deleted"] = s["deleted"] or kind == "task_deleted"
    out: Views = defaultdict(dict)
    for (board, task), s in tasks.items():
        if s["created_at"] is not None and not s.pop("deleted"):
            out[("tasks", f"{board}/{task}")]["tasks"] = {**s, "board": board, "task": task}
    by_board: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for (board, person), k in kudos.items():
        by_board[board].append((k["kudos"], person))
    for board, scored in by_board.items():
        # Served: the view's limit of rows of highest score, ties broken by the highest row id.
        top = sorted(scored, key=lambda s: (s[0], s[1].encode()), reverse=True)[:LEADERS]
        for _, person in top:
            out[("leaderboard", board)][person] = kudos[(board, person)]
    for board, b in boards.items():
        out[("boards", board)]["boards"] = b
    return dict(out)


def test_the_views_equal_a_recomputation_through_several_batches(store, settings, spark):
    rng = random.Random(11)
    log = EventLog(store, app, settings.log_partitions)
    running = RunningPipeline(spark, settings, app)
    written: list[dict[str, Any]] = []
    try:
        for size in (60, 90, 150, 200):  # each a micro-batch or more: updates and deletes
            batch = random_events(rng, size)
            log.append_batch(batch)
            written += batch
            running.wait_until_caught_up(store)
    finally:
        running.stop()
    expected = recompute(written)
    assert {view for view, _ in expected} == {"tasks", "leaderboard", "boards"}
    assert any(
        len(rows) == LEADERS for (view, _), rows in expected.items() if view == "leaderboard"
    )
    stored = stored_views(store, settings.change_shards)
    assert stored == expected
    replayed, deltas = replayed_views(store, settings.change_shards)
    assert replayed == stored and deltas > 0


def test_the_seed_and_background_activity_are_valid_and_shown(store, settings, spark):
    log = EventLog(store, app, settings.log_partitions)
    seed = seed_events(T0)
    activity = Activity(seed=3).take(300)
    log.append_batch(seed)
    log.append_batch(activity)
    running = RunningPipeline(spark, settings, app)
    try:
        running.wait_until_caught_up(store)
    finally:
        running.stop()
    stored = stored_views(store, settings.change_shards)
    notes = stored[("tasks", "launch/notes")]["tasks"]
    assert (notes["title"], notes["status"], notes["assignee"]) == (
        "Write the release notes",
        "todo",
        "grace",
    )
    assert stored[("tasks", "launch/blog")]["tasks"]["title"] == "Draft the launch blog post"
    assert stored[("tasks", "launch/date")]["tasks"]["assignee"] is None
    assert ("tasks", "launch/tmp") not in stored  # created, then deleted
    shown = {k for v, k in stored if v == "tasks"}
    assert len([k for k in shown if k.startswith("launch/bg-")]) <= 8
    assert stored[("boards", "garden")]["boards"]["tasks"] == 1


def test_no_view_runs_python_per_event(spark):
    events = spark.createDataFrame(
        [(0, "1-0", "task_created", "launch", '{"board": "launch", "task": "a", "person": "ada",'
          ' "title": "A"}', 1, 1)], EVENT_SCHEMA
    )  # fmt: skip
    for build in (views.tasks, views.leaderboard, views.boards):
        plan = build(events, app)._jdf.queryExecution().executedPlan().toString()
        assert "Python" not in plan and "ArrowEval" not in plan, plan


@pytest.mark.parametrize(
    ("raw", "code", "says"),
    [
        ({"type": "kudos_given", "payload": {"board": "launch", "giver": "ada", "receiver": "ada"}},
         "invalid_field", "kudos go to someone else"),
        ({"type": "task_moved", "payload": {"board": "launch", "task": "a", "person": "ada",
                                            "status": "later"}},
         "invalid_field", "field 'status' must match todo|doing|done"),
        ({"type": "task_created", "payload": {"board": "Launch!", "task": "a", "person": "ada",
                                              "title": "A"}},
         "invalid_field", "field 'board' must match"),
    ],
)  # fmt: skip
def test_bad_events_are_refused_with_a_code_and_a_sentence(raw, code, says):
    with pytest.raises(InvalidEvent) as refused:
        app.validate(raw)
    assert refused.value.code == code
    assert says in refused.value.message


def test_the_writer_seeds_once_whatever_the_log_holds(store, settings):
    from demo.board.__main__ import seed_once

    log = EventLog(store, app, settings.log_partitions)
    log.append({"type": "kudos_given", "payload": {"board": "x", "giver": "a", "receiver": "b"}})
    assert seed_once(store, log)  # a log that is not empty is not yet a seeded one
    assert not seed_once(store, log)
    held = sum(store.xlen(log_stream(p)) for p in range(settings.log_partitions))
    assert held == 1 + len(seed_events(T0))
