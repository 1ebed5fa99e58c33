"""``python -m bench.rebuild``'s command line: what it refuses before it starts anything."""

from __future__ import annotations

import pytest

from bench import rebuild


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--log", "redis,postgres"], "give redis, kafka or both"),
        (["--log", "kafka,kafka"], "give redis, kafka or both"),
        (["--log", ","], "give redis, kafka or both"),
        (["--pipelines", "profiles,likes"], "unknown pipeline likes"),
    ],
)
def test_a_run_that_cannot_be_measured_is_refused_with_a_sentence(
    argv: list[str], said: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    measured: list[rebuild.Plan] = []
    monkeypatch.setattr(rebuild, "run", lambda quick, plan, name: measured.append(plan))
    monkeypatch.setattr("sys.argv", ["bench.rebuild", *argv])
    with pytest.raises(SystemExit) as exit_:
        rebuild.main()
    assert exit_.value.code == 2
    assert said in capsys.readouterr().err
    assert measured == []


def test_both_logs_are_measured_in_one_run_with_the_same_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    measured: list[tuple[rebuild.Plan, str]] = []
    monkeypatch.setattr(rebuild, "run", lambda quick, plan, name: measured.append((plan, name)))
    monkeypatch.setattr("sys.argv", ["bench.rebuild", "--log", "redis,kafka", "--backlog", "500",
                                     "--env", "LV_REBUILD_NICENESS=0"])  # fmt: skip
    assert rebuild.main() == 0
    assert [(p.log, name) for p, name in measured] == [("redis", "rebuild"),
                                                       ("kafka", "rebuild_kafka")]  # fmt: skip
    redis_plan, kafka_plan = (p for p, _ in measured)
    assert redis_plan.backlog == kafka_plan.backlog == 500
    assert redis_plan.env == kafka_plan.env == {"LV_REBUILD_GRACE_SECONDS": "60",
                                                "LV_REBUILD_NICENESS": "0"}  # fmt: skip
    assert redis_plan.env is not kafka_plan.env


def test_a_name_names_each_logs_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--name`` with both logs: the store's result under the name, Kafka's with ``_kafka``
    after it, as the default names are ``rebuild`` and ``rebuild_kafka``."""
    measured: list[str] = []
    monkeypatch.setattr(rebuild, "run", lambda quick, plan, name: measured.append(name))
    monkeypatch.setattr("sys.argv", ["bench.rebuild", "--log", "redis,kafka", "--name", "mine"])
    assert rebuild.main() == 0
    assert measured == ["mine", "mine_kafka"]
