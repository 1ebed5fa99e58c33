"""The embedded store stops taking writes before its disk is full, and takes them again once
there is room.

With ``appendfsync always`` a server that cannot write its append-only file exits rather than
acknowledge what it could not keep, so a full disk would take every reader down with it. The
guard watches the free space of the store's directory and, below the reserve
(``LV_STORE_DISK_RESERVE``), sets ``min-replicas-to-write`` to one more replica than the store
has: the server then refuses every write (``NOREPLICAS``) and keeps serving reads, and a
publish is answered 503 ``store_disk_full`` with the reason the guard recorded first. Once the
disk has half the reserve more than that again, writes are taken as before.
"""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from typing import Any

import orjson
import redis

from liveviews.store.password import redacted

log = logging.getLogger("liveviews.store")

REFUSAL_KEY = "lv:{m}:writes_refused"
"""Why the store refuses writes, as ``{"code", "message"}``: read by a gateway that was
refused, so that its answer says what to do."""
INTERVAL_S = 0.5
REASON_KEPT_S = 30
"""How long the reason outlives the refusal: a write refused just before the switch back
reads it after, and must still say why."""


def megabytes(n: int) -> str:
    return f"{n / 1_048_576:.0f} MB"


class DiskGuard:
    """``start()`` a thread that turns the store's writes off and on by the free space under
    ``directory``; ``stop()`` it (writes are left on)."""

    def __init__(self, url: str, directory: Path, reserve: int) -> None:
        self.url = url
        self.directory = directory
        self.reserve = reserve
        self.refusing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="disk-guard", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        client = redis.Redis.from_url(self.url, socket_timeout=5, socket_connect_timeout=2)
        try:
            while not self._stop.wait(INTERVAL_S):
                try:
                    self.check(client, shutil.disk_usage(self.directory).free)
                except (OSError, redis.RedisError) as exc:
                    # The store restarting, or the directory going: look again next time.
                    log.debug("disk guard of %s: %s", redacted(self.url), exc)
        finally:
            client.close()

    def check(self, client: Any, free: int) -> None:
        """Refuse writes below the reserve; take them again above one and a half reserves."""
        if not self.refusing and free < self.reserve:
            message = (
                f"the store's disk has {megabytes(free)} free, less than its reserve of "
                f"{megabytes(self.reserve)} (LV_STORE_DISK_RESERVE), so it takes no writes: "
                "events are refused until room is made. Operators: free space under "
                f"{self.directory}, or keep less of the log (LV_LOG_RETENTION)."
            )
            # Recorded while a small write still fits, then the switch: the gateways' answers
            # say why from the first refusal on.
            client.set(REFUSAL_KEY, orjson.dumps({"code": "store_disk_full", "message": message}))
            client.config_set("min-replicas-to-write", _replicas(client) + 1)
            self.refusing = True
            log.warning("%s", message)
        elif self.refusing and free >= self.reserve + self.reserve // 2:
            client.config_set("min-replicas-to-write", 0)
            # Not deleted: a gateway refused a moment ago reads it next, and without it would
            # answer a generic store_read_only for what was a full disk.
            client.expire(REFUSAL_KEY, REASON_KEPT_S)
            self.refusing = False
            log.warning("the store's disk has %s free again: writes are taken", megabytes(free))


def _replicas(client: Any) -> int:
    info: Any = client.info("replication")
    return int(info.get("connected_slaves", 0))
