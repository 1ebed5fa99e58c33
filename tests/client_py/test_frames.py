"""The decoder and encoder (``liveviews.client.frames``) against every file of protocol/golden/,
read as client-js/test/frames.test.js reads them, and malformed messages as protocol errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from liveviews.client.errors import ProtocolError
from liveviews.client.frames import (
    FRAME_KINDS,
    Authenticated,
    ErrorMessage,
    Frame,
    GroupFrame,
    Heartbeat,
    Published,
    Unknown,
    Unsubscribed,
    decode,
    encode_auth,
    encode_publish,
    encode_subscribe,
    encode_subscribe_group,
    encode_unsubscribe,
    encode_wait,
    frame,
    snapshot_shape,
)
from liveviews.client.offsets import latest_of_each, parse_offset
from liveviews.log.events import Offset

GOLDEN = Path(__file__).resolve().parents[2] / "protocol" / "golden"
FILES = sorted(GOLDEN.glob("*.json"))
GOLDEN_FRAMES = {p.name: json.loads(p.read_text()) for p in FILES}
SERVER = [name for name, g in GOLDEN_FRAMES.items() if g["direction"] == "server"]
CLIENT = [name for name, g in GOLDEN_FRAMES.items() if g["direction"] == "client"]
SNAPSHOT_SHAPES = {"snapshot": "key", "prefix_snapshot": "prefix", "window_snapshot": "window"}


def test_there_are_golden_files_of_every_kind_and_query_shape() -> None:
    kinds = {g["kind"] for g in GOLDEN_FRAMES.values()}
    assert (
        FRAME_KINDS | {"heartbeat", "error", "published", "unsubscribed", "authenticated"} <= kinds
    )
    builders = {g.get("builder", g["kind"]) for g in GOLDEN_FRAMES.values()}
    assert {*SNAPSHOT_SHAPES, "window_delta"} <= builders
    assert len(SERVER) + len(CLIENT) == len(FILES)


@pytest.mark.parametrize("name", SERVER)
def test_decodes_golden(name: str) -> None:
    g = GOLDEN_FRAMES[name]
    given: dict[str, Any] = dict(g["input"])
    msg = decode(g["ws"]["text"])
    kind = g["kind"]
    if kind in FRAME_KINDS:
        event_id = given.pop("event_id", None)
        assert msg == Frame(kind, event_id, given, g["ws"]["sub"])
        if kind == "snapshot":
            assert snapshot_shape(given) == SNAPSHOT_SHAPES[g.get("builder", kind)]
    elif kind == "group":
        assert isinstance(msg, GroupFrame)
        assert (msg.sub, msg.id, msg.frontier) == (g["ws"]["sub"], given["event_id"],
                                                   given["frontier"])  # fmt: skip
        assert [(f.sub, f.kind, f.id, f.data) for f in msg.frames] == [
            (m["sub"], m["builder"], m["input"]["event_id"],
             {k: v for k, v in m["input"].items() if k != "event_id"})
            for m in given["members"]
        ]  # fmt: skip
    elif kind == "heartbeat":
        assert msg == Heartbeat()
    elif kind == "authenticated":
        assert msg == Authenticated(given["subject"], given["expires_at"])
    elif kind == "published":
        assert isinstance(msg, Published) and msg.req == given["req"]
        assert [str(o) for o in msg.offsets] == [o["token"] for o in given["offsets"]]
        assert msg.offsets == [Offset(o["partition"], o["id"]) for o in given["offsets"]]
    elif kind == "unsubscribed":
        assert msg == Unsubscribed(given["sub"])
    elif kind == "error":
        assert isinstance(msg, ErrorMessage)
        assert (msg.sub, msg.req) == (given.get("sub"), given.get("req"))
        assert (msg.error.code, msg.error.message) == (given["code"], given["message"])
        extra = {k: v for k, v in given.items() if k not in ("code", "message", "sub", "req")}
        assert msg.error.details == extra
    else:
        pytest.fail(f"no expectation for golden kind {kind}")


@pytest.mark.parametrize("name", CLIENT)
def test_encodes_golden_byte_for_byte(name: str) -> None:
    g = GOLDEN_FRAMES[name]
    i = g["input"]
    kind = g["kind"]
    if kind == "auth":
        text = encode_auth(i["token"])
    elif kind == "subscribe" and "members" in i:
        text = encode_subscribe_group(i["sub"], [
            (m["sub"], m["view"], m["key"], m.get("last_event_id")) for m in i["members"]
        ])  # fmt: skip
    elif kind == "subscribe":
        after = (i["after"]["score"], i["after"]["row"]) if "after" in i else None
        text = encode_subscribe(
            i["sub"],
            i["view"],
            key=i.get("key"),
            prefix=i.get("prefix"),
            limit=i.get("limit"),
            after=after,
            filter=i.get("filter"),
            last_event_id=i.get("last_event_id"),
        )
    elif kind == "unsubscribe":
        text = encode_unsubscribe(i["sub"])
    elif kind == "publish":
        text = encode_publish(i["req"], i["events"], i.get("idempotency_key"))
    elif kind == "wait":
        text = encode_wait(i["sub"], [parse_offset(o) for o in i["offsets"]])
    else:
        pytest.fail(f"no encoder for golden kind {kind}")
    assert text == g["ws"]["text"]


def test_a_window_cursor_goes_back_as_the_float_the_gateway_wrote() -> None:
    # A score given as the integer 9 is the float 9.0 on the wire, as the gateway wrote it.
    text = encode_subscribe("s9", "scores", key="g", limit=2, after=(9, "bob"))
    assert (
        text
        == '{"type":"subscribe","sub":"s9","view":"scores","key":"g","limit":2,"after":{"score":9.0,"row":"bob"}}'
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "not JSON"),
        ("[1,2]", "an object with a type"),
        ('{"type":"delta","data":{}}', "name its sub"),
        ('{"type":"delta","sub":"s","id":"e.1-0","data":{"view":"v","key":"k"}}', "ops"),
        (
            '{"type":"snapshot","sub":"s","data":{"view":"v","key":"k","rows":{},"frontier":{}}}',
            "an id",
        ),
        ('{"type":"published","req":"r","offsets":[{"partition":1,"id":"x"}]}', "offset"),
        ('{"type":"authenticated","subject":"a"}', "expires_at"),
        ('{"type":"error","message":"m"}', "code"),
    ],
)
def test_malformed_messages_are_protocol_errors(text: str, says: str) -> None:
    with pytest.raises(ProtocolError, match=says):
        decode(text)


def test_the_shapes_of_section_5_1_are_checked() -> None:
    with pytest.raises(ProtocolError, match="keys that map each key to its rows"):
        frame(
            "snapshot",
            "e.1-0",
            {"view": "v", "prefix": "p", "keys": {"p1": 3}, "frontier": {}},
            "s",
        )
    with pytest.raises(ProtocolError, match="score"):
        frame(
            "snapshot",
            "e.1-0",
            {"view": "v", "key": "k", "limit": 2, "rows": {"a": 1}, "scores": {}, "frontier": {}},
            "s",
        )
    with pytest.raises(ProtocolError, match="limit"):
        frame(
            "snapshot",
            "e.1-0",
            {"view": "v", "key": "k", "limit": 0, "rows": {}, "scores": {}, "frontier": {}},
            "s",
        )
    with pytest.raises(ProtocolError, match="upserts with a value or deletes"):
        frame("delta", "e.1-0", {"view": "v", "key": "k", "ops": [{"op": "move", "row": "r"}]}, "s")


def test_kinds_this_client_does_not_know_pass() -> None:
    # A newer gateway may add kinds: a frame of one is passed on, a message of one is Unknown.
    assert decode('{"type":"novel","x":1}') == Unknown({"type": "novel", "x": 1})
    assert decode('{"type":"progress","sub":"s","data":{"frontier":{}}}') == Frame(
        "progress", None, {"frontier": {}}, "s"
    )


def test_a_wait_names_only_the_latest_offset_of_each_partition() -> None:
    offsets = [Offset(2, "5-0"), Offset(1, "1-0"), Offset(2, "7-0")]
    assert [(o.partition, o.id) for o in latest_of_each(offsets)] == [(2, "7-0"), (1, "1-0")]
