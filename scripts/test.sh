#!/usr/bin/env bash
# The whole test suite, against real services: a Redis-compatible server, a local SparkSession.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
# The pipeline's JVM class archive, if it is missing: the tests check that Spark maps it.
.venv/bin/python -m liveviews.pipeline.tuning.classarchive || echo "Testing without the class archive." >&2
# Two workers (pytest-xdist): the groups they take are in tests/conftest.py. LV_TEST_WORKERS=0
# runs the tests in this process, one after the other.
.venv/bin/python -m pytest -n "${LV_TEST_WORKERS:-2}" --dist loadgroup "$@"
