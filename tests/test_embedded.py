"""The embedded store: started for you, and never mistaken for a server already there."""

from __future__ import annotations

import pytest
import redis

from streaming.embedded import EmbeddedStore
from streaming.errors import ConfigurationError
from tests.conftest import free_port


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
