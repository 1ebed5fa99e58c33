"""Property tests: the sink against a plain model."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liveviews.app import App
from liveviews.changes.topic import read_deltas, read_snapshot
from liveviews.pipeline.sink import ChangeTopicSink

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
