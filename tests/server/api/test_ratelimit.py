"""The publish rate per subject: token buckets that refill, take a batch whole, and are kept
for a bounded number of subjects."""

from __future__ import annotations

from liveviews.gateway.publish.ratelimit import PublishRate, retry_after


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_takes_a_burst_then_refills_at_the_rate() -> None:
    clock = Clock()
    rate = PublishRate(10, 50, clock=clock)
    assert rate.take("alice", 50) == 0
    assert rate.take("alice", 1) == 0.1
    clock.now += 0.5
    assert rate.take("alice", 5) == 0
    assert rate.take("alice", 1) > 0
    clock.now += 3600
    assert rate.take("alice", 50) == 0  # never more than the burst
    assert rate.take("alice", 1) > 0


def test_a_refused_batch_takes_nothing_and_says_how_long_to_wait() -> None:
    clock = Clock()
    rate = PublishRate(1, 50, clock=clock)
    assert rate.take("alice", 30) == 0
    assert rate.take("alice", 30) == 10  # 20 left, 10 more to wait for
    assert rate.take("alice", 20) == 0  # the refusal took none of them
    assert rate.take("bob", 50) == 0  # each subject has its own


def test_the_buckets_kept_are_bounded_however_many_subjects_publish() -> None:
    clock = Clock()
    rate = PublishRate(1, 10, max_subjects=100, clock=clock)
    for i in range(10_000):
        rate.take(f"user{i}", 1)
    assert len(rate.buckets) == 100
    assert list(rate.buckets)[-1] == "user9999"  # the least recently active are forgotten


def test_no_rate_is_no_limit() -> None:
    rate = PublishRate(0, 10)
    assert all(rate.take("alice", 1000) == 0 for _ in range(100))
    assert not rate.buckets


def test_retry_after_is_whole_seconds_rounded_up() -> None:
    assert [retry_after(s) for s in (0.001, 0.5, 1.0, 1.2, 9.99)] == [1, 1, 1, 2, 10]
