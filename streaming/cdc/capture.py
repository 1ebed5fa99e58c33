"""Following a PostgreSQL database into the log: the start, the snapshot, then each committed
transaction, exactly once.

The start checks the declared tables against the database, makes the publication, and meets
one of three cases: a slot and a stored position (resume from it), neither (make the slot and
take the snapshot), or a slot and no position (a snapshot that never reached the log: drop the
slot and take it again). A stored position without its slot, or with other tables, stops it:
the changes in between are gone, or a table's old rows are missing from the log.

Then each transaction's events are appended at its commit, in one MULTI with its commit
position (``position.append_at``), and the slot is confirmed up to it afterwards; transactions
read together from a backlog share one MULTI, with the last one's position. After a crash
PostgreSQL sends again every transaction the slot has not confirmed; those at or below the
stored position are already in the log and are skipped. While idle, with no transaction half
read, the slot is confirmed up to where the server has sent: transactions of undeclared tables
must not keep the database's WAL forever.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import select
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg2
import psycopg2.errors
import psycopg2.extras
import redis

from liveviews.app import App
from liveviews.cdc import catalog
from liveviews.cdc.errors import SourceChanged
from liveviews.cdc.pgoutput import (
    Begin,
    Commit,
    Delete,
    Insert,
    Message,
    Relation,
    Truncate,
    Update,
    decode,
    lsn_text,
    parse_lsn,
)
from liveviews.cdc.position import Position, Positions, StorePositions
from liveviews.cdc.rows import Follow
from liveviews.cdc.settings import CdcSettings
from liveviews.cdc.snapshot import read_snapshot
from liveviews.errors import ConfigurationError
from liveviews.log.eventlog import check_layout
from liveviews.log.events import Event, Transaction, now_ms
from liveviews.store import client as storeclient
from liveviews.tables import Table

log = logging.getLogger("liveviews.cdc")
T = TypeVar("T")
IDLE_S = 0.5
"""How long the loop waits for the server before checking whether it was asked to stop."""
GROUP_EVENTS = 5_000
"""Transactions read from a backlog are appended together, up to about this many events (a
larger transaction alone): one store round trip and one fsync for many."""
PING_S = 1.0
"""While idle, how often the server is asked how far it has sent."""


@dataclass
class Pending:
    """A transaction being read: its commit position is known from its first message."""

    commit_lsn: int
    time_ms: int
    skip: bool
    """Already in the log (at or below the stored position): read, not appended again."""
    events: list[Event] = field(default_factory=list)


class Capture:
    """Decoded pgoutput messages in (``handle``), transactions appended to the log
    (``flush``)."""

    def __init__(
        self, app: App, positions: Positions, settings: CdcSettings, resume_lsn: int
    ) -> None:
        self.app = app
        self.positions = positions
        self.slot = settings.slot
        self.declared = {t.qualified: t for t in app.tables.values()}
        self.follows: dict[int, Follow | SourceChanged] = {}
        self.pending: Pending | None = None
        self.lsn = resume_lsn
        """The last transaction in the log, or read whole and about to be (``ready``)."""
        self.ready: list[Event] = []
        self.read_to = resume_lsn
        """Where the last transaction read whole ends: confirmable once ``ready`` is flushed."""
        self.appended = 0

    def handle(self, message: Message) -> None:
        if isinstance(message, Begin):
            skip = message.final_lsn <= self.lsn
            self.pending = Pending(message.final_lsn, message.commit_time_ms, skip)
        elif isinstance(message, Relation):
            self._relation(message)
        elif isinstance(message, Insert | Update | Delete):
            self._change(message)
        elif isinstance(message, Truncate):
            self._truncate(message)
        elif isinstance(message, Commit):
            self._commit(message)

    def _relation(self, message: Relation) -> None:
        table = self.declared.get(f"{message.namespace}.{message.name}")
        if table is None:
            self.follows.pop(message.relation_id, None)
            return
        columns = [(c.name, c.type_oid) for c in message.columns]
        try:
            self.follows[message.relation_id] = Follow.match(table, columns)
        except SourceChanged as exc:  # raised by the first change to append, not a replayed one
            self.follows[message.relation_id] = exc

    def _follow(self, relation_id: int) -> Follow | None:
        if self.pending is None or self.pending.skip:
            return None
        follow = self.follows.get(relation_id)
        if isinstance(follow, SourceChanged):
            raise follow
        return follow

    def _change(self, message: Insert | Update | Delete) -> None:
        follow = self._follow(message.relation_id)
        if follow is not None:
            assert self.pending is not None
            self.pending.events.append(follow.change(self.app, message, self.pending.time_ms))

    def _truncate(self, message: Truncate) -> None:
        names = []
        for relation_id in message.relation_ids:
            follow = self._follow(relation_id)
            if follow is not None:
                names.append(follow.table.qualified)
        if names:
            raise SourceChanged(
                f"TRUNCATE {', '.join(names)} removed rows without saying which, so their "
                "deletes cannot enter the log: empty tables with DELETE instead; to go on from "
                "here, start from an empty log (an empty store, or a new LV_KAFKA_TOPIC) so "
                "that a new snapshot is taken."
            )

    def _commit(self, message: Commit) -> None:
        tx, self.pending = self.pending, None
        if tx is not None and not tx.skip and message.commit_lsn > self.lsn and tx.events:
            marker = Transaction(lsn_text(message.commit_lsn), len(tx.events))
            self.ready += [dataclasses.replace(e, tx=marker) for e in tx.events]
            self.lsn = message.commit_lsn
            self.appended += 1
        self.read_to = message.end_lsn

    def flush(self) -> int:
        """Append the transactions read whole, in one MULTI with the last one's commit
        position; the position the slot may be confirmed to, now that they are in the log."""
        if self.ready:
            self.positions.append_at(self.slot, self.ready, self.lsn)
            self.ready = []
        return self.read_to


def start_position(
    db: Any, positions: Positions, settings: CdcSettings, tables: list[Table]
) -> tuple[Position | None, dict[str, catalog.Columns]]:
    """Check the database and the store agree; the stored position, if the slot is usable."""
    names = tuple(sorted(t.qualified for t in tables))
    with db.cursor() as cur:
        columns = catalog.check_all(cur, tables)
        catalog.ensure_publication(cur, settings.publication, tables)
        stored = positions.read(settings.slot)
        slot_db = catalog.slot_database(cur, settings.slot)
        cur.execute("SELECT current_database()")
        here = cur.fetchone()[0]
        if slot_db is not None and slot_db != here:
            raise ConfigurationError(
                f"replication slot {settings.slot!r} follows database {slot_db!r}, not {here!r}: "
                "set LV_CDC_SLOT to another name for this database."
            )
        if stored is None and slot_db is not None:
            log.warning("slot %r has no position in the store (a snapshot that never reached "
                        "the log, or an emptied store): taking the snapshot again",
                        settings.slot)  # fmt: skip
            catalog.drop_slot(cur, settings.slot)
        elif stored is not None and slot_db is None:
            raise SourceChanged(
                f"the log holds changes up to {lsn_text(stored.lsn)}, but the database has no "
                f"replication slot {settings.slot!r} to go on from, so later changes are lost "
                "to it: start from an empty log (an empty store, or a new LV_KAFKA_TOPIC: the "
                "log is taken again from a new snapshot), or point DATABASE_URL back at the "
                "database that has the slot."
            )
        elif stored is not None and stored.tables != names:
            raise SourceChanged(
                f"the log follows {', '.join(stored.tables)} since its snapshot, but the "
                f"application declares {', '.join(names)}: the rows a newly declared table "
                "already had are not in the log. Declare the same tables, or start from an "
                "empty log (an empty store, or a new LV_KAFKA_TOPIC) so that a new snapshot is "
                "taken."
            )
    return stored, columns


def snapshot(
    repl_cur: Any, positions: Positions, settings: CdcSettings, app: App,
    columns: dict[str, catalog.Columns],
) -> Position:  # fmt: skip
    """Make the slot and append the tables' rows as of its start, with its position."""
    tables = list(app.tables.values())
    repl_cur.execute(
        f"CREATE_REPLICATION_SLOT {settings.slot} LOGICAL pgoutput (SNAPSHOT 'export')"
    )
    _, consistent, exported, _ = repl_cur.fetchone()
    lsn = parse_lsn(consistent)
    events = read_snapshot(settings.url, exported, tables, columns, app, now_ms(),
                           f"snapshot {consistent}")  # fmt: skip
    names = sorted(t.qualified for t in tables)
    positions.append_at(settings.slot, events, lsn, names)
    log.info("took the snapshot of %s: %d rows as of %s", ", ".join(names), len(events), consistent)
    return Position(lsn, tuple(names))


