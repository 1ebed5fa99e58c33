"""Apache Kafka brokers run for you: Kafka's own jars from Maven Central, in KRaft mode.

Nothing of Kafka is rewritten or stood in for: ``jvm/pom.xml`` names Apache Kafka's broker
(``kafka_2.13``) and Maven copies it with what it needs at run time into
``~/.cache/liveviews/kafka-<key>/`` (the key is the pom's digest), once per machine;
``scripts/setup.sh`` fetches it. ``KafkaCluster`` then runs one or more nodes of one cluster,
each both broker and KRaft controller (the controllers' quorum is every node), on 127.0.0.1:
one node for the test suite, three with replication factor 3 and ``min.insync.replicas`` 2 for
a cluster on one machine, so that an append acknowledged with ``acks=all`` survives losing any
one of them. A deployment runs its own Kafka and gives its address instead. ``KAFKA_OPTS``
adds JVM options to each node's, after its own, as it does in Kafka's start scripts.

    python -m liveviews.log.kafka.broker [--nodes 3] [--data DIR]

runs such a cluster in the foreground until interrupted.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import TracebackType

from liveviews.cache import cache_dir
from liveviews.errors import LiveviewsError
from liveviews.store.embedded import free_port

FETCH_TIMEOUT_S = 600
MAIN_CLASS = "kafka.Kafka"
FORMAT_CLASS = "kafka.tools.StorageTool"
HEAP = "512m"
"""Each node's Java heap: Kafka's own start script gives a broker 1 GiB; a node of the test
suite's cluster holds a few small topics on a machine shared with Spark."""
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
RESTART_DELAY_MAX_S = 10.0
RESTART_RESET_S = 60.0
"""A node that ran this long before it exited is started again at once (``keep_running``)."""


class KafkaUnavailable(LiveviewsError):
    """Kafka's jars cannot be fetched, or a node cannot be started; the message says why."""

    code = "kafka_unavailable"


BROKER_POM = "jvm/pom.xml"
"""Kafka's broker."""
SPARK_POM = "jvm/spark/pom.xml"
"""Spark's Kafka source, for pipelines that read a Kafka log."""
_EXPECTED = {BROKER_POM: "kafka_*.jar", SPARK_POM: "spark-sql-kafka-*.jar"}


def _pom(name: str) -> bytes:
    return resources.files("liveviews.log.kafka").joinpath(name).read_bytes()


def libs_path(pom: str = BROKER_POM) -> Path:
    """``~/.cache/liveviews/kafka-<key>``: the folder of the jars ``pom`` names (its key the
    pom's digest)."""
    return cache_dir() / f"kafka-{hashlib.sha256(_pom(pom)).hexdigest()[:12]}"


def ensure_kafka(pom: str = BROKER_POM) -> Path:
    """The folder of the jars ``pom`` names (Kafka's broker by default), fetching them with
    Maven first when missing."""
    target = libs_path(pom)
    if (target / ".complete").is_file():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaUnavailable(
            "Kafka's jars are fetched from Maven Central with Maven, and this machine has no "
            "`mvn`. Install it (Debian: apt-get install maven), or give the address of a "
            "running Kafka instead of starting one."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".kafka-", dir=target.parent) as tmp:
        work = Path(tmp)
        (work / "pom.xml").write_bytes(_pom(pom))
        libs = work / "libs"
        done = subprocess.run(
            [mvn, "-q", "-B", "-f", str(work / "pom.xml"), f"-Dkafka.libs={libs}", "package"],
            capture_output=True, text=True, timeout=FETCH_TIMEOUT_S,
        )  # fmt: skip
        if done.returncode != 0 or not any(libs.glob(_EXPECTED[pom])):
            said = (done.stdout + done.stderr).strip()[-2000:]
            raise KafkaUnavailable(f"fetching Kafka's jars with Maven failed:\n{said}")
        (libs / ".complete").touch()
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(target)  # an earlier fetch cut short
        os.replace(libs, target)  # one rename: a concurrent start sees all of it or nothing
    return target


