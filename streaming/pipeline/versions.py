"""Pipeline versions: which version of each pipeline serves readers, which one is being built
beside it, and what an operator asked for. The one module that reads and writes them.

A version is built beside the serving one from offset 0 of the log, in a namespace of its own
(``liveviews.changes.topic``), and replaces it in one transaction once it has caught up: the
``lv:{m}:active`` field readers resolve, and each shard's ``live`` field, which decides whose deltas
the sink publishes, change together, and an entry on ``lv:{m}:progress`` wakes every gateway.

On a store cluster each shard's ``live`` hash is in a slot of its own, which no transaction
spans, so a switch takes three steps, each safe to repeat: every shard first publishes the new
version's deltas as well as the serving one's (field ``<pipeline>:next``); then one transaction
of the control keys moves readers; then every shard publishes the new version's alone. Between
the steps readers see no mix: a subscriber takes only the deltas of the version it was served
(the version is part of its event ids' epoch), and the gateway gives every subscriber of the
pipeline the new version's snapshot once ``lv:{m}:active`` changes. A switch cut short after
the first step completes when asked again; ``abort`` puts the shards back as they were.

``lv:{m}:versions``        hash pipeline -> JSON: ``active``, ``next``, ``retired``, ``request``
``lv:{m}:versions:code``   hash ``<pipeline>@<version>`` -> the version's declaration (cloudpickle,
                       by value), so the serving version keeps running after its code changed

This module does not import Spark: the gateway and the command line read it too.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import orjson
import redis

from liveviews.app import VERSION_RE
from liveviews.changes.topic import (
    ACTIVE_KEY,
    FRONTIER_KEY,
    PROGRESS_STREAM,
    VIEWS_FRONTIER,
    live_key,
)
from liveviews.errors import ConfigurationError
from liveviews.log.events import entry_id_tuple
from liveviews.store.client import Client, is_cluster

log = logging.getLogger("liveviews.versions")

REGISTRY_KEY = "lv:{m}:versions"
CODE_KEY = "lv:{m}:versions:code"
REQUESTS = ("rebuild", "switch", "abort")


@dataclass(frozen=True)
class Version:
    """One version of a pipeline and the namespace its store keys and checkpoint carry."""

    version: str
    namespace: str
    started: float
    """When it was registered (seconds since the epoch)."""
    code: str = ""
    """The ``derive`` of the code it runs (its version, unless it was built again by hand)."""
    ended: float | None = None
    """When it stopped serving (retired versions)."""

    def qualified(self, pipeline: str) -> str:
        """Its name in the store and in Spark: ``entities``, ``entities@v2``."""
        return pipeline + self.namespace

    @property
    def runs(self) -> str:
        """The ``derive`` of the code it runs (``code``; its version in entries without one)."""
        return self.code or self.version


@dataclass
class Versions:
    """The versions of one pipeline."""

    pipeline: str
    active: Version | None = None
    next: Version | None = None
    retired: list[Version] = field(default_factory=list)
    request: dict[str, Any] | None = None
    """An operator's request (``kind``: rebuild, switch or abort; ``at``), for the pipeline
    process to act on."""
    aborted: str | None = None
    """A version an operator aborted: not built again by itself until a rebuild is asked."""

    def encode(self) -> bytes:
        return orjson.dumps({k: v for k, v in asdict(self).items() if k != "pipeline"})

    @classmethod
    def decode(cls, pipeline: str, raw: bytes) -> Versions:
        data = orjson.loads(raw)

        def version(v: Any) -> Version | None:
            return Version(**v) if v else None

        return cls(
            pipeline,
            active=version(data.get("active")),
            next=version(data.get("next")),
            retired=[Version(**v) for v in data.get("retired", [])],
            request=data.get("request"),
            aborted=data.get("aborted"),
        )


def namespace_of(version: str) -> str:
    return f"@{version}"


def composite_epoch(store_epoch: str, namespace: str) -> str:
    """The epoch part of an event id: the store's, and the version readers were served from
    (none for a store's first version), so an id of a replaced version never resumes."""
    return store_epoch if not namespace else f"{store_epoch}-{namespace[1:]}"


def split_epoch(epoch: str) -> tuple[str, str]:
    """The inverse of ``composite_epoch``: ``(store epoch, namespace)``."""
    store_epoch, dash, version = epoch.partition("-")
    return store_epoch, ("@" + version) if dash else ""


def code_field(pipeline: str, version: Version) -> str:
    return f"{pipeline}#{version.version}"


def read_code(client: Client, pipeline: str, version: Version) -> bytes | None:
    raw: Any = client.hget(CODE_KEY, code_field(pipeline, version))
    return bytes(raw) if raw is not None else None


def save_code(client: Client, pipeline: str, version: Version, code: bytes) -> None:
    client.hset(CODE_KEY, code_field(pipeline, version), code)


# -- the registry ------------------------------------------------------------------------------


def read(client: Client, pipeline: str) -> Versions | None:
    raw: Any = client.hget(REGISTRY_KEY, pipeline)
    return Versions.decode(pipeline, raw) if raw else None


def read_all(client: Client) -> dict[str, Versions]:
    raw: Any = client.hgetall(REGISTRY_KEY)
    return {p.decode(): Versions.decode(p.decode(), v) for p, v in sorted(raw.items())}


def active_namespaces(client: Client) -> dict[str, str]:
    """Pipeline -> the namespace readers are served from (absent: ``""``)."""
    raw: Any = client.hgetall(ACTIVE_KEY)
    return {p.decode(): n.decode() for p, n in raw.items()}


def _update(client: Client, pipeline: str, change: Any) -> Versions:
    """Read, change and write one pipeline's entry under WATCH: the pipeline process and the
    command line may both write it."""
    out: list[Versions] = []

    def run(pipe: Any) -> None:
        raw = pipe.hget(REGISTRY_KEY, pipeline)
        current = Versions.decode(pipeline, raw) if raw else Versions(pipeline)
        changed = change(current)
        pipe.multi()
        pipe.hset(REGISTRY_KEY, pipeline, changed.encode())
        out[:] = [changed]

    client.transaction(run, REGISTRY_KEY)
    return out[0]


def register(client: Client, pipeline: str, code: str, packed: bytes | None = None) -> Versions:
    """The pipeline's entry, creating it with version ``code`` serving if there is none. The
    first version a store runs keeps the bare names (and the checkpoint) a store had before
    versions existed, so an existing installation carries on without a rebuild."""
    created: list[Version] = []

    def change(v: Versions) -> Versions:
        if v.active is None:
            v.active = Version(code, "", time.time(), code)
            created[:] = [v.active]
        return v

    reg = _update(client, pipeline, change)
    if created and packed is not None:
        save_code(client, pipeline, created[0], packed)
    return reg


def begin(
    client: Client, pipeline: str, version: str, code: str, packed: bytes | None = None
) -> Versions:
    """Start building ``version`` (running ``code``) beside the serving one."""
    if VERSION_RE.fullmatch(version) is None:
        raise ConfigurationError(f"version {version!r} is not 1 to 32 letters, digits or '_'.")

    def change(v: Versions) -> Versions:
        if v.active is None:
            raise ConfigurationError(f"pipeline {pipeline!r} has never run: nothing to rebuild.")
        if v.next is None or v.next.version != version:
            v.next = Version(version, namespace_of(version), time.time(), code)
        v.aborted = None
        return v

    reg = _update(client, pipeline, change)
    if packed is not None and reg.next is not None:
        save_code(client, pipeline, reg.next, packed)
    return reg


def ask(client: Client, pipeline: str, kind: str) -> Versions:
    """Record an operator's request for the pipeline process (``liveviews rebuild`` ...)."""
    if kind not in REQUESTS:
        raise ValueError(kind)

    def change(v: Versions) -> Versions:
        if v.active is None:
            raise ConfigurationError(
                f"pipeline {pipeline!r} has never run in this store; start it first."
            )
        if kind in ("switch", "abort") and v.next is None:
            raise ConfigurationError(f"pipeline {pipeline!r} has no version being built.")
        v.request = {"kind": kind, "at": time.time()}
        return v

    return _update(client, pipeline, change)


def take_request(client: Client, pipeline: str) -> str | None:
    """The pending request, removed from the registry."""
    taken: list[str | None] = [None]

    def change(v: Versions) -> Versions:
        taken[0] = v.request["kind"] if v.request else None
        v.request = None
        return v

    if not (found := read(client, pipeline)) or found.request is None:
        return None
    _update(client, pipeline, change)
    return taken[0]


def abort(client: Client, pipeline: str, shards: int = 0) -> Version | None:
    """Drop the version being built from the registry; its state is for the caller to delete.
    On a store cluster, first make its ``shards`` publish the serving version's deltas only,
    as they did before a switch to it was cut short."""
    dropped: list[Version | None] = [None]
    current = read(client, pipeline)
    if is_cluster(client) and current is not None and current.active is not None:
        settle_live(client, pipeline, shards, current.active.namespace)

    def change(v: Versions) -> Versions:
        dropped[0] = v.next
        if v.next is not None:
            v.aborted = v.next.runs
            v.retired.append(replace(v.next, ended=time.time()))
        v.next = None
        return v

    _update(client, pipeline, change)
    return dropped[0]


def switch(client: Client, pipeline: str, shards: int) -> Versions:
    """Make the version being built serve readers, in one transaction: the registry,
    ``lv:{m}:active``, every shard's ``live`` field, and a progress entry with the new version's
    frontier that wakes each gateway's change feed. On a store cluster, in three steps (see the
    module's documentation)."""
    cluster = is_cluster(client)
    if cluster:
        reg = read(client, pipeline)
        if reg is None or reg.next is None or reg.active is None:
            raise ConfigurationError(f"pipeline {pipeline!r} has no version being built.")
        _publish_next(client, pipeline, shards, reg.next.namespace)
    out: list[Versions] = []

    def run(pipe: Any) -> None:
        registry = pipe.hgetall(REGISTRY_KEY)
        raw = registry.get(pipeline.encode())
        v = Versions.decode(pipeline, raw) if raw else Versions(pipeline)
        if v.next is None or v.active is None:
            raise ConfigurationError(f"pipeline {pipeline!r} has no version being built.")
        new, old = v.next, v.active
        frontier = pipe.hget(FRONTIER_KEY, new.qualified(pipeline)) or b"{}"
        # Every view's frontier (the oldest serving one) may move now, with no batch to move it.
        serving = [
            new.qualified(pipeline) if p.decode() == pipeline
            else Versions.decode(p.decode(), r).active.qualified(p.decode())  # type: ignore[union-attr]
            for p, r in registry.items() if Versions.decode(p.decode(), r).active
        ]  # fmt: skip
        frontiers = [orjson.loads(pipe.hget(FRONTIER_KEY, n) or b"{}") for n in serving]
        before = orjson.loads(pipe.hget(FRONTIER_KEY, VIEWS_FRONTIER) or b"{}")
        views = _oldest(frontiers, before)
        v.retired.append(replace(old, ended=time.time()))
        v.active, v.next, v.request = new, None, None
        pipe.multi()
        pipe.hset(REGISTRY_KEY, pipeline, v.encode())
        pipe.hset(ACTIVE_KEY, pipeline, new.namespace)
        for shard in range(0 if cluster else shards):
            pipe.hset(live_key(shard), pipeline, new.namespace)
        pipe.xadd(
            PROGRESS_STREAM,
            {"pipeline": new.qualified(pipeline), "batch": -1, "frontier": frontier,
             "switch": pipeline},
            maxlen=1000,
            approximate=True,
        )  # fmt: skip
        if views != before:
            encoded = orjson.dumps(views)
            pipe.hset(FRONTIER_KEY, VIEWS_FRONTIER, encoded)
            pipe.xadd(PROGRESS_STREAM,
                      {"pipeline": VIEWS_FRONTIER, "batch": -1, "frontier": encoded},
                      maxlen=1000, approximate=True)  # fmt: skip
        out[:] = [v]

    client.transaction(run, REGISTRY_KEY, FRONTIER_KEY)
    if cluster:
        assert out[0].active is not None
        try:
            settle_live(client, pipeline, shards, out[0].active.namespace)
        except redis.RedisError as exc:  # readers are switched: the rest is tidying up
            log.warning("pipeline %r: switched, but its shards still publish both versions'"
                        " deltas until its next start (%s)", pipeline, exc)  # fmt: skip
    return out[0]


def next_field(pipeline: str) -> str:
    """The field of a shard's ``live`` hash naming a version that publishes its deltas too,
    while a switch to it is under way on a store cluster (``sink.lua``)."""
    return f"{pipeline}:next"


def _publish_next(client: Client, pipeline: str, shards: int, namespace: str) -> None:
    """Every shard publishes ``namespace``'s deltas besides the serving version's."""
    with client.pipeline(transaction=False) as pipe:
        for shard in range(shards):
            pipe.hset(live_key(shard), next_field(pipeline), namespace)
        pipe.execute()


def settle_live(client: Client, pipeline: str, shards: int, namespace: str) -> None:
    """Every shard publishes the deltas of ``namespace`` alone: after a switch to it, or after
    the abort of a switch away from it."""
    with client.pipeline(transaction=False) as pipe:
        for shard in range(shards):
            pipe.hset(live_key(shard), pipeline, namespace)
            pipe.hdel(live_key(shard), next_field(pipeline))
        pipe.execute()


def _oldest(frontiers: list[dict[str, str]], before: dict[str, str]) -> dict[str, str]:
    """``before``, moved to the oldest offset of ``frontiers`` in each partition all of them
    have, where that is later (as ``frontier.lua`` does after a batch)."""
    out = dict(before)
    if not frontiers:
        return out
    for partition in set.intersection(*(set(f) for f in frontiers)):
        oldest = min((f[partition] for f in frontiers), key=entry_id_tuple)
        if partition not in out or entry_id_tuple(oldest) > entry_id_tuple(out[partition]):
            out[partition] = oldest
    return out


def forget(client: Client, pipeline: str, version: Version) -> None:
    """Remove a retired version from the registry once its state is deleted."""

    def change(v: Versions) -> Versions:
        v.retired = [r for r in v.retired if r.version != version.version]
        return v

    _update(client, pipeline, change)
    client.hdel(CODE_KEY, code_field(pipeline, version))
