"""A query's checkpoint before its first batch: what a crash can leave there.

Spark starts a query afresh when its offset log holds no batch, and then refuses a checkpoint
whose ``offsets``, ``commits`` (or, in micro-batches, ``state``) directory is not empty
(``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``), at every start after. A driver killed while it
writes the first offset log entry leaves such a file: the entry's temporary copy. In Real-Time
Mode the entry is written when the first epoch ends, so the window is that whole epoch, and the
state store has files by then too. None of it is committed (a batch is committed after its
offset log entry), so it is removed and the query starts from the beginning, as it would have.

In Real-Time Mode Spark itself drops the offset log entries past the last commit when a query
starts ("Deleting extra entries in offset log to sync up with commit log"), and then starts a
checkpoint with no commit at batch 0: there, a driver killed as it wrote the first epoch's
commit leaves an offset log entry, which Spark removes, and the commit's temporary copy, which
it refuses. So in that mode a checkpoint is unstarted until its first commit.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import orjson

from liveviews.errors import ConfigurationError

log = logging.getLogger("liveviews.pipeline")

UNCOMMITTED = ("offsets", "commits", "state")
"""The directories a first batch writes, all of them meaningless without an offset log entry."""


def has_batch(log: Path) -> bool:
    """Whether an offset or commit log holds an entry: a file named by its batch id."""
    return log.is_dir() and any(p.name.isdigit() for p in log.iterdir())


def clear_unstarted(checkpoint: Path, realtime: bool = False) -> list[str]:
    """Remove what a first batch that never wrote its offset log entry (``realtime``: its
    commit) left in ``checkpoint``; the names of the directories removed (none for a new or a
    started checkpoint)."""
    if has_batch(checkpoint / ("commits" if realtime else "offsets")):
        return []
    removed = [name for name in UNCOMMITTED if (checkpoint / name).exists()]
    if not any(any((checkpoint / name).rglob("*")) for name in removed):
        return []
    for name in removed:
        shutil.rmtree(checkpoint / name)
    log.warning(
        "checkpoint %s: its first batch did not finish before the last stop; removed what it "
        "left (%s), and the query starts from the beginning",
        checkpoint, ", ".join(removed),
    )  # fmt: skip
    return removed


def log_read(checkpoint: Path) -> str | None:
    """Which log the query of ``checkpoint`` read: ``kafka`` (Spark's Kafka source writes its
    offsets as ``{"<topic>": {"<partition>": <offset>}}``), ``store`` (a partition's entry id
    per partition), or None when no batch recorded its offsets."""
    offsets = checkpoint / "offsets"
    batches = [p for p in offsets.iterdir() if p.name.isdigit()] if offsets.is_dir() else []
    if not batches:
        return None
    last = max(batches, key=lambda p: int(p.name))
    # "v1", the batch's metadata, then one line per source: its offset as JSON.
    for line in last.read_text().splitlines()[2:]:
        try:
            offset = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(offset, dict) and offset:
            return "kafka" if any(isinstance(v, dict) for v in offset.values()) else "store"
    return None


def check_log(checkpoint: Path, kafka: bool) -> None:
    """Refuses a checkpoint written by a query of the other log, which Spark would fail to
    read with a trace: an offset of one log means nothing in the other."""
    read = log_read(checkpoint)
    if read is None or (read == "kafka") == kafka:
        return
    now, then = ("Kafka (LV_KAFKA)", "the store's log") if kafka else ("the store's log",
                                                                     "Kafka")  # fmt: skip
    raise ConfigurationError(
        f"the checkpoint {checkpoint} was written reading {then}, and the log is now "
        f"{now}: its offsets, and the views' frontiers, mean nothing there. Set the log back, "
        "or start the views afresh from the new log: an empty store and no checkpoints."
    )