def java() -> str:
    """The ``java`` that runs the nodes: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise KafkaUnavailable(
            "Kafka runs on Java, and this machine has none: install Java 17 or later "
            "(Debian: apt-get install openjdk-17-jre-headless), or set JAVA_HOME."
        )
    return found


@dataclass
class Node:
    """One node of a ``KafkaCluster``: broker and KRaft controller in one process."""

    node_id: int
    port: int
    controller_port: int
    folder: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.folder / "server.log"


class KafkaCluster:
    """``nodes`` Kafka nodes of one cluster, on 127.0.0.1, data under ``data_dir``:
    ``with KafkaCluster(dir) as bootstrap: ...`` (the ``bootstrap.servers`` to give clients).

    Data survive a stop: started again on the same folder, the nodes keep their topics (their
    ports are kept in the folder too)."""

    def __init__(
        self, data_dir: Path, nodes: int = 1, heap: str = HEAP, port: int | None = None
    ) -> None:
        """``port``: node ``i`` (from 1) listens on ``port + i - 1`` and its controller on
        ``port + nodes + i - 1``; None: free ports. A folder's own ports win either way."""
        if nodes < 1:
            raise ValueError("a Kafka cluster has at least one node")
        self.data_dir = Path(data_dir)
        self.heap = heap
        self.port = port
        self.count = nodes
        self.nodes = [self._node(i + 1) for i in range(nodes)]

    def _node(self, node_id: int) -> Node:
        folder = self.data_dir / f"node-{node_id}"
        ports = folder / "ports"
        if ports.is_file():
            port, controller = (int(p) for p in ports.read_text().split())
        elif self.port is not None:
            port, controller = self.port + node_id - 1, self.port + self.count + node_id - 1
        else:
            port, controller = free_port(), free_port()
        return Node(node_id, port, controller, folder)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    @property
    def replication(self) -> int:
        """The replication factor of every topic: 3, or every node of a smaller cluster."""
        return min(3, len(self.nodes))

    def settings(self, node: Node) -> dict[str, str]:
        """``server.properties`` of ``node``: acknowledged appends (``acks=all``) are on
        ``min.insync.replicas`` nodes, two of three, so losing one node loses none of them."""
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        insync = str(min(2, self.replication))
        return {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{node.address},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{node.address}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.folder / "data"),
            "default.replication.factor": str(self.replication),
            "min.insync.replicas": insync,
            "offsets.topic.replication.factor": str(self.replication),
            "transaction.state.log.replication.factor": str(self.replication),
            "transaction.state.log.min.isr": insync,
            # A topic is created on purpose, with its partitions (a typo must not make one).
            "auto.create.topics.enable": "false",
            "group.initial.rebalance.delay.ms": "0",
            # Never elect a replica that may lack acknowledged appends.
            "unclean.leader.election.enable": "false",
            # A node that died is fenced, and leaves the replicas in sync, within ~3 s rather than
            # Kafka's 9-30 s: until then every acks=all append waits for it.
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500",
            "replica.lag.time.max.ms": "5000",
        }

    def _write_config(self, node: Node) -> Path:
        node.folder.mkdir(parents=True, exist_ok=True)
        (node.folder / "ports").write_text(f"{node.port} {node.controller_port}\n")
        config = node.folder / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.settings(node).items()))
        (node.folder / "log4j2.properties").write_text(
            "status = warn\n"
            "appender.file.type = File\n"
            "appender.file.name = file\n"
            f"appender.file.fileName = {node.log_file}\n"
            "appender.file.layout.type = PatternLayout\n"
            "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = INFO\n"
            "rootLogger.appenderRef.file.ref = file\n"
        )
        return config

    def _cluster_id(self) -> str:
        """One id for every node of the cluster, made once and kept with its data."""
        path = self.data_dir / "cluster.id"
        if not path.is_file():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            raw = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
            path.write_text(raw + "\n")
        return path.read_text().strip()

    def _java(self, node: Node, libs: Path, main: list[str]) -> list[str]:
        return [
            java(), f"-Xms{self.heap}", f"-Xmx{self.heap}", "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={node.folder / 'log4j2.properties'}",
            *shlex.split(os.environ.get("KAFKA_OPTS", "")), "-cp", f"{libs}/*", *main,
        ]  # fmt: skip

    def start(self, timeout: float = READY_TIMEOUT_S) -> str:
        """Start every node and wait until each serves as a broker; the bootstrap servers."""
        for node in self.nodes:
            self.start_node(node.node_id, wait=False)
        self.wait_ready(timeout)
        return self.bootstrap

    def start_node(self, node_id: int, wait: bool = True) -> None:
        """Start node ``node_id`` (one that was stopped, or the first time: its storage is
        formatted then, with the cluster's id)."""
        node = self.nodes[node_id - 1]
        if node.process is not None and node.process.poll() is None:
            return
        libs = ensure_kafka()
        config = self._write_config(node)
        if not (node.folder / "data" / "meta.properties").is_file():
            self._format(node, libs, config)
        # It logs to its file (log4j2.properties); what the JVM itself says goes beside it.
        with open(node.folder / "stderr.log", "ab") as stderr:
            node.process = subprocess.Popen(
                self._java(node, libs, [MAIN_CLASS, str(config)]),
                stdout=subprocess.DEVNULL, stderr=stderr,
            )  # fmt: skip
        if wait:
            self.wait_ready(READY_TIMEOUT_S)

    def _format(self, node: Node, libs: Path, config: Path) -> None:
        formatted = subprocess.run(
            # One argument with its value: an id may begin with "-" (base64url), which would
            # be read as an option of its own.
            self._java(node, libs, [FORMAT_CLASS, "format", f"--cluster-id={self._cluster_id()}",
                                    "-c", str(config)]),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if formatted.returncode != 0:
            raise KafkaUnavailable(
                f"formatting Kafka node {node.node_id}'s storage failed: "
                f"{(formatted.stdout + formatted.stderr).strip()[-1000:]}"
            )

    def stop_node(self, node_id: int, kill: bool = False) -> None:
        """Stop node ``node_id``: shut down in order, or ``kill``ed at once (SIGKILL)."""
        node = self.nodes[node_id - 1]
        proc, node.process = node.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def running(self) -> list[Node]:
        return [n for n in self.nodes if n.process is not None and n.process.poll() is None]

    def wait_ready(self, timeout: float) -> None:
        """Until every running node is a broker of the cluster's metadata."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        want = {n.node_id for n in self.running()}
        # log_level 0: librdkafka's complaints about nodes not up yet stay out of the console.
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        seen: set[int] = set()
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.process is not None and node.process.poll() is not None:
                    raise KafkaUnavailable(
                        f"Kafka node {node.node_id} exited at start (code "
                        f"{node.process.returncode}); see {node.log_file}. Is port "
                        f"{node.port} or {node.controller_port} taken?"
                    )
            try:
                seen = set(admin.list_topics(timeout=2).brokers)
            except Exception:  # noqa: BLE001 - not up yet: any error means ask again
                seen = set()
            if want <= seen:
                return
            time.sleep(0.2)
        raise KafkaUnavailable(
            f"Kafka nodes {sorted(want - seen)} did not serve within {timeout:.0f} s; see "
            + ", ".join(str(n.log_file) for n in self.nodes)
        )

    def stop(self) -> None:
        for node in self.nodes:
            self.stop_node(node.node_id)

    def keep_running(self, stop: threading.Event, every: float = 1.0) -> None:
        """Until ``stop`` is set, start again each node that exits, as a machine's service
        manager restarts a broker: it rejoins the cluster from its folder. A node that exits
        again soon after (its disk still full, a port taken) waits 1, 3, 7, then
        ``RESTART_DELAY_MAX_S`` seconds before each start, rather than a JVM a second; one that
        ran ``RESTART_RESET_S`` starts at once."""
        failures: dict[int, int] = {}
        started = {n.node_id: time.monotonic() for n in self.nodes}
        due: dict[int, float] = {}
        while not stop.wait(every):
            now = time.monotonic()
            for node in self.nodes:
                i, process = node.node_id, node.process
                if process is None or process.poll() is None:
                    continue
                if i not in due:
                    quick = now - started[i] < RESTART_RESET_S
                    failures[i] = failures.get(i, 0) + 1 if quick else 0
                    due[i] = now + min(RESTART_DELAY_MAX_S, 2 ** failures[i] - 1)
                    print(f"Kafka node {i} exited (code {process.returncode}); starting it "
                          f"again in {due[i] - now:.0f} s; see {node.log_file}",
                          flush=True)  # fmt: skip
                if now >= due[i]:
                    del due[i]
                    started[i] = now
                    self.start_node(i, wait=False)

    def __enter__(self) -> str:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m liveviews.log.kafka.broker",
                                     description=__doc__.splitlines()[0])  # fmt: skip
    parser.add_argument("--nodes", type=int, default=1, help="nodes of the cluster (default 1)")
    parser.add_argument("--data", type=Path, default=Path(".liveviews") / "kafka",
                        help="the cluster's folder (default .liveviews/kafka)")  # fmt: skip
    parser.add_argument("--port", type=int, default=None,
                        help="node i listens on PORT+i-1, its controller on PORT+NODES+i-1 "
                        "(default: free ports, kept in the folder)")  # fmt: skip
    parser.add_argument(
        "--fetch-only",
        action="store_true",
        help="only fetch Kafka's jars and Spark's Kafka source (scripts/setup.sh) and print "
        "their folders",
    )
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        if args.fetch_only:
            print(ensure_kafka())
            print(ensure_kafka(SPARK_POM))
            return 0
        cluster = KafkaCluster(args.data, args.nodes, port=args.port)
        with cluster as bootstrap:
            print(f"Kafka ({len(cluster.nodes)} node(s)) at {bootstrap}; Ctrl-C stops it",
                  flush=True)  # fmt: skip
            cluster.keep_running(stop)
    except LiveviewsError as exc:
        print(f"liveviews: {exc.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