def run(settings: CdcSettings, app: App, stop: threading.Event) -> None:
    """Follow the database until ``stop`` is set; raises what stops it otherwise."""
    tables = list(app.tables.values())
    if not tables:
        raise ConfigurationError(
            f"application {app.name!r} declares no tables: declare one with app.table(...), "
            "or do not run the CDC process."
        )
    wait = settings.store.wait_for_store
    client = when_up(lambda: storeclient.connect(settings.store.store_url), wait, stop)
    if not isinstance(client, redis.Redis) and not settings.store.kafka:
        client.close()
        raise ConfigurationError(
            "change data capture needs a single store server, not a store cluster: a "
            "transaction's events and the replication slot's position are appended in one "
            "MULTI, which a cluster refuses across slots. Point REDIS_URL at a single server, "
            "or keep the log in Kafka (LV_KAFKA)."
        )
    when_up(lambda: check_layout(client, settings.store.log_partitions,
                                 settings.store.change_shards), wait, stop)  # fmt: skip
    positions = _positions(settings, client)
    db = when_up(lambda: psycopg2.connect(settings.url, connect_timeout=5), wait, stop)
    db.autocommit = True
    repl = None
    try:
        with refusals(db.info.user):
            stored, columns = start_position(db, positions, settings, tables)
            repl = psycopg2.connect(
                settings.url, connection_factory=psycopg2.extras.LogicalReplicationConnection
            )
            cur = repl.cursor()
            if stored is None:
                stored = snapshot(cur, positions, settings, app, columns)
            else:
                log.info("resuming after %s", lsn_text(stored.lsn))
        cur.start_replication(
            slot_name=settings.slot, decode=False, start_lsn=stored.lsn, status_interval=10,
            options={"proto_version": "1", "publication_names": settings.publication},
        )  # fmt: skip
        log.info("following %s of database %r through slot %r and publication %r",
                 ", ".join(stored.tables), db.info.dbname, settings.slot,
                 settings.publication)  # fmt: skip
        db.close()  # the replication connection is all it needs from here
        follow(cur, Capture(app, positions, settings, stored.lsn), stop)
    finally:
        for conn in (repl, db):
            if conn is not None:
                conn.close()
        positions.close()
        client.close()


