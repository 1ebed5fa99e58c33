"""The pipeline's own record of its micro-batches (``lv:pipeline:progress``, one entry per
``StreamingQueryProgress``), as the benchmarks read it: one reader, so every benchmark parses
the record the same way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from liveviews.pipeline.progress import PIPELINE_PROGRESS_STREAM


@dataclass(frozen=True)
class Batch:
    """One micro-batch of one query, as the pipeline recorded it when it ended."""

    ended: float
    """When it was recorded, in seconds since the epoch (the entry's id)."""
    query: str
    events: int
    duration_ms: dict[str, float]
    """Where its time went, by Spark's phase (``triggerExecution`` is all of it)."""

    @property
    def started(self) -> float:
        return self.ended - self.duration_ms.get("triggerExecution", 0) / 1000


def batches(client: Any, since: float = 0.0, until: float | None = None) -> list[Batch]:
    """The micro-batches recorded between ``since`` and ``until`` (seconds since the epoch)."""
    top = "+" if until is None else f"{int(until * 1000)}-0"
    entries: Any = client.xrange(PIPELINE_PROGRESS_STREAM, min=f"{int(since * 1000)}-0", max=top)
    return [
        Batch(ended=int(i.split(b"-")[0]) / 1000, query=f[b"query"].decode(),
              events=int(f[b"events"]), duration_ms=orjson.loads(f[b"duration_ms"]))
        for i, f in entries
    ]  # fmt: skip
