"""Source transactions in the log, as change data capture appends them."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from demo.chirp import app
from demo.chirp.generate import Activity
from liveviews.log.eventlog import EventLog
from liveviews.log.events import Transaction


def append_transactions(
    store: Any, sizes: list[int], partitions: int
) -> dict[tuple[int, str], str]:
    """Source transactions of ``sizes`` Chirp events (0: one event of no transaction), each
    appended in one MULTI as change data capture appends them; which transaction each entry
    (partition, entry id) belongs to."""
    log = EventLog(store, app, partitions)
    events = iter(app.validate_batch(Activity(users=30, seed=9).take(sum(sizes) + len(sizes))))
    tx_of: dict[tuple[int, str], str] = {}
    for i, n in enumerate(sizes):
        if n == 0:
            log.append_validated([next(events)])
            continue
        tx = Transaction(f"0/{i:X}", n)
        batch = [dataclasses.replace(next(events), tx=tx) for _ in range(n)]
        random.Random(i).shuffle(batch)
        for offset in log.append_validated(batch):
            tx_of[(offset.partition, offset.id)] = tx.id
    return tx_of