def _positions(settings: CdcSettings, client: Any) -> Positions:
    """The store's log, or the Kafka log ``LV_KAFKA`` names (``liveviews.cdc.kafka``)."""
    store = settings.store
    if store.kafka:
        from liveviews.cdc.kafka import KafkaPositions

        return KafkaPositions(store.kafka, store.kafka_topic, store.log_partitions, settings.slot)
    return StorePositions(client, store.log_partitions, store.log_retention)


@contextlib.contextmanager
def refusals(user: str) -> Iterator[None]:
    """The database's refusals at start, as what to change: retrying would meet them again."""
    try:
        yield
    except psycopg2.errors.InsufficientPrivilege as exc:
        raise ConfigurationError(
            f"the database refused user {user!r}: {_first_line(exc)}. To create the "
            "publication it needs CREATE on the database and to own the declared tables; or "
            "have their owner create it (LV_CDC_PUBLICATION names it)."
        ) from None
    except psycopg2.errors.ObjectNotInPrerequisiteState as exc:
        raise ConfigurationError(
            f"the database cannot decode its changes: {_first_line(exc)}. Set wal_level = "
            "logical in its postgresql.conf (on a managed service: its logical replication "
            "setting) and restart it."
        ) from None
    except psycopg2.OperationalError as exc:
        if "replication" not in str(exc) or "must be superuser" not in str(exc):
            raise
        raise ConfigurationError(
            f"user {user!r} may not read the database's changes ({_first_line(exc)}): "
            f"ALTER ROLE {user} REPLICATION, or use a user that has it."
        ) from None


def _first_line(exc: Exception) -> str:
    return str(exc).strip().split("FATAL:")[-1].strip().splitlines()[0].rstrip(".")


def when_up(connect: Callable[[], T], wait_s: int, stop: threading.Event) -> T:
    """``connect()``, tried again for up to ``wait_s`` seconds (``LV_WAIT_FOR_STORE``, which
    ``make run`` sets) while the store or the database is starting beside this process."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return connect()
        except (psycopg2.OperationalError, redis.ConnectionError):
            if time.monotonic() > deadline or stop.is_set():
                raise
            time.sleep(0.5)


def follow(cur: Any, capture: Capture, stop: threading.Event) -> None:
    confirmed, asked = capture.lsn, 0.0
    while not stop.is_set():
        message = cur.read_message()
        if message is not None:
            capture.handle(decode(message.payload))
            if len(capture.ready) < GROUP_EVENTS:
                continue
        # Nothing more at hand, or a full group: what was read whole goes into the log, then
        # the slot is confirmed up to it. A backlog's transactions share a MULTI this way.
        done = capture.flush()
        if done > confirmed:
            confirmed = done
            cur.send_feedback(flush_lsn=confirmed)
        if message is not None:
            continue
        # Everything received is handled: the slot may move up to where the server has sent,
        # which a keepalive says; ask for one now and then rather than wait for it.
        if capture.pending is None and cur.wal_end > confirmed:
            confirmed = cur.wal_end
            cur.send_feedback(flush_lsn=confirmed)
        elif capture.pending is None and time.monotonic() - asked > PING_S:
            asked = time.monotonic()
            cur.send_feedback(flush_lsn=confirmed, reply=True)
        select.select([cur], [], [], IDLE_S)
