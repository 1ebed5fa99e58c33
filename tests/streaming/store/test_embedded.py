"""The embedded store: started for you, never mistaken for a server already there, with a
password and a memory limit of its own."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import redis

from liveviews.errors import ConfigurationError
from liveviews.store import embedded
from liveviews.store.embedded import (
    EmbeddedStore,
    allocator_env,
    allocator_setting,
    free_port,
    machine_memory,
    maxmemory_setting,
)
from liveviews.store.password import password_path

ROOT = Path(__file__).resolve().parents[3]


def test_persists_across_restarts(tmp_path):
    port = free_port()
    with EmbeddedStore(tmp_path, port) as url:
        redis.Redis.from_url(url).xadd("lv:log:0", {"k": "v"})
    with EmbeddedStore(tmp_path, port) as url:
        assert redis.Redis.from_url(url).xlen("lv:log:0") == 1


def test_refuses_a_port_another_server_holds(tmp_path):
    port = free_port()
    with (
        EmbeddedStore(tmp_path / "a", port),
        pytest.raises(ConfigurationError, match=f"port {port} already has"),
    ):
        EmbeddedStore(tmp_path / "b", port).start()


def _maps(pid: int) -> str:
    with open(f"/proc/{pid}/maps") as f:
        return f.read()


def test_runs_with_jemalloc_unless_told_to_keep_the_servers_own_allocator(tmp_path, monkeypatch):
    # scripts/setup.sh installs jemalloc; the wheel's server is built with the C library's.
    store = EmbeddedStore(tmp_path / "a", free_port())
    with store as url:
        store_pid = redis.Redis.from_url(url).info("server")["process_id"]
        assert "libjemalloc.so" in _maps(store_pid)
    assert store.allocator == "jemalloc"
    monkeypatch.setenv("LV_STORE_ALLOCATOR", "builtin")
    store = EmbeddedStore(tmp_path / "b", free_port())  # read when made, as LV_STORE_FSYNC
    with store as url:
        client = redis.Redis.from_url(url)
        assert "libjemalloc.so" not in _maps(client.info("server")["process_id"])
        client.set("k", "v")  # it serves as before
        assert client.get("k") == b"v"
    assert store.allocator == "builtin"


def test_allocator_setting():
    assert allocator_setting({}) == "jemalloc"
    assert allocator_setting({"LV_STORE_ALLOCATOR": "builtin"}) == "builtin"
    with pytest.raises(ConfigurationError, match="LV_STORE_ALLOCATOR must be 'jemalloc' or"):
        allocator_setting({"LV_STORE_ALLOCATOR": "tcmalloc"})


def test_a_server_with_its_own_jemalloc_gets_none_preloaded(tmp_path):
    # Redis and Valkey built by default say malloc=jemalloc-x.y.z and keep their own.
    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\necho 'Redis server v=7.0.15 malloc=jemalloc-5.3.0 bits=64'\n")
    fake.chmod(0o755)
    assert allocator_env(str(fake), "jemalloc") == ("builtin", {})
    assert allocator_env(str(fake), "builtin") == ("builtin", {})


def test_a_server_on_the_c_librarys_allocator_gets_jemalloc_when_the_machine_has_it(
    tmp_path, monkeypatch
):
    fake = tmp_path / "valkey-server"
    fake.write_text("#!/bin/sh\necho 'Valkey server v=9.1.2 malloc=libc bits=64'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(embedded, "jemalloc_library", lambda: "/usr/lib/x/libjemalloc.so.2")
    assert allocator_env(str(fake), "jemalloc") == (
        "jemalloc",
        {"LD_PRELOAD": "/usr/lib/x/libjemalloc.so.2"},
    )
    assert allocator_env(str(fake), "builtin") == ("builtin", {})
    monkeypatch.setattr(embedded, "jemalloc_library", lambda: None)
    assert allocator_env(str(fake), "jemalloc") == ("libc (no jemalloc on this machine)", {})


def test_the_store_refuses_whoever_lacks_its_password(tmp_path):
    """It had no password: any user of the machine could write the log on 127.0.0.1."""
    store = EmbeddedStore(tmp_path, free_port())
    with store as url:
        assert redis.Redis.from_url(url).ping()
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(f"redis://127.0.0.1:{store.port}/0").set("lv:log:0", "forged")
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(f"redis://:guess@127.0.0.1:{store.port}/0").ping()
        pid = redis.Redis.from_url(url).info("server")["process_id"]
        password = password_path(tmp_path).read_text().strip()
        with open(f"/proc/{pid}/cmdline", "rb") as f:  # given on its stdin, not its arguments
            assert password.encode() not in f.read()


def test_the_password_is_made_once_and_readable_by_its_owner_only(tmp_path):
    port = free_port()
    with EmbeddedStore(tmp_path, port) as first:
        redis.Redis.from_url(first).set("k", "v")
    path = password_path(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    with EmbeddedStore(tmp_path, port) as second:
        assert second == first and redis.Redis.from_url(second).get("k") == b"v"


def test_the_store_holds_at_most_lv_store_maxmemory_and_never_evicts(tmp_path, monkeypatch):
    """It had no maxmemory: one publisher could take all of the machine's memory."""
    with EmbeddedStore(tmp_path / "a", free_port()) as url:
        config = redis.Redis.from_url(url).config_get("maxmemory*")
    assert int(config["maxmemory"]) == machine_memory() // 4 > 0
    assert config["maxmemory-policy"] == "noeviction"
    monkeypatch.setenv("LV_STORE_MAXMEMORY", "64mb")
    with EmbeddedStore(tmp_path / "b", free_port()) as url:
        assert redis.Redis.from_url(url).config_get("maxmemory")["maxmemory"] == str(64 << 20)


