"""The embedded store: started for you, and never mistaken for a server already there."""

from __future__ import annotations

import pytest
import redis

from streaming.core import embedded
from streaming.core.embedded import EmbeddedStore, allocator_env, allocator_setting, free_port
from streaming.core.errors import ConfigurationError


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
