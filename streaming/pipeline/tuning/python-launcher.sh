#!/bin/bash
# The interpreter Spark starts for the pipeline's Python processes in local mode
# (streaming/pipeline/tuning/pythonlauncher.py says why). Runs $LV_LAUNCHER_PYTHON with the arguments Spark
# gives, and with the PYTHONPATH entries named in $LV_LAUNCHER_DROP (':'-separated) left out.
set -f  # entries are paths, never patterns
drop=":${LV_LAUNCHER_DROP-}:"
kept=""
IFS=:
for entry in ${PYTHONPATH-}; do
    case "$drop" in
        *":$entry:"*) ;;
        *) kept="${kept:+$kept:}$entry" ;;
    esac
done
unset IFS
export PYTHONPATH="$kept"
exec "${LV_LAUNCHER_PYTHON:?is not set; it names the Python interpreter to run (streaming/pipeline/tuning/pythonlauncher.py)}" "$@"
