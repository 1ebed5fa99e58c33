"""Appending a batch of events to the log once, whatever is retried: ``append.lua``.

A batch is one script call per log partition it touches. Each call appends the partition's
events and keeps their entry ids in a record named by the batch's idempotency key, in the
partition's hash slot (``{lv:log:N}:appended:<key>``); a call that finds the record appends
nothing and answers the stored ids. So a writer that does not know whether its batch was
appended (a timeout, a failover) sends it again with the same key and gets the same offsets.

On a single server all of a batch's calls are one MULTI transaction: the batch is appended
whole or not at all. A store cluster has no transaction across partitions: each partition's
call is atomic on its own server, and a batch whose partitions did not all succeed is a
``PartialAppend`` that says which events were appended; sent again with the same key, only the
rest are. With ``LV_STORE_ACK_REPLICAS=N`` each call is followed by ``WAIT N`` on the same
connection, and a batch is acknowledged only once its replicas have it.

The executor for a synchronous client is here (``append_sync``, ``EventLog``); the gateway's
asyncio one is ``liveviews.gateway.publish.append``. Both plan with ``calls``, read the store's
replies with ``transaction_outcomes`` or ``call_ids``, and conclude with ``settle``.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import redis
from redis.exceptions import OutOfMemoryError, ResponseError

from liveviews.errors import LiveviewsError
from liveviews.log.events import Event, Offset, log_stream, partition_for
from liveviews.log.retention import Retention
from liveviews.store import client as storeclient

SCRIPT = Path(__file__).with_name("append.lua").read_text()
RECORD_SECONDS = 86_400
"""How long a batch's record answers a retry with a key the writer chose: 24 hours."""
OWN_RECORD_SECONDS = 600
"""How long it answers one with a key made for the batch (no key given) on a store cluster:
only the writer's own retries use that key, so the record need outlive only them, and costs
the store little."""
KEY_RE = re.compile(r"[\x21-\x7e]{1,200}")
REUSED = "IDEMPOTENCY_KEY_REUSED"


class InvalidIdempotencyKey(LiveviewsError):
    code = "invalid_idempotency_key"


class IdempotencyKeyReused(LiveviewsError):
    """The key names a record of another batch: the offsets it holds are not this batch's."""

    code = "idempotency_key_reused"


class PartialAppend(LiveviewsError):
    """Some partitions of a batch were appended and some failed for good (a store cluster)."""

    code = "partial_append"

    def __init__(self, message: str, appended: list[Offset | None]) -> None:
        super().__init__(message)
        self.appended = appended


class NotAcknowledged(LiveviewsError):
    """The batch was appended, but fewer replicas than asked for confirmed it in time."""

    code = "not_replicated"


def check_key(key: str) -> str:
    """An idempotency key as given, if it is 1 to 200 visible ASCII characters."""
    if not KEY_RE.fullmatch(key):
        raise InvalidIdempotencyKey(
            "an idempotency key is 1 to 200 visible ASCII characters (no spaces); "
            f"{key[:40]!r} is not one. Send a UUID, for example."
        )
    return key


@dataclass(frozen=True)
class Idempotency:
    """What a batch's records are kept under: its key, the digest of its events as the writer
    sent them (a key sent again with other events is refused), and how long they are kept."""

    key: str
    digest: str
    seconds: int
    given: bool = True
    """The writer chose the key (it may send it again), rather than one made for the batch."""

    @classmethod
    def of(cls, raws: Any, key: str | None = None, seconds: int = RECORD_SECONDS) -> Idempotency:
        """For the events ``raws`` as sent (before defaults such as the time are filled in, so
        a retry of the same request has the same digest), under ``key`` (its record kept
        ``seconds``) or a new one."""
        if key is None:
            # A key made for this batch never comes with other events: nothing to compare, so
            # no digest to compute (the events may be encoded already, with bytes for names).
            own = uuid.uuid4().hex
            return cls(own, own, OWN_RECORD_SECONDS, given=False)
        body = orjson.dumps(raws, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
                            default=repr)  # fmt: skip
        return cls(check_key(key), hashlib.sha256(body).hexdigest()[:32], seconds)


