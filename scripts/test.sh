#!/usr/bin/env bash
# The whole test suite, against real services: a Redis-compatible server, a local SparkSession.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
# The JVMs of a test run compile with C1 alone: the suite starts many short-lived ones (Spark
# drivers, workers and executors, Kafka brokers) on two cores, where the optimizing compiler
# (C2) took CPU from the run itself. A driver-kill test took 94-108 s and 151-174 s of CPU
# with C1 alone, 131-149 s and 231-261 s without (alternating runs). What runs outside this
# script (`make run`, `make bench`) keeps the JVMs' defaults; an option set already wins.
C1_ONLY="-XX:TieredStopAtLevel=1"
export LV_SPARK_CONF_spark__driver__extraJavaOptions="${LV_SPARK_CONF_spark__driver__extraJavaOptions-$C1_ONLY}"
export LV_SPARK_CONF_spark__executor__extraJavaOptions="${LV_SPARK_CONF_spark__executor__extraJavaOptions-$C1_ONLY}"
export SPARK_DAEMON_JAVA_OPTS="${SPARK_DAEMON_JAVA_OPTS-$C1_ONLY}"
export KAFKA_OPTS="${KAFKA_OPTS-$C1_ONLY}"
# The pipeline's JVM class archive, if it is missing: the tests check that Spark maps it.
.venv/bin/python -m liveviews.pipeline.tuning.classarchive || echo "Testing without the class archive." >&2
.venv/bin/python -m pytest "$@"
