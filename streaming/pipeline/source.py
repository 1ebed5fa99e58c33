"""The log as a Structured Streaming source, through PySpark's Python Data Source API.

Offsets are the log's entry ids per partition, ``{"0": "1732170000000-0", ...}``; Spark keeps
them in its checkpoint, so a restarted query reads exactly the entries after the last batch
it committed.

Two readers, chosen by ``readTasks`` (``LV_READ_TASKS``):

- ``0`` (the default), ``LogPrefetchReader``: the driver's source process reads a batch's
  events while it finds where the batch ends, and hands them to Spark as Arrow with the
  batch's plan; Spark's tasks take them from its block manager. No Python read task runs, and
  each event is read from the store once. A batch replayed after a restart is read again
  between its recorded offsets, by a Python task.
- ``N`` >= 1, ``LogStreamReader``: ``N`` Spark tasks read the log on executors, with a pickled
  copy of the reader, so the Redis client is created lazily there. On a cluster this spreads a
  backlog's reads over executors instead of passing every event through the driver.
"""

from __future__ import annotations

import base64
import functools
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
    SimpleDataSourceStreamReader,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from liveviews.app import App
from liveviews.changes.cuts import (
    CUTS_READ,
    CUTS_STREAM,
    Cut,
    before_cut,
    decode,
    end_at_cut,
    next_cut,
)
from liveviews.log.events import (
    FIELD_KEY,
    FIELD_PAYLOAD,
    FIELD_TIME,
    FIELD_TX,
    FIELD_TX_EVENTS,
    FIELD_TYPE,
    log_stream,
)
from liveviews.pipeline.views import EVENT_SCHEMA

if TYPE_CHECKING:
    from redis.retry import Retry

    from liveviews.log.screen import Screen
    from liveviews.store.client import Client

T = TypeVar("T")
SOURCE_NAME = "liveviews-log"
ARROW_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32(), False),
        pa.field("offset", pa.string(), False),
        pa.field("type", pa.string()),
        pa.field("key", pa.string()),
        pa.field("payload", pa.string()),
        pa.field("event_time_ms", pa.int64()),
        pa.field("ingest_time_ms", pa.int64()),
    ]
)
READ_CHUNK = 5000
STORE_OUTAGE_S = 60
"""How long a read waits for an unreachable (restarting, still loading) store before it fails."""
_clients: dict[tuple[str, bool], Client] = {}
_screens: dict[tuple[str, str, str], Screen] = {}
ScreenSpec = tuple[str, str]
"""(``screen_option(app)``, pipeline name) of the pipeline a source reads for; empty for none."""


def screen_option(app: App) -> str:
    """The application's event types, as the ``screen`` option of the source: its Python
    workers decode entries with them (``liveviews.log.screen``). By value, so an application
    declared anywhere (a test, a notebook) is screened as it was declared."""
    return base64.b64encode(cloudpickle.dumps(App(app.name, event_types=app.event_types))).decode()


def store_retry() -> Retry:
    """Retries of a store command for about ``STORE_OUTAGE_S``: 50 ms doubling up to 2 s.

    Only for commands whose repetition changes nothing: the source's reads, and the sink's
    writes, which are idempotent by batch id. A restarted store (SIGKILL, upgrade) is then a
    pause of the pipeline, not a failed query that needs someone to restart it.
    """
    import redis
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry

    backoff = ExponentialBackoff(cap=2.0, base=0.05)
    delays, retries = 0.0, 0
    while delays < STORE_OUTAGE_S:
        retries += 1
        delays += min(2.0, 0.05 * 2**retries)
    return Retry(backoff, retries, supported_errors=(redis.ConnectionError, redis.TimeoutError))


def _client(url: str, *, log: bool = False) -> Client:
    """One client per URL per Python worker; workers are reused across tasks.

    The log (``log``) is read from the replicas on a store cluster: a batch then holds only
    entries that survive their primary failing over, never one a failover loses (and whose
    appender, not acknowledged, appends it again), which would count it twice in the views.
    The client library is imported here, not with the module: Spark also starts Python
    processes that only ask the source for its schema or plan its reads, and never read."""
    from liveviews.store.client import connect, learn_replicas

    client = _clients.get((url, log))
    if client is None:
        client = _clients[(url, log)] = connect(url, replica_reads=log, retry=store_retry())
    learn_replicas(client)
    return client


class LogRanges(InputPartition):
    """One read task: for each of some log partitions, the entries after ``start`` (exclusive)
    up to ``end`` (inclusive). Fewer, larger tasks: each task costs a Python worker round trip,
    which on a small machine outweighs reading a few partitions one after another."""

    def __init__(self, ranges: list[tuple[int, str, str]]) -> None:
        self.ranges = ranges


