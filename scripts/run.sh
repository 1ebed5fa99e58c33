#!/usr/bin/env bash
# Runs the whole system from the Procfile: the embedded store (unless REDIS_URL is set), for an
# application that declares database tables the embedded PostgreSQL (unless DATABASE_URL is
# set) and the CDC process, the Spark pipeline, the gateway and the demo's writer. Ctrl-C stops
# all of it; state stays in ./data, so the next run picks up where this one stopped.
#   make run                          Chirp, at http://localhost:8000/
#   LV_APP=demo.orders:app make run   the shop, live views of a PostgreSQL table
#   LV_APP=demo.board:app make run    a team task board, at http://localhost:8000/board.html
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
export LV_WAIT_FOR_STORE="${LV_WAIT_FOR_STORE:-30}"
python -m liveviews.pipeline --prepare  # Java and the application checked, the class archive built once
tables=$(python -c 'import os; from liveviews import load_app
print(len(load_app(os.environ.get("LV_APP") or "demo.chirp:app").tables))')
off=()
if [ -n "${REDIS_URL:-}" ]; then off+=(store=0); fi
if [ "$tables" = 0 ]; then off+=(postgres=0 cdc=0); elif [ -n "${DATABASE_URL:-}" ]; then off+=(postgres=0); fi
case "${LV_APP:-demo.chirp:app}" in
  demo.chirp:app) ;;
  demo.orders:app)
    # The shop's writer creates its table; the CDC process, which stops for good when a
    # declared table is missing, starts once it exists.
    export LV_BEFORE_CDC="python -m demo.orders --schema"
    echo "The shop's page: http://${LV_HOST:-127.0.0.1}:${LV_PORT:-8000}/orders.html" ;;
  demo.board:app)
    echo "The board's page: http://${LV_HOST:-127.0.0.1}:${LV_PORT:-8000}/board.html" ;;
  *) off+=(demo=0) ;;
esac
formation=()
if [ ${#off[@]} -gt 0 ]; then formation=(-c "$(IFS=,; echo "${off[*]}")"); fi
exec honcho -f Procfile start "${formation[@]}"