def test_maxmemory_setting():
    total = machine_memory()
    assert maxmemory_setting({}) == total // 4
    assert maxmemory_setting({"LV_STORE_MAXMEMORY": "50%"}) == total // 2
    assert maxmemory_setting({"LV_STORE_MAXMEMORY": "2gb"}) == 2 << 30
    assert maxmemory_setting({"LV_STORE_MAXMEMORY": "512MB"}) == 512 << 20
    assert maxmemory_setting({"LV_STORE_MAXMEMORY": "1000000"}) == 1_000_000
    assert maxmemory_setting({"LV_STORE_MAXMEMORY": "off"}) == 0
    for bad in ("lots", "0%", "150%", "2 gb", "-1", "1.5gb"):
        with pytest.raises(ConfigurationError, match="LV_STORE_MAXMEMORY must be a share"):
            maxmemory_setting({"LV_STORE_MAXMEMORY": bad})


def _wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_every_process_on_the_embedded_default_finds_it_and_none_shows_its_password(tmp_path):
    """The store process (the Procfile's) makes the password; the gateway, started with the
    same data directory and no REDIS_URL, reads it and serves; neither prints it."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    # Started side by side, as the Procfile starts them: the gateway waits for the store as it
    # does under make run and liveviews dev.
    env.update(LV_DATA_DIR=str(tmp_path), LV_EMBEDDED_PORT=str(free_port()),
               LV_PORT=str(free_port()), LV_STATIC_DIR="off", LV_CLIENT_JS_DIR="off",
               LV_WAIT_FOR_STORE="30")  # fmt: skip
    procs = []
    try:
        for module in ("liveviews.store.embedded", "liveviews.gateway"):
            out = open(tmp_path / f"{module}.out", "wb")  # noqa: SIM115 - the child's
            procs.append(subprocess.Popen([sys.executable, "-m", module], env=env, stdout=out,
                                          stderr=subprocess.STDOUT, cwd=ROOT))  # fmt: skip

        def ready() -> bool:
            for proc, module in zip(
                procs, ("liveviews.store.embedded", "liveviews.gateway"), strict=True
            ):
                if proc.poll() is not None:
                    output = (tmp_path / f"{module}.out").read_text()
                    pytest.fail(f"{module} exited ({proc.returncode}):\n{output}")
            url = f"http://127.0.0.1:{env['LV_PORT']}/readyz"
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    return bool(resp.status == 200)
            except OSError:
                return False

        _wait_for(ready)
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
    password = password_path(tmp_path).read_text().strip()
    shown = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".out", ".log")]
    assert len(shown) >= 3  # each process's console, and their log files
    for path in shown:
        assert password not in path.read_text(errors="replace"), path
    assert ":***@127.0.0.1" in (tmp_path / "liveviews.gateway.out").read_text()
