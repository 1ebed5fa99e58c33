"""The pipeline's SparkSession: settings whose effect a micro-batch depends on."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from liveviews.pipeline.session import CODEGEN_FACTORY_MODE

UNIQUE = 7_919_337
"""In a projection no other test has, so that a class Spark compiled before cannot hide a
generation."""


def generated_sources(spark: Any) -> int:
    """How many Java sources Spark has compiled in this JVM (its codegen metrics)."""
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return int(metrics.METRIC_SOURCE_CODE_SIZE().getCount())


def test_a_tasks_projections_are_interpreted_not_generated(spark: Any) -> None:
    """Generating a projection's source in every task of every micro-batch was ~25% of the
    driver JVM's time at 100 events/s; the pipeline's session interprets projections."""
    assert spark.conf.get(CODEGEN_FACTORY_MODE) == "NO_CODEGEN"
    before = generated_sources(spark)
    rows = spark.range(5).select((F.col("id") * 7 + UNIQUE).alias("x")).collect()
    assert [r.x for r in rows] == [i * 7 + UNIQUE for i in range(5)]
    assert generated_sources(spark) == before
