"""Dead letters: the log entries a pipeline set aside instead of stopping on them.

An entry is set aside when the pipeline cannot decode it (a field missing, a payload that
does not match its type's schema, an unknown type: written straight into the log by another
producer or an older version) or when a view's code raises on it. Each pipeline keeps its own:

``lv:{d}:deadletters:<pipeline>``  hash, field ``<partition>:<entry id>`` -> the record (JSON)
``lv:{d}:deadletters``             stream of ``pipeline``/``offset`` pairs, in the order recorded

The hash is also the pipeline's quarantine: its source leaves out every entry listed there, so
a micro-batch replayed after a crash makes the same decision as the first run, and the views
keep their exactly-once promise. A record is written once (``HSETNX``); a replayed batch that
records it again changes nothing, and the stream gains an entry only for a new record.
Replaying a dead letter appends its event to the log again, as a new event; the old entry stays
set aside, so the log's history and every replay of it stay the same.
"""

from __future__ import annotations

import time
import traceback as tb
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import orjson

from liveviews.log.events import log_stream

if TYPE_CHECKING:  # the views import this module in Spark's workers, which need no client
    from liveviews.store.client import Client

PREFIX = "lv:{d}:deadletters:"
ORDER_STREAM = "lv:{d}:deadletters"
MAX_TRACEBACK = 8192
"""Characters of a traceback kept: its end, where the failing line is."""
MAX_FIELD = 65536
"""Characters of each of the event's fields kept in the record; the log keeps the whole entry."""

STAGE_DECODE = "decode"
"""The entry could not be read as an event of the application."""
STAGE_VIEW = "view"
"""A view's code raised on the event."""
STAGE_BATCH = "batch"
"""A micro-batch failed in code that cannot name the event: every entry of the batch is set
aside, so the pipeline goes on."""

_RECORD = """
local added = 0
for i = 2, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('XADD', KEYS[2], '*', 'pipeline', ARGV[1], 'offset', ARGV[i])
    added = added + 1
  end
end
return added
"""


def key_of(pipeline: str) -> str:
    return f"{PREFIX}{pipeline}"


@dataclass(frozen=True)
class DeadLetter:
    """One set-aside entry: where it is, what it held, and what went wrong."""

    pipeline: str
    offset: str
    """``<partition>:<entry id>``, the entry's place in the log."""
    stage: str
    error: str
    traceback: str = ""
    event: dict[str, str | None] | None = None
    """The entry's fields as the log holds them (``type``, ``key``, ``time``, ``payload``)."""
    batch: int | None = None
    recorded_ms: int = 0
    replayed_as: str | None = None

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes | str) -> DeadLetter:
        return cls(**orjson.loads(raw))


def letter(
    pipeline: str,
    offset: str,
    stage: str,
    error: BaseException | str,
    *,
    fields: dict[bytes, bytes] | None = None,
    batch: int | None = None,
    trace: str | None = None,
) -> DeadLetter:
    """A record for ``offset``; the traceback is the current exception's unless given."""
    if isinstance(error, BaseException):
        text = f"{type(error).__name__}: {error}"
        trace = trace if trace is not None else "".join(tb.format_exception(error))
    else:
        text = error
    return DeadLetter(
        pipeline=pipeline,
        offset=offset,
        stage=stage,
        error=text[:MAX_FIELD],
        traceback=(trace or "")[-MAX_TRACEBACK:],
        event=event_fields(fields) if fields is not None else None,
        batch=batch,
        recorded_ms=int(time.time() * 1000),
    )


def event_fields(fields: dict[bytes, bytes]) -> dict[str, str | None]:
    """An entry's fields as text, whatever they hold (undecodable bytes replaced)."""
    out: dict[str, str | None] = {}
    for name, value in fields.items():
        out[name.decode(errors="replace")] = value.decode(errors="replace")[:MAX_FIELD]
    return out


