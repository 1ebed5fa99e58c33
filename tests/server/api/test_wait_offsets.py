"""A wait's offsets, as both logs answer them: Redis Streams entry ids and Kafka offsets."""

from __future__ import annotations

import pytest

from liveviews.gateway.api.sessions import wanted_offsets
from liveviews.gateway.errors import BadRequest


def test_the_newest_position_of_each_partition_is_wanted_in_either_form() -> None:
    redis = [
        {"partition": 0, "id": "17-2"},
        {"partition": 0, "id": "9-5"},
        {"partition": 1, "id": "3-0"},
    ]
    assert wanted_offsets(redis) == {"0": (17, 2), "1": (3, 0)}
    # A Kafka position counts the partition's events up to and including the one it names.
    kafka = [
        {"partition": 0, "id": "41"},
        {"partition": 0, "id": "4096"},
        {"partition": 3, "id": "1"},
    ]
    assert wanted_offsets(kafka) == {"0": (4096, 0), "3": (1, 0)}


@pytest.mark.parametrize("bad", ["x", "1-", "-1", "1-2-3", "", "1" * 21, " 1"])
def test_a_malformed_position_is_refused_with_a_sentence(bad: str) -> None:
    with pytest.raises(BadRequest) as caught:
        wanted_offsets([{"partition": 0, "id": bad}], "invalid_offsets")
    assert caught.value.code == "invalid_offsets"
    assert '"<ms>-<seq>" or "<n>"' in caught.value.message