class LogStreamReader(DataSourceStreamReader):
    def __init__(
        self, url: str, partitions: int, max_events: int, read_tasks: int, screen: ScreenSpec
    ) -> None:
        self.url = url
        self.log_partitions = partitions
        self.max_events = max_events
        self.read_tasks = read_tasks
        self.screen = screen

    def initialOffset(self) -> dict[str, str]:
        return _initial_offset(self.log_partitions)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_events)

    def latestOffset(self, start: dict[str, str], limit: ReadLimit) -> dict[str, str]:
        pipeline = self.screen[1]
        if isinstance(limit, ReadMaxRows) and not isinstance(limit, ReadAllAvailable):
            answers = _next_entries(self.url, start, self.log_partitions, limit.max_rows,
                                    pipeline)  # fmt: skip
            latest = [entries[-1][0] if entries else None for entries in answers]
            cuts: list[Cut] = []  # ``_next_entries`` ended the read at the next one already
        else:
            # The heads of every partition at one instant (``_every_partition``), so a source
            # transaction appended in one MULTI is wholly before or after them.
            heads, cuts = _heads(self.url, self.log_partitions, pipeline)
            latest = [entries[0][0] if entries else None for entries in heads]
        end = dict(start)
        for p, entry_id in enumerate(latest):
            if entry_id is not None:
                end[str(p)] = entry_id.decode()
        return end_at_cut(pipeline, start, end, cuts)

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> Sequence[InputPartition]:
        changed = _changed_ranges(start, end)
        tasks = min(self.read_tasks, len(changed))
        return [LogRanges(changed[i::tasks]) for i in range(tasks)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LogRanges)
        client = _client(self.url, log=True)
        screen = worker_screen(self.url, self.log_partitions, self.screen)
        for p, start, end in partition.ranges:
            yield from _read_range(client, p, start, end, screen)

    def commit(self, end: dict[str, str]) -> None:
        """The log is the source of truth and is never trimmed by a reader."""


class LogPrefetchReader(SimpleDataSourceStreamReader):
    """Reads each batch on the driver as Spark plans it (``readTasks`` = 0)."""

    def __init__(self, url: str, partitions: int, max_events: int, screen: ScreenSpec) -> None:
        self.url = url
        self.log_partitions = partitions
        self.max_events = max_events
        self.screen = screen

    def initialOffset(self) -> dict[str, str]:
        return _initial_offset(self.log_partitions)

    def read(self, start: dict[str, str]) -> tuple[Iterator[pa.RecordBatch], dict[str, str]]:
        """The events after ``start``, up to ``max_events`` spread over the partitions, and
        where they end. Spark keeps a copy of the iterator until the batch commits."""
        answers = _next_entries(self.url, start, self.log_partitions, self.max_events,
                                self.screen[1])  # fmt: skip
        end, batches = dict(start), []
        for p, entries in enumerate(answers):
            if entries:
                end[str(p)] = entries[-1][0].decode()  # set-aside entries are read all the same
        screen = worker_screen(self.url, self.log_partitions, self.screen)
        for p, kept in _passing(screen, list(enumerate(answers))):
            if kept:
                batches.append(_record_batch(p, kept))
        return iter(batches), end

    def readBetweenOffsets(
        self, start: dict[str, str], end: dict[str, str]
    ) -> Iterator[pa.RecordBatch]:
        """A batch again, exactly as first read: on a restart, its recorded offsets."""
        client = _client(self.url, log=True)
        screen = worker_screen(self.url, self.log_partitions, self.screen)
        for p, first, last in _changed_ranges(start, end):
            yield from _read_range(client, p, first, last, screen)

    def commit(self, end: dict[str, str]) -> None:
        """The log is the source of truth and is never trimmed by a reader."""


def _initial_offset(partitions: int) -> dict[str, str]:
    return {str(p): "0-0" for p in range(partitions)}


def _changed_ranges(start: dict[str, str], end: dict[str, str]) -> list[tuple[int, str, str]]:
    """(partition, after, up to) for each log partition that a batch from ``start`` to ``end``
    reads."""
    return [
        (int(p), start.get(p, "0-0"), end[p])
        for p in sorted(end, key=int)
        if end[p] != start.get(p, "0-0")
    ]


