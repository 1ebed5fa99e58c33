"""The frame encoder against the golden examples of protocol/golden/, and event id parsing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from liveviews.gateway.errors import BadRequest
from liveviews.gateway.wire import frames
from liveviews.gateway.wire.eventid import EventId

GOLDEN = Path(__file__).resolve().parents[3] / "protocol" / "golden"
FILES = sorted(GOLDEN.glob("*.json"))
BUILDERS = {
    "snapshot": frames.snapshot,
    "delta": frames.delta,
    "progress": frames.progress,
    "reset": frames.reset,
    "end": frames.end,
    "prefix_snapshot": frames.prefix_snapshot,
    "window_snapshot": frames.window_snapshot,
    "window_delta": frames.window_delta,
}


def _group(members: list[dict[str, Any]], frontier: dict[str, str], event_id: str) -> frames.Frame:
    """A group frame of golden member frames, each built by its own builder."""
    built = [(m["sub"], BUILDERS[m["builder"]](**m["input"])) for m in members]
    return frames.group(built, frontier, event_id)


BUILDERS["group"] = _group


def load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def test_there_is_a_golden_file_for_every_frame_kind() -> None:
    kinds = {load(p)["kind"] for p in FILES}
    builders = {load(p).get("builder", load(p)["kind"]) for p in FILES}
    assert set(BUILDERS) <= builders
    assert {"heartbeat", "error", "published", "unsubscribed"} <= kinds


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_encoder_output_equals_the_golden_file(path: Path) -> None:
    golden = load(path)
    kind, inp, ws = golden["kind"], golden["input"], golden["ws"]
    if golden["direction"] == "client":
        assert orjson.loads(ws["text"]) == inp
        return
    builder = golden.get("builder", kind)
    if builder in BUILDERS:
        frame = BUILDERS[builder](**inp)
        assert frame.sse.decode() == golden["sse"]
        assert frame.ws(ws["sub"]).decode() == ws["text"]
        assert orjson.loads(ws["text"])["data"] == orjson.loads(golden["sse"].split("data: ")[1])
    elif kind == "heartbeat":
        assert frames.SSE_HEARTBEAT.decode() == golden["sse"]
        assert frames.WS_HEARTBEAT.decode() == ws["text"]
    elif kind == "error":
        assert frames.ws_error(**inp).decode() == ws["text"]
    else:
        assert frames.ws_message(**inp).decode() == ws["text"]


def test_a_line_break_in_an_id_cannot_forge_a_field() -> None:
    frame = frames.Frame("delta", b"{}", "e.1-0\ndata: forged")
    assert frame.sse == b"event: delta\nid: e.1-0data: forged\ndata: {}\n\n"


def test_event_ids_round_trip_and_malformed_ones_are_refused() -> None:
    assert str(EventId.parse("ab12.1732170000000-7")) == "ab12.1732170000000-7"
    assert EventId.parse("ab12.0001-02") == EventId("ab12", "1-2")
    for bad in ["", "abc", "ab12.", "ab12.1-", ".1-0", "ab12.1-0x", "a b.1-0", "x" * 200 + ".1-0"]:
        with pytest.raises(BadRequest) as info:
            EventId.parse(bad)
        assert info.value.code == "invalid_last_event_id"
