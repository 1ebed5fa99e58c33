#!/usr/bin/env bash
# The whole test suite, against real services: a Redis-compatible server, a local SparkSession.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
.venv/bin/python -m pytest "$@"
