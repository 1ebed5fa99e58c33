"""The pipeline's SparkSession: settings whose effect a micro-batch depends on."""

from __future__ import annotations

import itertools
from typing import Any

from pyspark.sql import functions as F

from streaming.core.settings import Settings
from streaming.job.session import CODEGEN_FACTORY_MODE, spark_conf

_unique = itertools.count()


def generated_sources(spark: Any) -> int:
    """How many Java sources Spark has compiled in this JVM (its codegen metrics)."""
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return int(metrics.METRIC_SOURCE_CODE_SIZE().getCount())


def test_a_tasks_projections_are_interpreted_not_generated(spark: Any) -> None:
    """Generating a projection's source in every task of every micro-batch was ~25% of the
    driver JVM's time at 100 events/s; the pipeline's session interprets projections."""
    assert spark.conf.get(CODEGEN_FACTORY_MODE) == "NO_CODEGEN"
    # A projection no earlier task had, so a cached class cannot hide a generation.
    n = next(_unique)
    before = generated_sources(spark)
    rows = spark.range(5).select((F.col("id") * 7 + n).alias("x")).collect()
    assert [r.x for r in rows] == [i * 7 + n for i in range(5)]
    assert generated_sources(spark) == before


def test_spark_s_code_generation_can_be_asked_for() -> None:
    env = {"LV_DATA_DIR": "/tmp/lv-unused", "LV_CLASS_ARCHIVE": "off",
           "LV_SPARK_CONF_spark__sql__codegen__factoryMode": "FALLBACK"}  # fmt: skip
    assert spark_conf(Settings.from_env(env))[CODEGEN_FACTORY_MODE] == "FALLBACK"