def record(client: Any, letters: Sequence[DeadLetter]) -> None:
    """Record ``letters`` (all of one pipeline): each once, in one atomic call per pipeline.

    ``client`` may be a pipeline of commands (the sink queues the call with its batch)."""
    by_pipeline: dict[str, list[DeadLetter]] = {}
    for d in letters:
        by_pipeline.setdefault(d.pipeline, []).append(d)
    for pipeline, group in by_pipeline.items():
        args: list[Any] = []
        for d in group:
            args += [d.offset, d.to_json()]
        # Both keys share the hash tag {d}: one slot of a store cluster.
        client.eval(_RECORD, 2, key_of(pipeline), ORDER_STREAM, pipeline, *args)


def quarantined(client: Client, pipeline: str) -> frozenset[str]:
    """The offsets the pipeline has set aside; one small call when there are none."""
    if not client.hlen(key_of(pipeline)):
        return frozenset()
    return frozenset(k.decode() for k in client.hkeys(key_of(pipeline)))  # type: ignore[union-attr]


def counts(client: Client, pipelines: Iterable[str]) -> dict[str, int]:
    names = list(pipelines)
    with client.pipeline(transaction=False) as pipe:
        for p in names:
            pipe.hlen(key_of(p))
        return dict(zip(names, (int(n) for n in pipe.execute()), strict=True))


def listed(client: Client, pipeline: str | None = None, count: int = 100) -> list[DeadLetter]:
    """The newest ``count`` dead letters (of one pipeline, or of all), oldest first."""
    out: list[DeadLetter] = []
    cursor = "+"
    while len(out) < count:
        entries: Any = client.xrevrange(ORDER_STREAM, max=cursor, count=max(count, 100))
        if not entries:
            break
        for _, f in entries:
            name, offset = f[b"pipeline"].decode(), f[b"offset"].decode()
            if pipeline is None or name == pipeline:
                found = show(client, name, offset)
                if found is not None:
                    out.append(found)
                    if len(out) == count:
                        break
        cursor = f"({entries[-1][0].decode()}"
    out.reverse()
    return out


def show(client: Client, pipeline: str, offset: str) -> DeadLetter | None:
    raw: Any = client.hget(key_of(pipeline), offset)
    return None if raw is None else DeadLetter.from_json(raw)


def read_entries(client: Any, offsets: Sequence[str]) -> list[dict[bytes, bytes] | None]:
    """The log entry at each of ``offsets`` (None where the log no longer has it), in one
    round trip."""
    with client.pipeline(transaction=False) as pipe:
        for offset in offsets:
            partition, _, entry_id = offset.partition(":")
            pipe.xrange(log_stream(int(partition)), min=entry_id, max=entry_id, count=1)
        found: list[Any] = pipe.execute() if offsets else []
    return [f[0][1] if f else None for f in found]


Reader = Callable[[str], "dict[bytes, bytes] | None"]
"""The fields of the log's entry at an offset (``<partition>:<entry id>``), None if gone."""
Appender = Callable[[int, "dict[bytes, bytes]"], str]
"""Appends an entry of these fields to a partition of the log; its offset."""


def replay(
    client: Client, pipeline: str, offset: str, read: Reader | None = None,
    append: Appender | None = None,
) -> str:  # fmt: skip
    """Append the dead letter's event to the log again; its new offset.

    The event goes to the partition it came from, with the same fields, so a fixed view sees
    it as if just published. Replaying twice appends twice: the record says where it went.
    ``read`` and ``append`` reach the log: the store's streams when None, or a Kafka topic
    (``liveviews.log.kafka.entries``)."""
    found = show(client, pipeline, offset)
    if found is None:
        raise KeyError(f"pipeline {pipeline!r} has no dead letter at {offset}.")
    fields = read(offset) if read is not None else read_entries(client, [offset])[0]
    if fields is None:
        raise KeyError(f"the log no longer holds {offset}; nothing to replay.")
    partition = int(offset.partition(":")[0])
    if append is not None:
        new_offset = append(partition, fields)
    else:
        new_id: Any = client.xadd(log_stream(partition), fields)  # type: ignore[arg-type]
        new_offset = f"{partition}:{new_id.decode()}"
    updated = DeadLetter(**{**asdict(found), "replayed_as": new_offset})
    client.hset(key_of(pipeline), offset, updated.to_json())
    return new_offset