def _next_entries(
    url: str, start: dict[str, str], partitions: int, limit: int, pipeline: str = ""
) -> list[Any]:
    """Each partition's entries after ``start``, up to ``limit`` spread over the partitions,
    ending where no source transaction is cut in two (``whole_transactions``), and at the next
    cut for ``pipeline`` (``liveviews.changes.cuts``) when the read goes past it. When the cap
    would leave nothing, a transaction holding more than a partition's share of it, the share
    doubles until the read holds it whole."""
    per_partition = max(1, limit // partitions)
    while True:
        # Every partition read at one instant (``_every_partition``), so a source transaction
        # appended in one MULTI is wholly in the read or wholly after it, but for the cap; and
        # so is a cut, which ``cut.lua`` appends at one instant with the heads it holds.
        answers, cuts = _read_all(url, partitions, start, per_partition, pipeline)
        cut = next_cut(pipeline, start, cuts)
        if cut is not None:
            answers = [[e for e in entries if before_cut(e[0].decode(), str(p), cut)]
                       for p, entries in enumerate(answers)]  # fmt: skip
        whole = whole_transactions(answers)
        if any(whole) or not any(answers):
            return whole
        if all(len(entries) < per_partition for entries in answers):
            return answers  # read to the heads: a transaction the log holds only part of
        per_partition *= 2  # one transaction larger than the cap: read until it is whole


def _heads(url: str, partitions: int, pipeline: str = "") -> tuple[list[Any], list[Cut]]:
    """Each partition's newest entry, all read at one instant (``_every_partition``), and the
    newest cuts if the read is for a ``pipeline``."""

    def read() -> tuple[list[Any], list[Cut]]:
        with _every_partition(_client(url, log=True)) as pipe:
            for p in range(partitions):
                pipe.xrevrange(log_stream(p), count=1)
            return _with_cuts(pipe, pipeline)

    return _retrying(read, url, "reading the log's heads")


def _read_all(
    url: str, partitions: int, start: dict[str, str], per_partition: int, pipeline: str = ""
) -> tuple[list[Any], list[Cut]]:
    """Up to ``per_partition`` entries of each partition after ``start``, all read at one
    instant (``_every_partition``), and the newest cuts if the read is for a ``pipeline``."""

    def read() -> tuple[list[Any], list[Cut]]:
        with _every_partition(_client(url, log=True)) as pipe:
            for p in range(partitions):
                after = _after(start.get(str(p), "0-0"))
                pipe.xrange(log_stream(p), min=after, count=per_partition)
            return _with_cuts(pipe, pipeline)

    return _retrying(read, url, "reading the log")


def _with_cuts(pipe: Any, pipeline: str) -> tuple[list[Any], list[Cut]]:
    """The answers of ``pipe``'s reads, and the newest cuts, read with them for a pipeline."""
    if not pipeline:
        return list(pipe.execute()), []
    pipe.xrevrange(CUTS_STREAM, count=CUTS_READ)
    *answers, cuts = pipe.execute()
    return answers, decode(cuts)


def _retrying(read: Callable[[], T], url: str, what: str) -> T:
    """``read()`` through a store's restart or a cluster's failover (``storeclient.retrying``)."""
    from liveviews.store.client import retrying

    return retrying(read, _client(url, log=True), what)


def _every_partition(client: Client) -> Any:
    """A pipeline for one read of every log partition: one transaction on a single server.

    On a store cluster the partitions live in different slots, which no transaction spans, so
    the reads are a plain pipeline. Each partition's read is still consistent on its own (a
    stream read is atomic, and a partition only grows at its end). Reading all of them at one
    instant matters only for a source transaction appended over several partitions in one
    MULTI, which only change data capture writes, and it refuses to run on a cluster."""
    from liveviews.store.client import is_cluster

    return client.pipeline(transaction=not is_cluster(client))


def whole_transactions(answers: list[Any]) -> list[Any]:
    """``answers`` (each partition's entries, in order) without the transactions they hold only
    part of, and without what follows such a part in its partition, so that a batch ends
    between source transactions and their changes become visible in the views together.

    A transaction's entries are contiguous in each partition (one MULTI appends them) and say
    how many there are over all partitions (``FIELD_TX_EVENTS``). Cutting a partition can leave
    another transaction in part, so it repeats until nothing is cut."""
    if not any(FIELD_TX in fields for entries in answers for _, fields in entries):
        return answers  # the usual case: no event from a database's changes in this read
    kept = list(answers)
    while True:
        seen: dict[bytes, int] = {}
        size: dict[bytes, int] = {}
        for entries in kept:
            for _, fields in entries:
                tx = fields.get(FIELD_TX)
                if tx is not None:
                    seen[tx] = seen.get(tx, 0) + 1
                    size[tx] = int(fields[FIELD_TX_EVENTS])
        partial = {tx for tx, n in seen.items() if n < size[tx]}
        if not partial:
            return kept
        kept = [_before(entries, partial) for entries in kept]


def _before(entries: list[Any], txs: set[bytes]) -> list[Any]:
    """``entries`` up to the first one of a transaction in ``txs``."""
    for i, (_, fields) in enumerate(entries):
        if fields.get(FIELD_TX) in txs:
            return entries[:i]
    return entries


def _read_range(
    client: Client, p: int, start: str, end: str, screen: Screen | None
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of up to READ_CHUNK events."""
    from liveviews.store.client import retrying

    stream, cursor = log_stream(p), start
    behind = Backlog(p, end)
    # ``end`` is an entry's own id (a batch ends at an entry it read), so the read is done
    # exactly when it reaches it; short of it, the replica read is behind its primary.
    while cursor != end:
        read = functools.partial(client.xrange, stream, _after(cursor), end, READ_CHUNK)
        entries: Any = retrying(read, client, f"reading partition {p}")
        if not entries:
            behind.wait()
            continue
        kept = _passing(screen, [(p, entries)])[0][1]
        if kept:
            yield _record_batch(p, kept)
        cursor = entries[-1][0].decode()


class Backlog:
    """Waits, a little longer each time, for a replica to hold a log partition up to ``end``;
    after ``STORE_OUTAGE_S`` the batch fails, saying so (Spark then tries it again)."""

    def __init__(self, p: int, end: str) -> None:
        self.p, self.end = p, end
        self.pause = 0.01
        self.deadline: float | None = None

    def wait(self) -> None:
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now + STORE_OUTAGE_S
        elif now > self.deadline:
            raise RuntimeError(
                f"log partition {self.p} holds no entry {self.end} after {STORE_OUTAGE_S} s, "
                "though the batch was planned up to it: is a replica of the store cluster "
                "far behind its primary, or did a failover lose acknowledged entries?"
            )
        time.sleep(self.pause)
        self.pause = min(0.5, self.pause * 2)


def _record_batch(p: int, entries: list[Any]) -> pa.RecordBatch:
    """Log entries of partition ``p`` as rows of ``EVENT_SCHEMA``."""
    ids = [e[0].decode() for e in entries]
    fields = [e[1] for e in entries]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([p] * len(ids), pa.int32()),
            pa.array(ids, pa.string()),
            pa.array([f[FIELD_TYPE].decode() for f in fields], pa.string()),
            pa.array([f[FIELD_KEY].decode() for f in fields], pa.string()),
            pa.array([f[FIELD_PAYLOAD].decode() for f in fields], pa.string()),
            pa.array([int(f[FIELD_TIME]) for f in fields], pa.int64()),
            pa.array([int(i.partition("-")[0]) for i in ids], pa.int64()),
        ],
        schema=ARROW_SCHEMA,
    )


def worker_screen(url: str, partitions: int, spec: ScreenSpec) -> Screen | None:
    """The pipeline's screen (``liveviews.log.screen``), one per Python worker; None when the
    source reads for no pipeline (a benchmark's bound, a test of the source alone)."""
    event_types, pipeline = spec
    if not event_types or not pipeline:
        return None
    found = _screens.get((url, event_types, pipeline))
    if found is None:
        from liveviews.log.screen import Screen

        app = cloudpickle.loads(base64.b64decode(event_types))
        found = Screen(_client(url), app, pipeline, partitions)
        _screens[(url, event_types, pipeline)] = found
    return found


def _passing(screen: Screen | None, answers: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    return answers if screen is None else screen.passing(answers)


def _after(entry_id: str) -> str:
    return "-" if entry_id == "0-0" else f"({entry_id}"


class LogDataSource(DataSource):
    """``spark.readStream.format("liveviews-log").option("url", ...).load()``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return EVENT_SCHEMA

    def _log(self) -> tuple[str, int, int]:
        """The store's URL, the log's partition count and the batch limit."""
        return (
            self.options["url"],
            int(self.options.get("partitions", "4")),
            int(self.options.get("maxEventsPerBatch", "100000")),
        )

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        read_tasks = int(self.options.get("readTasks", "0"))
        if read_tasks < 1:  # Spark then asks simpleStreamReader
            raise PySparkNotImplementedError(
                errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"}
            )
        return LogStreamReader(*self._log(), read_tasks=read_tasks, screen=self._screen_spec())

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        return LogPrefetchReader(*self._log(), screen=self._screen_spec())

    def _screen_spec(self) -> ScreenSpec:
        return self.options.get("screen", ""), self.options.get("pipeline", "")
