"""The declared views ``bench.pipeline`` drains compute what they say: each group's count of
events and the type of its newest one, by the log's key or by the payload's user."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from bench import declared
from tests.bench.test_bench_ceilings import renames


@pytest.mark.parametrize(
    ("by", "want"),
    [
        # The follow is appended under the followee's key, a, by the follower, b.
        ("key", {"a": {"events": 3, "newest": "follow"},
                 "b": {"events": 2, "newest": "tweet_posted"}}),
        ("user", {"a": {"events": 2, "newest": "profile_set"},
                  "b": {"events": 3, "newest": "follow"}}),
    ],
)  # fmt: skip
def test_each_grouping_counts_its_groups_events_and_newest_type(
    spark: Any, by: str, want: dict[str, Any]
) -> None:
    app = declared.app(by)
    out = app.pipelines["declared"].build(renames(spark)).collect()
    assert {r["key"]: orjson.loads(r["value"]) for r in out} == want
    assert {(r["view"], r["row"]) for r in out} == {(declared.VIEW, declared.VIEW)}


def test_an_unknown_grouping_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown grouping"):
        declared.app("tweet")
