#!/usr/bin/env bash
# Installs everything Liveviews needs on a fresh Debian 12 machine: a virtualenv with the
# Python packages, and the Debian packages the tests use. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
# A JDK rather than a JRE: javac compiles the pipeline's local file system (streaming/pipeline/tuning/localfs.py).
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jdk-headless)
# Maven builds the pipeline's JVM code for Spark's Real-Time Mode (streaming/pipeline/realtime/jvm).
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
[ -x /usr/bin/chromium ] || need_apt+=(chromium)  # the browser tests drive Debian's Chromium
# The gateway failover tests and bench.gateways run nginx in front of the gateways.
command -v nginx >/dev/null 2>&1 || need_apt+=(nginx)
# The embedded store allocates with jemalloc when the machine has it (streaming/store/embedded.py).
compgen -G '/usr/lib/*-linux-gnu/libjemalloc.so.2' >/dev/null || need_apt+=(libjemalloc2)
# The network fault tests cut and thin the store's traffic with nftables inside a network
# namespace (tests/faults/netns.py); the clock tests move a gateway's clock with libfaketime.
command -v nft >/dev/null 2>&1 || need_apt+=(nftables)
compgen -G '/usr/lib/*-linux-gnu/faketime/libfaketime.so.1' >/dev/null || need_apt+=(libfaketime)
# Change data capture runs an embedded PostgreSQL (streaming/cdc/embedded.py); Debian keeps its
# programs in /usr/lib/postgresql/<version>/bin, off PATH.
command -v initdb >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null \
  || need_apt+=(postgresql)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
  else
    echo "Liveviews needs: ${need_apt[*]}. Install them (apt-get install ${need_apt[*]}) and run again." >&2
    exit 1
  fi
fi

node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ]; then
  echo "The JavaScript client's tests need Node 20 or newer; this machine has $(node --version 2>/dev/null || echo none)." >&2
  echo "Install it (https://nodejs.org or your distribution's nodejs 20 package) and run again." >&2
  exit 1
fi

# The JavaScript client's test tools (the TypeScript compiler, React), pinned by its lock file.
(cd client-js && npm ci --no-audit --no-fund --loglevel=error)
# The OpenID Connect provider the gateway's token tests start (oidc-provider, tests/support/oidc.py).
(cd tests/support/oidc && npm ci --no-audit --no-fund --loglevel=error)

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -e '.[dev]'

command -v javac >/dev/null 2>&1 || echo "No javac (a JDK's compiler): the pipeline writes checkpoint files through Hadoop's slower local file system." >&2

# The Real-Time Mode source and writer (streaming/pipeline/realtime/jar.py): built once per pyspark
# installation, Jedis fetched from Maven Central the first time.
.venv/bin/python -m liveviews.pipeline.realtime.jar >/dev/null

# Apache Kafka's broker and Spark's Kafka source (streaming/log/kafka/broker.py): their jars
# fetched from Maven Central once, for the tests and benchmarks that run the log on Kafka.
.venv/bin/python -m liveviews.log.kafka.broker --fetch-only >/dev/null

# The JVM class archive the pipeline starts from (streaming/pipeline/tuning/classarchive.py): built once per
# pyspark installation and JDK, in ~1 min. Without it everything works; the pipeline starts ~4-5 s slower.
PYSPARK_PYTHON="$PWD/.venv/bin/python" .venv/bin/python -m liveviews.pipeline.tuning.classarchive \
  || echo "Continuing without the class archive." >&2
