#!/usr/bin/env bash
# The fault suite at any size: crash the stream processor, crash the gateway, restart the store,
# freeze each process, fill a disk or the store's memory, delay, thin and cut the store's
# network, move the gateway's clock, kill Kafka brokers and fill a Kafka node's disk under load.
#   scripts/faults.sh                     the CI size (3 kills; the same tests `make test` runs)
#   KILLS=50 scripts/faults.sh            the long run (make faults KILLS=50)
#   KILLS=10 WRITE_SECONDS=300 SEED=7 scripts/faults.sh -k pipeline
# KILLS: Spark driver kills, gateway restarts, gateway kills behind nginx, store restarts, Kafka
# broker kills and change data capture kills (without KILLS: 3, and 5 for change data capture);
# WRITE_SECONDS: least seconds of writes in the pipeline run; SEED: the random moments. Extra
# arguments go to pytest.
# Each test prints a "FAULT FIGURES {...}" line; they are also appended to $LV_FAULT_REPORT
# (default test-artifacts/faults.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
export LV_FAULT_KILLS="${KILLS:-${LV_FAULT_KILLS:-3}}"
export LV_FAULT_SECONDS="${WRITE_SECONDS:-${LV_FAULT_SECONDS:-0}}"
export LV_CDC_KILLS="${KILLS:-${LV_CDC_KILLS:-5}}"
export LV_FAULT_STALL_S="${STALL:-${LV_FAULT_STALL_S:-0}}"
export LV_FAULT_SEED="${SEED:-${LV_FAULT_SEED:-1}}"
mkdir -p test-artifacts
export LV_FAULT_REPORT="${LV_FAULT_REPORT:-$PWD/test-artifacts/faults.jsonl}"
echo "fault suite: kills=$LV_FAULT_KILLS seconds=$LV_FAULT_SECONDS stall=$LV_FAULT_STALL_S seed=$LV_FAULT_SEED"
start=$(date +%s)
.venv/bin/python -m pytest -s -q -p no:cacheprovider \
  tests/faults/test_pipeline_kills.py tests/faults/test_gateway_kills.py \
  tests/faults/test_gateway_failover.py \
  tests/faults/test_store_restart.py tests/faults/test_store_durability.py \
  tests/faults/test_stalls.py tests/faults/test_disk_full.py tests/faults/test_memory_full.py \
  tests/faults/test_network.py tests/faults/test_clock_jumps.py \
  tests/faults/test_kafka_broker_kills.py tests/faults/test_kafka_disk_full.py \
  tests/cdc/test_crash.py "$@"
echo "fault suite took $(( $(date +%s) - start )) s; figures in $LV_FAULT_REPORT"
