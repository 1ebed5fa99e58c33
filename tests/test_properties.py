"""Property tests: the sink against a plain model, and validation against arbitrary input."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from demo.chirp import app as chirp
from streaming.core.app import App
from streaming.core.changes import read_deltas, read_snapshot
from streaming.core.errors import InvalidEvent
from streaming.core.events import Offset, log_stream
from streaming.core.log import EventLog
from streaming.job.sink import ChangeTopicSink

LIMIT = 3
ROWS = st.sampled_from(["a", "b", "c", "d", "e"])
OP = st.tuples(
    st.sampled_from(["plain", "top"]),
    st.sampled_from(["k1", "k2"]),
    ROWS,
    st.one_of(st.none(), st.integers(0, 3)),  # None deletes; a value upserts
    st.integers(0, 4),  # score
)


def model_view(cands: dict[str, tuple[int, float]], limit: int | None) -> dict[str, Any]:
    if limit is None:
        return {r: v for r, (v, _) in cands.items()}
    top = sorted(cands, key=lambda r: (cands[r][1], r), reverse=True)[:limit]
    return {r: cands[r][0] for r in top}


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=st.lists(st.lists(OP, max_size=12), min_size=1, max_size=6), data=st.data())
def test_sink_matches_a_model_and_its_deltas_rebuild_it(store, batches, data):
    store.flushdb()
    app = App("p")
    app.view("plain")
    app.view("top", limit=LIMIT)
    sink = ChangeTopicSink(store, app, "q", 1, retention=100_000)
    cands: dict[tuple[str, str], dict[str, tuple[int, float]]] = {}
    for batch_id, ops in enumerate(batches):
        rows, last = [], {}
        for view, key, row, value, score in ops:  # the last change of a row in a batch wins
            last[(view, key, row)] = (value, score)
        for (view, key, row), (value, score) in last.items():
            rows.append({"view": view, "key": key, "row": row, "score": float(score),
                         "value": None if value is None else str(value)})  # fmt: skip
            group = cands.setdefault((view, key), {})
            if value is None:
                group.pop(row, None)
            else:
                group[row] = (value, float(score))
        sink.write(rows, batch_id)
        if data.draw(st.booleans()):
            sink.write(rows, batch_id)  # a replay changes nothing
    replayed: dict[tuple[str, str], dict[str, Any]] = {}
    for delta in read_deltas(store, 0, count=100_000):
        delta.apply(replayed.setdefault((delta.view, delta.key), {}))
    for (view, key), group in cands.items():
        expected = model_view(group, LIMIT if view == "top" else None)
        assert read_snapshot(store, view, key, 1).rows == expected
        assert replayed.get((view, key), {}) == expected


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
EVENTISH = st.fixed_dictionaries(
    {"type": st.sampled_from([*chirp.event_types, "nope"]) | JSON},
    optional={"payload": JSON | st.dictionaries(st.sampled_from(["user", "tweet", "text", "name", "followee", "avatar", "x"]), st.text(max_size=40) | JSON, max_size=5),
              "time": JSON},
)  # fmt: skip


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=st.lists(EVENTISH | JSON, min_size=1, max_size=4))
def test_validation_accepts_or_rejects_with_a_documented_error_and_writes_nothing_on_rejection(
    store, batch
):
    store.flushdb()
    log = EventLog(store, chirp, 4)
    before = sum(store.xlen(log_stream(p)) for p in range(4))
    try:
        offsets = log.append_batch(batch)
    except InvalidEvent as exc:
        assert exc.code in {"wrong_type", "unknown_event_type", "unexpected_field", "missing_field",
                            "invalid_field", "invalid_time"}  # fmt: skip
        assert exc.message and exc.index is not None
        assert sum(store.xlen(log_stream(p)) for p in range(4)) == before
    else:
        assert len(offsets) == len(batch)
        for raw, off in zip(batch, offsets, strict=True):
            (entry,) = store.xrange(log_stream(off.partition), min=off.id, max=off.id)
            assert orjson.loads(entry[1][b"payload"]) == {
                k: v for k, v in raw["payload"].items() if v is not None
            }


@given(partition=st.integers(0, 10_000), ms=st.integers(0, 2**48), seq=st.integers(0, 2**32))
def test_offset_tokens_round_trip(partition, ms, seq):
    offset = Offset(partition, f"{ms}-{seq}")
    assert Offset.parse(str(offset)) == offset
