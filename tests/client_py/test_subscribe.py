"""Subscribing: a key's snapshot then its deltas, a prefix's keys, a window's ranked rows, and
the gateway's refusals as errors with its code."""

from __future__ import annotations

import asyncio

import pytest
import redis

from liveviews.client import GatewayError, LiveviewsClientError, SubscriptionState
from tests.client_py.support import Collected, client_of, task, titles
from tests.support.gateway import ServedGateway, Writer, stored_rows


async def test_a_snapshot_then_its_deltas_in_order(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    writer.write([("tasks", "b1/t1", "task", task("v0")), ("tasks", "b1/t1", "note", "n")])
    async with client_of(gateway) as client:
        sub = client.subscribe("tasks", "b1/t1")
        got = Collected(sub)
        await sub.ready()
        assert dict(sub.rows) == {"task": {"title": "v0"}, "note": "n"}
        assert sub.state == SubscriptionState.LIVE and sub.last_event_id is not None
        for i in range(1, 21):
            writer.write([("tasks", "b1/t1", "task", task(f"v{i}"))])
        writer.write([("tasks", "b1/t1", "note", None)])
        await got.until(lambda c: len(c) == 22)
        first, deltas = got.changes[0], got.deltas()
        assert (first.kind, first.contents, first.was_recovering) == (
            "snapshot",
            {"task": {"title": "v0"}, "note": "n"},
            False,
        )
        assert titles(deltas) == [f"v{i}" for i in range(1, 21)]
        assert deltas[-1].ops == ({"op": "delete", "row": "note"},)
        assert dict(sub.rows) == stored_rows(store, "tasks", "b1/t1", 8)
        assert sub.last_event_id == deltas[-1].event_id
        frame = sub.to_pandas()
        assert list(frame.index) == ["task"] and frame.loc["task", "title"] == "v20"
        await got.stop()
    assert sub.state == SubscriptionState.CLOSED
    with pytest.raises(StopAsyncIteration):
        await sub.__anext__()


async def test_a_prefix_subscription_keeps_each_keys_rows(
    gateway: ServedGateway, writer: Writer
) -> None:
    writer.write(
        [("tasks", "b1/t1", "task", task("one")), ("tasks", "b2/t9", "task", task("other"))]
    )
    async with client_of(gateway) as client:
        sub = client.subscribe("tasks", prefix="b1/")
        got = Collected(sub)
        await sub.ready()
        assert {k: dict(r) for k, r in sub.keys.items()} == {"b1/t1": {"task": {"title": "one"}}}
        writer.write([("tasks", "b1/t2", "task", task("two"))])
        writer.write([("tasks", "b2/t8", "task", task("not mine"))])
        writer.write([("tasks", "b1/t1", "task", None)])
        await got.until(lambda c: len(c) == 3)
        assert [(c.key, c.ops[0]["op"]) for c in got.deltas()] == [
            ("b1/t2", "upsert"),
            ("b1/t1", "delete"),
        ]
        assert list(sub.keys) == ["b1/t2"], "a key is dropped with its last row"
        frame = sub.to_pandas()
        assert list(frame.index) == [("b1/t2", "task")]
        await got.stop()


async def test_a_window_keeps_its_rows_ranked(gateway: ServedGateway, writer: Writer) -> None:
    def points(n: int) -> dict[str, float]:
        return {"points": n, "score": float(n)}

    writer.write([("scores", "g1", p, points(n)) for p, n in [("ann", 5), ("bob", 9), ("cy", 7)]])
    async with client_of(gateway) as client:
        top = client.subscribe("scores", "g1", limit=2)
        got = Collected(top)
        await top.ready()
        assert [(r.row, r.score) for r in top.ranked] == [("bob", 9.0), ("cy", 7.0)]
        page = top.next_page()
        assert page is not None and (page.score, page.row) == (7.0, "cy")
        second = client.subscribe("scores", "g1", limit=2, after=page)
        await second.ready()
        assert [r.row for r in second.ranked] == ["ann"] and second.next_page() is None
        writer.write([("scores", "g1", "dee", points(8))])
        await got.until(lambda c: len(c) == 2)
        assert [(r.row, r.score) for r in top.ranked] == [("bob", 9.0), ("dee", 8.0)]
        assert dict(top.scores) == {"bob": 9.0, "dee": 8.0}
        assert list(top.to_pandas()["score"]) == [9.0, 8.0]
        await got.stop()


async def test_the_gateways_refusals_carry_its_code(gateway: ServedGateway) -> None:
    async with client_of(gateway) as client:
        cases = [
            (client.subscribe("nope", "k"), "unknown_view"),
            (client.subscribe("scores", prefix="g"), "not_listable"),
            (client.subscribe("tasks", "b1/t1", limit=3), "not_ranked"),
            (client.subscribe("drafts", "bob/d1"), "forbidden"),
        ]
        for sub, code in cases:
            with pytest.raises(GatewayError) as refused:
                await sub.ready()
            assert (refused.value.code, sub.state) == (code, SubscriptionState.ERROR)
            assert refused.value.message and isinstance(refused.value, LiveviewsClientError)
            with pytest.raises(GatewayError, match=refused.value.message[:20]):
                await sub.__anext__()
        with pytest.raises(GatewayError) as bad:  # over the open socket: no HTTP status
            await client.publish([{"type": "no_such_type", "payload": {}}])
        assert (bad.value.code, bad.value.status) == ("unknown_event_type", None)
        assert bad.value.details["index"] == 0 and bad.value.idempotency_key is not None
    async with client_of(gateway) as client:  # no subscription, no socket: over HTTP
        with pytest.raises(GatewayError) as bad:
            await client.publish([{"type": "no_such_type", "payload": {}}])
        assert (bad.value.code, bad.value.status) == ("unknown_event_type", 422)
        with pytest.raises(ValueError, match="key or to a prefix"):
            client.subscribe("tasks", "k", prefix="b")  # type: ignore[call-overload]


async def test_a_token_the_gateway_refuses_fails_the_subscriptions(gateway: ServedGateway) -> None:
    """A fixed token that has expired cannot be refreshed: its subscriptions fail with the
    gateway's code, and the client says so instead of reconnecting forever."""
    async with client_of(gateway, token=gateway.token("alice", ttl=-10)) as client:
        sub = client.subscribe("tasks", "b1/t1")
        with pytest.raises(GatewayError) as refused:
            await sub.ready()
        assert refused.value.code == "token_expired"


async def test_an_iterator_far_behind_gets_one_snapshot_of_the_rows_now(
    gateway: ServedGateway, writer: Writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nobody iterates (a script reads ``sub.rows`` only): the queue of changes stays bounded,
    and an iterator that comes late starts from the rows as they are, then follows on."""
    monkeypatch.setattr("liveviews.client.subscription.MAX_QUEUED", 5)
    async with client_of(gateway) as client:
        sub = client.subscribe("tasks", "b1/t1")
        await sub.ready()
        for i in range(1, 21):
            writer.write([("tasks", "b1/t1", "task", task(f"v{i}"))])
        async with asyncio.timeout(5):
            while sub.rows.get("task") != {"title": "v20"}:
                await asyncio.sleep(0.01)
        caught_up = await sub.__anext__()
        assert (caught_up.kind, caught_up.reason, caught_up.was_recovering) == (
            "snapshot", "iterator_behind", True)  # fmt: skip
        assert caught_up.contents == {"task": {"title": "v20"}}
        assert caught_up.event_id == sub.last_event_id
        writer.write([("tasks", "b1/t1", "task", task("v21"))])
        assert titles([await asyncio.wait_for(sub.__anext__(), 5)]) == ["v21"]
