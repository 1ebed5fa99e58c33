"""Filtered prefix subscriptions (docs/PROTOCOL.md, section 5.2): the checks of a filter when the
application subscribes, what each transport sends of it, what a filtered prefix keeps as rows
move in and out (or as a resume deletes a row it never held), and the same against the real
gateway over WebSocket and SSE, resumed after a cut connection."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest

from liveviews.client import (
    GatewayError,
    PrefixSubscription,
    Subscription,
    SubscriptionState,
    sync,
)
from liveviews.client.frames import encode_subscribe, frame
from liveviews.client.query import parse_query
from liveviews.client.sse import stream_path
from liveviews.log.events import Offset
from tests.client_py.proxy import Proxy
from tests.client_py.support import FAST, Collected, client_of
from tests.support.gateway import ServedGateway, Writer, wait_for

MINE = {"field": "assignee", "eq": "ada"}
DIGEST = "0123456789abcdef"


def event_id(pos: str) -> str:
    return f"5f3a9c0e12ab.{pos}~0.{DIGEST}"


class Unattached:
    """The owner of a subscription fed frames by the test itself: no transport."""

    def detach(self, sub: Subscription) -> None:
        pass

    def wait(self, sub: Subscription, offsets: list[Offset]) -> None:
        pass


def held(sub: PrefixSubscription) -> dict[str, dict[str, Any]]:
    return {key: dict(rows) for key, rows in sub.keys.items()}


def assigned(title: str, assignee: str | None) -> dict[str, Any]:
    return {"title": title, "assignee": assignee}


# ---- the query ---------------------------------------------------------------------------------


def test_a_filter_goes_with_a_prefix_as_a_copy_of_the_one_given() -> None:
    given: dict[str, Any] = {"and": [MINE, {"not": {"field": ["meta", "done"], "eq": True}}]}
    query = parse_query("tasks", prefix="board1/", filter=given)
    assert (query.shape, query.prefix, query.filter) == ("prefix", "board1/", given)
    given["and"].append({"field": "x", "eq": 1})
    assert query.filter is not None and len(query.filter["and"]) == 2, "a copy, made once"
    assert parse_query("tasks", prefix="", filter=MINE).filter == MINE
    assert parse_query("tasks", prefix="b/", filter=None).filter is None
    assert hash(query) == hash(parse_query("tasks", prefix="board1/")), "a query still hashes"
    # Its grammar is the gateway's to check (invalid_filter): any dict of JSON values goes.
    assert parse_query("tasks", prefix="", filter={"field": "x", "eq": 1, "ne": None}).filter == {
        "field": "x",
        "eq": 1,
        "ne": None,
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"key": "board1/t1"}, "not of one key or a window: subscribe"),
        ({"key": "g", "limit": 3}, "not of one key or a window"),
        ({}, r"prefix='' for the whole view"),
        ({"prefix": "b/", "filter": "assignee = ada"}, "a filter is a dict such as .* not a str"),
        ({"prefix": "b/", "filter": [MINE]}, "not a list"),
        ({"prefix": "b/", "filter": {"field": "n", "gt": math.nan}}, r"filter\.gt is nan"),
        ({"prefix": "b/", "filter": {"field": "n", "in": [1, {2}]}}, r"filter\.in\[1\] is a set"),
        ({"prefix": "b/", "filter": {"or": [MINE, {1: "x"}]}}, r"filter\.or\[1\] has the key 1"),
    ],
)
def test_a_filter_of_a_key_or_one_json_cannot_carry_is_a_value_error(
    options: dict[str, Any], message: str
) -> None:
    options = {"filter": MINE, **options}
    key = options.pop("key", None)
    with pytest.raises(ValueError, match=message):
        parse_query("tasks", key, **options)


def test_a_filter_that_contains_itself_is_refused() -> None:
    circular: dict[str, Any] = {"field": "a", "in": []}
    circular["in"].append(circular)
    with pytest.raises(ValueError, match=r"filter\.in\[0\] contains itself"):
        parse_query("tasks", prefix="", filter=circular)


def test_a_filtered_prefix_asks_for_its_filter_over_each_transport() -> None:
    query = parse_query("tasks", prefix="board1/", filter=MINE)
    # The form of protocol/golden/client-subscribe-filter.json: the filter after the prefix.
    text = encode_subscribe("s3", "tasks", prefix="board1/", filter=query.filter)
    assert text == (
        '{"type":"subscribe","sub":"s3","view":"tasks","prefix":"board1/",'
        '"filter":{"field":"assignee","eq":"ada"}}'
    )
    resumed = encode_subscribe(
        "s4", "tasks", prefix="", filter={"eq": "ada", "field": "assignee"}, last_event_id="e.1"
    )
    assert resumed.endswith('"filter":{"eq":"ada","field":"assignee"},"last_event_id":"e.1"}')
    path = urlsplit(stream_path(query))
    assert path.path == "/v1/live"
    params = parse_qs(path.query)
    assert params["prefix"] == ["board1/"]
    assert orjson.loads(params["filter"][0]) == MINE
    whole = parse_qs(urlsplit(stream_path(parse_query("tasks", prefix="", filter=MINE))).query)
    assert set(whole) == {"view", "filter"}, "the whole view: no prefix"


# ---- what a filtered prefix keeps --------------------------------------------------------------


def test_rows_move_in_and_out_and_a_delete_of_a_row_never_held_changes_nothing() -> None:
    sub = PrefixSubscription(Unattached(), parse_query("tasks", prefix="b/", filter=MINE))
    assert isinstance(sub.filter, Mapping) and dict(sub.filter) == MINE

    def delta(pos: str, key: str, *ops: dict[str, Any]) -> None:
        data = {"view": "tasks", "key": key, "ops": list(ops)}
        sub._frame(frame("delta", event_id(pos), data, None))

    keys = {"b/t1": {"task": assigned("one", "ada")}}
    snapshot = {"view": "tasks", "prefix": "b/", "keys": keys, "frontier": {"0": "1-0"}}
    sub._frame(frame("snapshot", event_id("1-0"), snapshot, None))
    delta("2-0", "b/t2", {"op": "upsert", "row": "task", "value": assigned("two", "ada")})
    delta("3-0", "b/t1", {"op": "delete", "row": "task"})  # moved out
    assert held(sub) == {"b/t2": {"task": assigned("two", "ada")}}
    delta("4-0", "b/t9", {"op": "delete", "row": "task"})  # after a resume: never held
    delta("5-0", "b/t2", {"op": "delete", "row": "note"})
    assert held(sub) == {"b/t2": {"task": assigned("two", "ada")}}
    assert sub.last_event_id == event_id("5-0") and sub.state == SubscriptionState.LIVE


# ---- against the real gateway ------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["websocket", "sse"])
async def test_a_filtered_prefix_follows_rows_moving_in_and_out_and_resumes(
    proxy: Proxy, gateway: ServedGateway, writer: Writer, transport: str
) -> None:
    def put(task: str, title: str, assignee: str | None) -> tuple[str, str, str, Any]:
        return ("tasks", f"b1/{task}", "task", assigned(title, assignee))

    writer.write([put("t1", "one", "ada"), put("t2", "two", "ben"), put("t3", "three", None)])
    async with client_of(gateway, url=proxy.url, transport=transport) as client:
        sub = client.subscribe("tasks", prefix="b1/", filter=MINE)
        got = Collected(sub)
        await sub.ready()
        assert held(sub) == {"b1/t1": {"task": assigned("one", "ada")}}
        writer.write([put("t2", "two", "ada")])  # moves in
        writer.write([put("t1", "one", "ben")])  # moves out
        writer.write([put("t3", "three, renamed", None)])  # matched neither before nor after
        writer.write([put("t4", "four", "ada")])
        await got.until(lambda c: len(c) == 4)
        assert [(c.key, [op["op"] for op in c.ops]) for c in got.deltas()] == [
            ("b1/t2", ["upsert"]),
            ("b1/t1", ["delete"]),
            ("b1/t4", ["upsert"]),
        ]

        proxy.down = True
        proxy.cut()
        await wait_for(lambda: sub.state == SubscriptionState.RECONNECTING)
        writer.write([put("t2", "two", "ben")])  # moves out while the client is away
        writer.write([put("t5", "five", "ada"), put("t3", "three, again", "ben")])
        proxy.down = False
        await wait_for(lambda: "b1/t5" in sub.keys and "b1/t2" not in sub.keys)
        writer.write([put("t6", "six", "ada")])
        await wait_for(lambda: "b1/t6" in sub.keys)
        assert set(sub.keys) == {"b1/t4", "b1/t5", "b1/t6"}
        # Only rows that match ever came: a resume may delete a row it never held, not upsert it.
        upserts = [op for c in got.deltas() for op in c.ops if op["op"] == "upsert"]
        assert all(op["value"]["assignee"] == "ada" for op in upserts), upserts
        assert len(got.snapshots()) == 1, "resumed, not started over"
        ids = [c.event_id for c in got.changes]
        assert len(set(ids)) == len(ids)
        await got.stop()


@pytest.mark.parametrize("transport", ["websocket", "sse"])
async def test_a_filter_the_gateway_cannot_read_is_refused_naming_the_place(
    gateway: ServedGateway, transport: str
) -> None:
    wrong = {"and": [MINE, {"field": "points", "gt": [1]}]}
    async with client_of(gateway, transport=transport) as client:
        sub = client.subscribe("tasks", prefix="b1/", filter=wrong)
        with pytest.raises(GatewayError, match=r"filter\.and\[1\]\.gt") as refused:
            await sub.ready()
        assert refused.value.code == "invalid_filter"
        assert refused.value.status == (400 if transport == "sse" else None)
        assert sub.state == SubscriptionState.ERROR


async def test_a_filter_narrows_only_what_the_subject_may_read(
    gateway: ServedGateway, writer: Writer
) -> None:
    writer.write(
        [
            ("drafts", "alice/d1", "draft", {"text": "mine", "done": False}),
            ("drafts", "alice/d2", "draft", {"text": "mine, done", "done": True}),
            ("drafts", "bob/d1", "draft", {"text": "theirs", "done": False}),
        ]
    )
    async with client_of(gateway, user="alice") as client:
        sub = client.subscribe("drafts", prefix="", filter={"field": "done", "eq": False})
        await sub.ready()
        assert held(sub) == {"alice/d1": {"draft": {"text": "mine", "done": False}}}


def test_a_script_follows_a_filtered_prefix(gateway: ServedGateway, writer: Writer) -> None:
    writer.write(
        [
            ("tasks", "b1/t1", "task", assigned("one", "ada")),
            ("tasks", "b1/t2", "task", assigned("two", "ben")),
        ]
    )
    with sync.connect(gateway.url, token=gateway.token("alice"), **FAST) as client:
        sub = client.subscribe("tasks", prefix="b1/", filter=MINE).ready()
        assert sub.keys == {"b1/t1": {"task": assigned("one", "ada")}}
        writer.write([("tasks", "b1/t2", "task", assigned("two", "ada"))])
        changes = list(sub.changes(timeout=1))  # until a second passes without one
        assert [(c.kind, c.key) for c in changes] == [("snapshot", None), ("delta", "b1/t2")]
        assert sub.keys["b1/t2"] == {"task": assigned("two", "ada")}
