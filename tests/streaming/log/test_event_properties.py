"""Property tests: event validation against arbitrary input, and offset tokens."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from demo.chirp import app as chirp
from liveviews.errors import InvalidEvent
from liveviews.log.eventlog import EventLog
from liveviews.log.events import Offset, log_stream

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
    for offset in (Offset(partition, f"{ms}-{seq}"), Offset(partition, str(ms))):
        assert Offset.parse(str(offset)) == offset
