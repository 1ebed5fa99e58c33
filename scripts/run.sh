#!/usr/bin/env bash
# Runs the whole system from the Procfile: the embedded store (unless REDIS_URL is set),
# the Spark pipeline and the gateway with the demo. Ctrl-C stops all of it; state stays in
# ./data, so the next run picks up where this one stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
export LV_WAIT_FOR_STORE="${LV_WAIT_FOR_STORE:-30}"
python -m streaming --prepare  # Java and the application checked, the class archive built once
formation=()
if [ -n "${REDIS_URL:-}" ]; then formation=(-c store=0); fi
exec honcho -f Procfile start "${formation[@]}"
