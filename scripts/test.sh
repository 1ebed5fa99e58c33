#!/usr/bin/env bash
# The whole test suite, against real services: a Redis-compatible server, a local SparkSession.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
# The pipeline's JVM class archive, if it is missing: the tests check that Spark maps it.
.venv/bin/python -m liveviews.pipeline.tuning.classarchive || echo "Testing without the class archive." >&2
.venv/bin/python -m pytest "$@"
