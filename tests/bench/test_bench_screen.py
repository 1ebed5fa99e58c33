"""``bench.screen`` times the screen over what each log's source hands it: the same events, all
passing, through both forms, with the collector on and paused."""

from __future__ import annotations

from bench import screen


def test_both_forms_pass_every_event_and_are_timed(store_url: str) -> None:
    figures = screen.measure(store_url, 500, rounds=1)
    for form in ("store", "kafka"):
        for state in ("on", "paused"):
            assert figures[f"{form}_collector_{state}_us"] > 0
        assert figures[f"{form}_paused_over_on"] > 0


def test_the_kafka_batch_holds_the_events_records() -> None:
    evs = screen.events(3)
    batch = screen.kafka_batch(evs)
    assert batch.column("key").to_pylist() == [e.key.encode() for e in evs]
    assert batch.column("type").to_pylist() == [e.type.encode() for e in evs]
    assert batch.column("offset").to_pylist() == ["1", "2", "3"]
