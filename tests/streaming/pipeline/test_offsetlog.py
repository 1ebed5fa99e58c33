"""Where a micro-batch ends in the log, read back from the query's offset log."""

from __future__ import annotations

import pytest

from liveviews.pipeline.offsetlog import BatchEnds, parse


def test_offsets_parse_as_entry_ids_per_partition_leaving_out_unread_ones():
    assert parse('{"0": "1732170000000-3", "1": "0-0", "2": "5-0"}') == {
        0: "1732170000000-3",
        2: "5-0",
    }


def test_ends_are_asked_for_from_a_query_batch_only(spark):
    with pytest.raises(RuntimeError, match="outside an active streaming query"):
        BatchEnds(spark)(0)
