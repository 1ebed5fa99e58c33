"""What a crash before a query's first batch leaves in its checkpoint
(``liveviews.pipeline.checkpoint``): removed, since Spark refuses to start on it, and only that."""

from __future__ import annotations

from pathlib import Path

import pytest

from liveviews.errors import ConfigurationError
from liveviews.pipeline.checkpoint import check_log, clear_unstarted, log_read


def _write(path: Path, text: str = "v1\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_first_batch_cut_short_leaves_nothing_behind(tmp_path):
    _write(tmp_path / "metadata", '{"id":"q"}')
    _write(tmp_path / "offsets" / ".0.1f2e.tmp")  # the entry's copy, not yet renamed to 0
    _write(tmp_path / "state" / "0" / "0" / "1_ab.changelog")
    _write(tmp_path / "sources" / "0" / "0", "v1\n{}")
    assert clear_unstarted(tmp_path) == ["offsets", "state"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metadata", "sources"]
    assert clear_unstarted(tmp_path) == []


def test_a_started_checkpoint_is_left_as_it_is(tmp_path):
    _write(tmp_path / "offsets" / "0")
    _write(tmp_path / "offsets" / ".1.3c4d.tmp")
    _write(tmp_path / "state" / "0" / "0" / "1_ab.changelog")
    assert clear_unstarted(tmp_path) == []
    assert (tmp_path / "offsets" / ".1.3c4d.tmp").exists()
    assert (tmp_path / "state" / "0" / "0" / "1_ab.changelog").exists()


def test_a_new_checkpoint_is_left_as_it_is(tmp_path):
    assert clear_unstarted(tmp_path / "none") == []
    (tmp_path / "offsets").mkdir()
    assert clear_unstarted(tmp_path) == []
    assert (tmp_path / "offsets").is_dir()


def test_a_first_epoch_cut_short_at_its_commit_leaves_nothing_behind_in_real_time_mode(tmp_path):
    """A driver killed while it wrote the first epoch's commit: Spark drops the offset log
    entry at the next start and would refuse the commit's temporary copy."""
    _write(tmp_path / "metadata", '{"id":"q"}')
    _write(tmp_path / "offsets" / "0")
    _write(tmp_path / "commits" / ".0.4a6a.tmp", "")
    _write(tmp_path / "state" / "0" / "0" / "1.delta")
    assert clear_unstarted(tmp_path) == [], "in micro-batches Spark replays offsets/0"
    assert clear_unstarted(tmp_path, realtime=True) == ["offsets", "commits", "state"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metadata"]


def test_a_committed_epoch_is_left_as_it_is_in_real_time_mode(tmp_path):
    _write(tmp_path / "offsets" / "0")
    _write(tmp_path / "offsets" / "1")
    _write(tmp_path / "commits" / "0")
    _write(tmp_path / "commits" / ".1.5b6c.tmp", "")
    assert clear_unstarted(tmp_path, realtime=True) == []
    assert (tmp_path / "offsets" / "1").exists() and (tmp_path / "commits" / "0").exists()


def _offsets(checkpoint: Path, batch: int, offset: str) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n' + offset + "\n"
    )


def test_a_checkpoint_of_the_other_log_is_refused_with_a_sentence(tmp_path: Path) -> None:
    store, kafka = tmp_path / "store", tmp_path / "kafka"
    _offsets(store, 0, '{"0":"0-0","1":"1732170000000-3"}')
    _offsets(store, 1, '{"0":"1732170000001-0","1":"1732170000000-3"}')
    _offsets(kafka, 3, '{"liveviews.log":{"0":42,"1":0}}')
    assert (log_read(store), log_read(kafka), log_read(tmp_path / "new")) == ("store", "kafka",
                                                                              None)  # fmt: skip
    check_log(store, kafka=False)
    check_log(kafka, kafka=True)
    check_log(tmp_path / "new", kafka=True)
    with pytest.raises(ConfigurationError, match="written reading the store's log") as caught:
        check_log(store, kafka=True)
    assert "Set the log back" in caught.value.message
    with pytest.raises(ConfigurationError, match="written reading Kafka"):
        check_log(kafka, kafka=False)
