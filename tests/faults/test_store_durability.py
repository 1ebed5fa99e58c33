"""The embedded store's durability contract (docs/reliability/durability.md), one fault at a time.

- ``always``: an acknowledged write survives a SIGKILL of the store (valkey writes and syncs
  the AOF before it replies).
- ``everysec``: a SIGKILL can lose acknowledged writes. Valkey normally write(2)s the AOF
  before replying, but while a background fsync is still running it postpones that write for
  up to 2 s and replies all the same; a crash then loses what it had acknowledged meanwhile
  (seen in 3 of 40 runs of 3000 writes right after start). What survives is always a prefix
  of what was acknowledged: the AOF is append-only, so the log has no hole, only a lost tail.
- Regression: ``EmbeddedStore.start()`` returned while the restarted server was still loading
  its AOF, so the first command failed with ``BusyLoadingError``. It now waits until loaded.
- Regression: the pipeline's store clients gave up within about a second (the source's reads
  with redis-py's default retries, the sink's with a 0.25 s budget), so a store restart failed
  the Spark query. ``store_retry()`` now waits out a store that is down for up to a minute.
- ``LV_STORE_FSYNC=always|everysec`` chooses the fsync policy; anything else is refused.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest
import redis

from liveviews.errors import ConfigurationError
from liveviews.pipeline.source import _client
from liveviews.store.embedded import EmbeddedStore, free_port, fsync_policy


def _sigkill(store: EmbeddedStore) -> None:
    assert store.process is not None
    store.process.send_signal(signal.SIGKILL)
    store.process.wait(10)
    store.process = None


def _write_then_sigkill(tmp_path, policy: str) -> tuple[list[bytes], list[bytes]]:
    """Acknowledged ids, and the ids in the log after a SIGKILL and a restart."""
    store = EmbeddedStore(tmp_path, free_port(), appendfsync=policy)
    client = redis.Redis.from_url(store.start())
    try:
        acked = [client.xadd("lv:log:0", {"n": str(i)}) for i in range(3000)]
        _sigkill(store)  # at once: within the second everysec has not synced yet
        store.start()
        assert client.config_get("appendfsync")["appendfsync"] == policy
        return acked, [e[0] for e in client.xrange("lv:log:0")]
    finally:
        client.close()
        store.stop()


def test_always_loses_nothing_acknowledged_on_sigkill(tmp_path):
    for run in range(3):
        acked, present = _write_then_sigkill(tmp_path / str(run), "always")
        assert present == acked


def test_everysec_keeps_a_prefix_on_sigkill(tmp_path):
    for run in range(3):
        acked, present = _write_then_sigkill(tmp_path / str(run), "everysec")
        assert present == acked[: len(present)], "a hole in the log, not just a lost tail"


def test_start_waits_until_the_aof_is_loaded(tmp_path):
    store = EmbeddedStore(tmp_path, free_port())
    client = redis.Redis.from_url(store.start())
    try:
        for chunk in range(40):
            with client.pipeline(transaction=False) as pipe:
                for i in range(5000):
                    pipe.set(f"k{chunk}:{i}", "x" * 20)
                pipe.execute()
        store.stop()
        store.start()
        assert client.dbsize() == 200_000  # BusyLoadingError here before the fix
    finally:
        client.close()
        store.stop()


def test_source_reads_wait_for_a_restarting_store(tmp_path):
    store = EmbeddedStore(tmp_path, free_port())
    url = store.start()
    reader = _client(url)
    reader.xadd("lv:log:0", {"n": "1"})
    _sigkill(store)
    threading.Timer(3.0, store.start).start()  # down for 3 s, longer than the old budget
    try:
        t0 = time.monotonic()
        assert len(reader.xrange("lv:log:0")) == 1
        assert time.monotonic() - t0 >= 2.5
    finally:
        time.sleep(0.5)
        reader.close()
        store.stop()


def test_fsync_policy_setting():
    assert fsync_policy({}) == "always"
    assert fsync_policy({"LV_STORE_FSYNC": "everysec"}) == "everysec"
    assert fsync_policy({"LV_STORE_FSYNC": "always"}) == "always"
    with pytest.raises(ConfigurationError, match="LV_STORE_FSYNC must be 'always' or 'everysec'"):
        fsync_policy({"LV_STORE_FSYNC": "no"})