def record_key(partition: int, key: str) -> str:
    """The record of a batch in a partition: hash tag ``lv:log:N``, the slot of the stream."""
    return "{" + log_stream(partition) + "}:appended:" + key


@dataclass(frozen=True)
class Call:
    """One partition's script call: the indexes of its events in the batch, KEYS and ARGV."""

    partition: int
    indexes: list[int]
    keys: list[str]
    args: list[Any]


def calls(
    events: Sequence[Event],
    partitions: int,
    retention: Retention | None,
    idempotency: Idempotency,
    *,
    single_server: bool,
) -> list[Call]:
    """The calls that append ``events``, by partition in order of first appearance. On a single
    server each call also checks the batch's other records first (``append.lua``), so that in
    the batch's one transaction a refused key writes nothing in any partition; and a batch
    whose key was made for it keeps no record there, since its one transaction is never
    retried."""
    trim: list[Any] = ["", ""]
    if retention is not None:  # by age: on the store's clock (append.lua)
        trim = ["MAXLEN", retention.entries] if retention.entries else ["MINAGE", retention.age_ms]
    by_partition: dict[int, list[int]] = {}
    for i, event in enumerate(events):
        by_partition.setdefault(partition_for(event.key, partitions), []).append(i)
    keep = idempotency.given or not single_server
    records = {p: record_key(p, idempotency.key) for p in by_partition} if keep else {}
    out = []
    for partition, indexes in by_partition.items():
        keys = [log_stream(partition)]
        if keep:
            keys.append(records[partition])
        if keep and single_server:
            keys += [r for p, r in records.items() if p != partition]
        args: list[Any] = [idempotency.digest, idempotency.seconds, *trim]
        for i in indexes:
            fields = events[i].encode()
            args.append(len(fields))
            for name, value in fields.items():
                args += [name, value]
        out.append(Call(partition, indexes, keys, args))
    return out


Outcome = list[Any] | BaseException
"""A call's entry ids, or what it failed with."""


