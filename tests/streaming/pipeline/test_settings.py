"""The pipeline's settings from the environment: Spark settings passed through by name."""

from __future__ import annotations

import dataclasses
import os

import pytest

from demo.chirp import app
from liveviews.errors import ConfigurationError
from liveviews.pipeline.realtime import slots
from liveviews.pipeline.session import DRIVER_JIT_OPTIONS, spark_conf
from liveviews.pipeline.settings import Settings


def settings(**env: str) -> Settings:
    return Settings.from_env({"LV_DATA_DIR": "/tmp/lv-unused", "LV_CLASS_ARCHIVE": "off", **env})


def test_a_spark_setting_in_capitals_is_lowercased() -> None:
    conf = settings(LV_SPARK_CONF_SPARK__EXECUTOR__MEMORY="4g").spark_conf
    assert conf == {"spark.executor.memory": "4g"}


def test_a_camel_case_spark_setting_keeps_its_case() -> None:
    given = settings(LV_SPARK_CONF_spark__eventLog__enabled="true")
    assert given.spark_conf == {"spark.eventLog.enabled": "true"}
    assert spark_conf(given)["spark.eventLog.enabled"] == "true"


def test_a_spark_setting_overrides_the_pipeline_default() -> None:
    conf = spark_conf(settings(LV_SPARK_CONF_SPARK__SQL__SHUFFLE__PARTITIONS="1"))
    assert conf["spark.sql.shuffle.partitions"] == "1"


def test_the_users_jvm_options_follow_the_pipelines_own() -> None:
    """Each user option comes last, so the JVM takes it, and the pipeline's stay in place."""
    env = {"LV_SPARK_CONF_spark__driver__extraJavaOptions": "-XX:Tier4InvocationThreshold=5000"}
    options = spark_conf(settings(**env))["spark.driver.extraJavaOptions"].split()
    assert options == [
        "-Duser.timezone=UTC",
        *DRIVER_JIT_OPTIONS,
        "-XX:Tier4InvocationThreshold=5000",
    ]


def test_a_whole_number_setting_takes_ascii_digits_only() -> None:
    import pytest

    from liveviews.errors import ConfigurationError

    assert Settings.from_env({"LV_LOG_PARTITIONS": "8"}).log_partitions == 8
    for raw in ("٣", "²", "８"):  # int() reads the first and last as 3 and 8
        with pytest.raises(ConfigurationError, match="LV_LOG_PARTITIONS must be a whole number"):
            Settings.from_env({"LV_LOG_PARTITIONS": raw})


def test_a_local_master_has_twice_as_many_task_slots_as_cores(monkeypatch) -> None:
    """So that a rebuild's long tasks cannot hold every slot (docs/performance/rebuild.md)."""
    monkeypatch.setattr("os.cpu_count", lambda: 3)
    assert settings().spark_master == "local[6]"
    assert settings(SPARK_MASTER="spark://m:7077").spark_master == "spark://m:7077"


def test_a_version_being_built_reads_short_micro_batches_unless_told_otherwise() -> None:
    assert settings().rebuild_max_events_per_batch == 10_000
    assert settings(LV_REBUILD_MAX_EVENTS_PER_BATCH="500").rebuild_max_events_per_batch == 500


def test_a_version_being_built_runs_nicer_apart_on_a_local_master_only(monkeypatch) -> None:
    import pytest

    from liveviews.errors import ConfigurationError
    from liveviews.pipeline.builder import builds_apart

    environment = Settings.from_env()
    # By default the lowest priority, in the kernel's idle class.
    assert environment.rebuild_niceness == 19 and environment.rebuild_idle
    assert builds_apart(environment)
    assert settings(LV_REBUILD_NICENESS=" Idle ") == settings()
    assert settings(LV_REBUILD_NICENESS="10").rebuild_niceness == 10
    assert not settings(LV_REBUILD_NICENESS="19").rebuild_idle
    # Settings a program made for itself: the child, which reads the environment, would differ.
    assert not builds_apart(settings(LV_DATA_DIR="/tmp/lv-elsewhere"))
    # A second application on a cluster would wait for executors the serving one holds.
    monkeypatch.setenv("SPARK_MASTER", "spark://m:7077")
    assert not builds_apart(Settings.from_env())
    monkeypatch.setenv("SPARK_MASTER", "local[2]")
    monkeypatch.setenv("LV_REBUILD_NICENESS", "0")  # built in the pipeline process
    assert not builds_apart(Settings.from_env())
    monkeypatch.setenv("LV_REBUILD_NICENESS", "idle")
    assert builds_apart(Settings.from_env())
    monkeypatch.delenv("LV_REBUILD_NICENESS")
    assert builds_apart(Settings.from_env())
    with pytest.raises(ConfigurationError, match="LV_REBUILD_NICENESS=20: write a niceness"):
        settings(LV_REBUILD_NICENESS="20")
    with pytest.raises(ConfigurationError, match="LV_REBUILD_NICENESS=slow: write a niceness"):
        settings(LV_REBUILD_NICENESS="slow")


def test_pipelines_on_a_kafka_log_run_in_real_time_mode_with_a_reader_per_partition() -> None:
    on = settings(LV_REALTIME="on")
    on_kafka = dataclasses.replace(on, kafka="localhost:9092")
    # A copy: ``chosen`` changes the application in place, and Chirp's is the suite's.
    chirp = dataclasses.replace(app, pipelines=dict(app.pipelines))
    assert slots.chosen(on_kafka, chirp).pipelines["profiles"].realtime
    profiles = chirp.pipelines["profiles"]  # one state partition
    assert slots.needed(profiles, on, 2) == 1 + 1  # one reader follows every partition
    assert slots.needed(profiles, on_kafka, 2) == on.log_partitions + 1
    # The master is sized so that the micro-batch queries (entities, activity), reading each
    # partition of the topic with a task, can never take the slots an epoch needs.
    cores = 2 * (os.cpu_count() or 1)
    batches = sum(max(on_kafka.log_partitions, p.partitions or on.shuffle_partitions)
                  for p in chirp.pipelines.values() if not p.realtime)  # fmt: skip
    assert batches == 2 * on.log_partitions
    kafka_master = f"local[{max(cores, batches) + on.log_partitions + 1}]"
    assert slots.sized(on_kafka, chirp).spark_master == kafka_master
    assert slots.sized(on, chirp).spark_master == f"local[{cores + 1 + 1}]"
    off = dataclasses.replace(on_kafka, realtime=False)
    assert not any(p.realtime for p in slots.chosen(off, chirp).pipelines.values())


def test_lv_kafka_names_the_log_s_brokers_and_refuses_a_store_log_retention() -> None:
    assert settings(LV_KAFKA="127.0.0.1:9092,kafka-2:9093").kafka == "127.0.0.1:9092,kafka-2:9093"
    assert settings().kafka is None
    with pytest.raises(ConfigurationError, match="host:port"):
        settings(LV_KAFKA="kafka-1")
    with pytest.raises(ConfigurationError, match="unset LV_LOG_RETENTION"):
        settings(LV_KAFKA="kafka-1:9092", LV_LOG_RETENTION="30d")


def test_lv_kafka_without_its_client_installed_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "confluent_kafka" else real(name, *a))  # fmt: skip
    with pytest.raises(ConfigurationError, match=r"pip install 'liveviews\[kafka\]'"):
        settings(LV_KAFKA="kafka-1:9092")
