#!/usr/bin/env bash
# The demo on the cluster pieces, all on this machine (deploy/Procfile.cluster): a Spark
# standalone master and two workers (deploy/spark/), the pipeline's driver on them, two gateway
# processes behind nginx (deploy/nginx/), the log in Apache Kafka on three brokers (replication
# factor 3; streaming/log/kafka/broker.py), a store cluster of three primaries with a replica
# each (streaming/store/cluster.py) for the views, and Chirp's writer. The page is at
# http://127.0.0.1:${LV_PORT:-8000}/ through nginx; docs/SCALING.md maps each piece to a real
# deployment. Its data is apart from `make run`'s (./data/cluster), so the two never share
# checkpoints. Ctrl-C stops all of it.
#   make run-cluster
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
# Absolute: the executors run in directories of their own and must find the same checkpoints.
LV_DATA_DIR="$(realpath -m "${LV_DATA_DIR:-data/cluster}")"
export LV_DATA_DIR
# A cluster takes longer to form than one server to start, three Kafka brokers longer still.
export LV_WAIT_FOR_STORE="${LV_WAIT_FOR_STORE:-120}"
# The store cluster's six nodes on 7000-7005 (cluster bus on 7006-7011), away from make run's
# embedded store; a write is acknowledged once a replica has it, so a failover loses none.
export LV_EMBEDDED_PORT="${LV_EMBEDDED_PORT:-7000}"
export LV_STORE_ACK_REPLICAS="${LV_STORE_ACK_REPLICAS:-1}"
# Real-Time Mode's JVM source and writer talk to one store server (docs/REALTIME.md): Chirp's
# profiles run in micro-batches on the store cluster.
export LV_REALTIME=off
export LV_PORT="${LV_PORT:-8000}"
export LV_GATEWAY1_PORT="${LV_GATEWAY1_PORT:-8001}"
export LV_GATEWAY2_PORT="${LV_GATEWAY2_PORT:-8002}"
export LV_SPARK_PORT="${LV_SPARK_PORT:-7077}"
# Three brokers on 9092-9094, their controllers on 9095-9097; LV_KAFKA set to a Kafka of your
# own runs none of them.
export LV_KAFKA_PORT="${LV_KAFKA_PORT:-9092}"
export LV_SPARK_UI_PORT="${LV_SPARK_UI_PORT:-8080}"
export SPARK_MASTER="spark://127.0.0.1:$LV_SPARK_PORT"
case "${LV_APP:-demo.chirp:app}" in
  demo.chirp:app) ;;
  *) echo "make run-cluster runs Chirp (LV_APP=demo.chirp:app); run other applications with make run." >&2
     exit 2 ;;
esac
command -v nginx >/dev/null || { echo "make run-cluster needs nginx: apt-get install nginx (scripts/setup.sh does it)." >&2; exit 2; }
python -m liveviews.pipeline --prepare  # Java and the application checked
off=()
if [ -n "${REDIS_URL:-}" ]; then off+=(store=0); fi
if [ -n "${LV_KAFKA:-}" ]; then
  off+=(kafka=0)
else
  LV_KAFKA="127.0.0.1:$LV_KAFKA_PORT,127.0.0.1:$((LV_KAFKA_PORT + 1)),127.0.0.1:$((LV_KAFKA_PORT + 2))"
fi
export LV_KAFKA
formation=()
if [ ${#off[@]} -gt 0 ]; then formation=(-c "$(IFS=,; echo "${off[*]}")"); fi
echo "Chirp through nginx: http://127.0.0.1:$LV_PORT/ (gateways on $LV_GATEWAY1_PORT and $LV_GATEWAY2_PORT; Spark master $SPARK_MASTER, status at http://127.0.0.1:$LV_SPARK_UI_PORT/; the log in Kafka at $LV_KAFKA)"
exec honcho -f deploy/Procfile.cluster start "${formation[@]}"