def settle(size: int, batch: Sequence[Call], outcomes: Sequence[Outcome]) -> list[Offset]:
    """The offsets of a batch of ``size`` events from its calls' outcomes; raises when not every
    call succeeded: the store's error when none did, else ``PartialAppend``."""
    offsets: list[Offset | None] = [None] * size
    failures: list[BaseException] = []
    for call, outcome in zip(batch, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            failures.append(_translated(outcome))
            continue
        for i, entry_id in zip(call.indexes, outcome, strict=True):
            raw = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
            offsets[i] = Offset(call.partition, raw)
    if not failures:
        return [o for o in offsets if o is not None]
    reused = [f for f in failures if isinstance(f, IdempotencyKeyReused)]
    if reused:
        raise reused[0]
    if all(o is None for o in offsets):
        raise failures[0]
    if all(isinstance(f, NotAcknowledged) for f in failures):
        raise failures[0]
    raise PartialAppend(
        f"{sum(o is not None for o in offsets)} of {size} events were appended and the rest "
        f"could not be ({failures[0]}); send the same batch again with the same "
        "Idempotency-Key: only the events not appended yet will be.",
        offsets,
    )


def _translated(exc: BaseException) -> BaseException:
    if isinstance(exc, ResponseError) and REUSED in str(exc):
        return key_reused()
    if isinstance(exc, storeclient.NotReplicated):
        return NotAcknowledged(
            f"the events were appended but not confirmed by the store's replicas ({exc}); "
            "send the same batch again with the same Idempotency-Key: nothing is appended twice."
        )
    return exc


def key_reused() -> IdempotencyKeyReused:
    return IdempotencyKeyReused(
        "this Idempotency-Key was sent before with other events; use a new key for a new "
        "batch, or send the same events again."
    )


def check_records(idempotency: Idempotency, records: Sequence[Any]) -> None:
    """Refuse a key whose records (as read before a batch on a cluster, where the partitions'
    calls cannot check each other's) hold another batch's digest, before anything is written."""
    for record in records:
        if record is not None and not bytes(record).startswith(idempotency.digest.encode() + b"\n"):
            raise key_reused()


def exec_replies(results: Sequence[Any], count: int) -> list[Outcome]:
    """The replies of ``count`` calls in a MULTI sent as commands (``MULTI``, calls, ``EXEC``):
    EXEC answers each call's reply, or an error a call raised."""
    replies = results[1 + count]
    if replies is None:
        raise redis.exceptions.ExecAbortError("the store discarded the transaction")
    for reply in replies:
        if isinstance(reply, OutOfMemoryError):
            raise reply  # the store is full: nothing was written
    return list(replies)


def transaction_outcomes(
    results: Sequence[Any], count: int, replicas: int, acknowledged: bool
) -> list[Outcome]:
    """The outcomes of ``count`` calls sent as one MULTI (then ``WAIT`` if ``acknowledged``):
    each call's ids, or, when the replicas did not confirm the transaction, NotReplicated."""
    outcomes = exec_replies(results, count)
    if acknowledged:
        try:
            storeclient.check_acknowledged(results[-1], replicas)
        except storeclient.NotReplicated as exc:
            return [exc] * count
    return outcomes


def call_ids(results: Sequence[Any], call: Call, replicas: int, acknowledged: bool) -> list[Any]:
    """The entry ids of one partition's call sent alone (then ``WAIT`` if ``acknowledged``);
    raises NotReplicated when its replicas did not confirm it."""
    if acknowledged:
        storeclient.check_acknowledged(results[1], replicas, log_stream(call.partition))
    return list(results[0])


def append_sync(
    client: storeclient.Client,
    script: Any,
    batch: Sequence[Call],
    replicas: int = 0,
    budget: float = storeclient.FAILOVER_SECONDS,
    idempotency: Idempotency | None = None,
) -> list[Outcome]:
    """Run a batch's calls with a synchronous client: one MULTI on a single server, one call
    per partition's server on a cluster (each retried through a failover for ``budget`` s)."""
    if not storeclient.is_cluster(client):
        assert isinstance(client, redis.Redis)
        # MULTI and EXEC sent as commands, so that WAIT can follow on the same connection.
        with client.pipeline(transaction=False) as pipe:
            pipe.execute_command("MULTI")
            for call in batch:
                script(keys=call.keys, args=call.args, client=pipe)
            pipe.execute_command("EXEC")
            acknowledged = storeclient.queue_acknowledge(pipe, replicas)
            results = pipe.execute()
        return transaction_outcomes(results, len(batch), replicas, acknowledged)
    if idempotency is not None and idempotency.given:
        check_records(idempotency, [_record(client, call) for call in batch])
    return [_call_on_node(client, script, call, replicas, budget) for call in batch]


def _record(client: storeclient.Client, call: Call) -> Any:
    try:
        return client.get(call.keys[1])
    except (redis.RedisError, OSError):
        return None  # its partition's call checks it too


def _call_on_node(
    client: storeclient.Client, script: Any, call: Call, replicas: int, budget: float
) -> Outcome:
    def run() -> list[Any]:
        server = storeclient.node_client(client, call.keys[0])
        with server.pipeline(transaction=False) as pipe:
            script(keys=call.keys, args=call.args, client=pipe)
            acknowledged = storeclient.queue_acknowledge(pipe, replicas)
            results = pipe.execute()
        return call_ids(results, call, replicas, acknowledged)

    # Not after NotReplicated: the call again would find its record and write nothing, so a
    # WAIT after it would confirm nothing.
    try:
        return storeclient.retrying(run, client, f"appending to {log_stream(call.partition)}",
                                    seconds=budget, errors=storeclient.FAILOVER_ERRORS)  # fmt: skip
    except (redis.RedisError, *storeclient.FAILOVER_ERRORS) as exc:
        return exc
