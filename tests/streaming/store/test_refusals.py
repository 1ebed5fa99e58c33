"""Which store answers make a retried write wait (``retrying(..., refusals=True)``): a store
refusing writes for a while, never a write that is wrong."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis
from redis._parsers.base import BaseParser

from liveviews.store.client import refused_for_now, retrying


@pytest.mark.parametrize(
    "answer, for_now",
    [
        ("NOREPLICAS Not enough good replicas to write.", True),
        ("Command # 1 (EVALSHA 14f5 112 lv:{c0}:changes) of pipeline caused error: "
         "NOREPLICAS Not enough good replicas to write. script: on @user_script:53.", True),
        ("MISCONF Errors writing to the AOF file: No space left on device", True),
        ("WRONGTYPE Operation against a key holding the wrong kind of value", False),
        ("ERR Error running script: user_script:1: NOREPLICAS in a message", False),
        ("NOSCRIPT No matching script.", False),
    ],
)  # fmt: skip
def test_a_refusal_for_now_is_told_from_an_error(answer: str, for_now: bool) -> None:
    assert refused_for_now(redis.ResponseError(answer)) is for_now


def test_a_store_out_of_memory_refuses_for_now_as_redis_py_raises_it() -> None:
    # redis-py's own parsing of the store's answer: the OOM code becomes the class.
    error = BaseParser.parse_error("OOM command not allowed when used memory > 'maxmemory'.")
    assert isinstance(error, redis.exceptions.OutOfMemoryError)
    assert refused_for_now(error)


def refused_once() -> Callable[[], str]:
    answers = iter([redis.ResponseError("NOREPLICAS Not enough good replicas to write.")])

    def write() -> str:
        for exc in answers:
            raise exc
        return "written"

    return write


def test_retrying_waits_out_a_refusal_only_when_asked() -> None:
    assert retrying(refused_once(), redis.Redis(), "writing", refusals=True) == "written"
    with pytest.raises(redis.ResponseError):
        retrying(refused_once(), redis.Redis(), "writing")
