"""Every setting of every process, declared once. Each process reads its own through these
declarations; docs/CONFIGURATION.md is generated from them (``python -m liveviews.config.page``)
and ``liveviews config`` shows them. The docs are Markdown, relative to ``docs/``."""

from __future__ import annotations

import functools

from liveviews.config.declare import (
    Choice,
    Custom,
    Folder,
    Rate,
    Seconds,
    Setting,
    Switch,
    Text,
    Whole,
)
from liveviews.config.values import (
    MAX_NICENESS,
    algorithms,
    niceness,
    origins,
    retention,
    share_or_size,
    size_or_off,
)

LOG_LEVELS = ("debug", "info", "warning", "error")
NAME_PATTERN = r"[a-z_][a-z0-9_]{0,62}"


EVERY, STORE, PIPELINE, GATEWAY, CDC, DEMO, INTERNAL = (
    "every", "store", "pipeline", "gateway", "cdc", "demo", "internal"
)  # fmt: skip

# Every process

CONFIG = Setting(
    "LV_CONFIG", Text("a path"), None, section=EVERY, shown="none", filed=False,
    doc="a settings file (TOML) to read before the environment, which overrides it; each "
    "process's `--config FILE` sets it. Its keys are the variables' names without `LV_`, in "
    'lower case (`port = 8001`, `redis_url = "redis://..."`), and a `[spark_conf]` table sets '
    'Spark\'s settings by their own names (`"spark.executor.memory" = "4g"`). An unknown key or '
    "a value a setting cannot take stops the start with a sentence naming the key and the file; "
    "`liveviews config` shows every setting's value and where it came from",
)  # fmt: skip
REDIS_URL = Setting(
    "REDIS_URL", Text("a redis:// or rediss:// URL"), None, section=EVERY, secret=True,
    shown="unset: embedded store", doc="a Redis or Valkey server to use instead",
)  # fmt: skip
DATA_DIR = Setting(
    "LV_DATA_DIR", Text("a path"), "data", section=EVERY, shown="`./data`",
    doc="embedded store files, Spark checkpoints, each process's log file "
    "(`logs/<process>.log`) and, in local mode, Spark's scratch files (`spark-local/<pid>`; a "
    "start removes those of pipelines that no longer run)",
)  # fmt: skip
LOG_LEVEL = Setting(
    "LV_LOG_LEVEL",
    Choice(
        LOG_LEVELS, quoted=False,
        explain="'info' shows each process's start, readiness and errors, 'debug' adds Spark's "
        "and the libraries' routine lines, 'warning' and 'error' show only what is at least "
        "that serious.",
    ),
    "info", section=EVERY,
    doc="what each process shows on the console: `info` its start, its readiness, warnings and "
    "errors; `debug` also Spark's lines (from INFO up), the Spark driver's own output and the "
    "libraries' routine lines, which otherwise go only to `$LV_DATA_DIR/logs/<process>.log` "
    "(`pipeline.log` for Spark's); `warning` or `error` only what is at least that serious. In "
    "every line the gateway writes, a token (`access_token=`, `Authorization: Bearer`, "
    "`lv_token=`, any JWT) shows as `[redacted]`",
)  # fmt: skip
APP = Setting(
    "LV_APP", Text("module:attribute", r"[\w.]+:[\w.]+"), "demo.chirp:app", section=EVERY,
    doc="the application, as `module:attribute`",
)  # fmt: skip
APP_DIR = Setting(
    "LV_APP_DIR", Text("a path"), None, section=EVERY, shown="the current directory",
    doc="the folder `LV_APP`'s module is imported from, besides the installed packages (every "
    "process, and the pipeline's Spark workers, import it from there)",
)  # fmt: skip
LOG_PARTITIONS = Setting(
    "LV_LOG_PARTITIONS", Whole(), 4, section=EVERY,
    doc="log partitions (fixed once the store has data)",
)  # fmt: skip
CHANGE_SHARDS = Setting(
    "LV_CHANGE_SHARDS", Whole(), 16, section=EVERY,
    doc="change-topic shards (fixed once the store has data)",
)  # fmt: skip
CHANGE_RETENTION = Setting(
    "LV_CHANGE_RETENTION", Whole(10), 10_000, section=EVERY,
    doc="deltas kept per shard; older resumes get a reset and a fresh snapshot",
)  # fmt: skip
KAFKA = Setting(
    "LV_KAFKA", Text("Kafka bootstrap servers (host:port, comma-separated)",
                     r"[\w.\-\[\]:]+:\d+(,[\w.\-\[\]:]+:\d+)*"),
    None, section=EVERY, shown="unset: the log is in the store",
    doc="the bootstrap servers of an Apache Kafka cluster that holds the log, in the topic "
    "`liveviews.log` (created with `LV_LOG_PARTITIONS` partitions if absent, kept forever), "
    "instead of the store's streams: the gateway appends to it with Kafka's idempotent producer "
    "(`acks=all`) and the pipelines read it with Spark's Kafka source. The change topic, "
    "frontiers and idempotency records stay in the store. What differs on Kafka (Real-Time "
    "Mode's readers and waits, groups) is listed in "
    "[Apache Kafka as the log](SCALING.md#apache-kafka-as-the-log)",
)  # fmt: skip
KAFKA_TOPIC = Setting(
    "LV_KAFKA_TOPIC", Text("a Kafka topic name", r"[A-Za-z0-9._\-]{1,249}"), "liveviews.log",
    section=EVERY,
    doc="the topic of `LV_KAFKA` that holds the log: one per application, so that several can "
    "share a Kafka cluster",
)  # fmt: skip
LOG_RETENTION = Setting(
    "LV_LOG_RETENTION",
    Custom("off, a number of events, or an age (30d, 12h, 90m, 3600s)", retention),
    None, section=EVERY, shown="`off`",
    doc="how much of each log partition an append keeps: `off` (all of it), a number of events "
    "(`1000000`), or an age by the time the store took them (`30d`, `12h`, `90m`, `3600s`); "
    "trimmed in whole nodes of the stream, so a little more is kept, never less. The views are "
    "computed from the log: a view rebuilt after a trim (a new view, a removed checkpoint) sees "
    "only the events that remain ([durability](reliability/durability.md#log-retention))",
)  # fmt: skip
WAIT_FOR_STORE = Setting(
    "LV_WAIT_FOR_STORE", Whole(0), 0, section=EVERY,
    shown="`0` (`30` under `make run` and `liveviews dev`, `60` under `make run-cluster`)",
    doc="seconds a process waits at its start for the store to answer (and, for a cluster, to "
    "serve every slot) before it gives up",
)  # fmt: skip
STORE_ACK_REPLICAS = Setting(
    "LV_STORE_ACK_REPLICAS", Whole(0), 0, section=EVERY,
    doc="on a store with replicas, every writer waits until this many replicas have each write "
    "(`WAIT`), or fails it ([SCALING](SCALING.md))",
)  # fmt: skip

# The embedded store

EMBEDDED_PORT = Setting(
    "LV_EMBEDDED_PORT", Whole(), 6390, section=STORE, doc="port of the embedded store",
)  # fmt: skip
# A quarter of the machine's memory leaves the rest to Spark, the gateway, and the copy of the
# store its append-only file's rewrite makes (copy-on-write).
STORE_MAXMEMORY = Setting(
    "LV_STORE_MAXMEMORY", Custom("a share (25%), a size (512mb, 2gb) or off", share_or_size),
    "25%", section=STORE,
    doc="the most the embedded store holds: a share of the machine's memory (or of its "
    "container's limit), a size (`512mb`, `2gb`) or `off`. Full, it refuses writes and never "
    "evicts (`noeviction`): evicting would silently drop events of the log. The gateway stops "
    "taking events before (`LV_STORE_FULL_PERCENT`). The embedded store also asks for a "
    "password, made on first start into `$LV_DATA_DIR/store/password` (mode 0600) and read from "
    "there by every process that uses the embedded store; URLs in logs show it as `***`",
)  # fmt: skip
STORE_DISK_RESERVE = Setting(
    "LV_STORE_DISK_RESERVE", Custom("a size (64mb, 1gb) or off", size_or_off), 64 * 1024**2,
    section=STORE, shown="`64mb`",
    doc="free space the embedded store keeps on its disk: below it, the store takes no writes "
    "(publishes answer 503 `store_disk_full`, the pipeline waits) and keeps serving reads, and "
    "once there is half as much again free it takes them as before. Without it a full disk "
    "would stop the store: under `LV_STORE_FSYNC=always` a server that cannot write its "
    "append-only file exits rather than acknowledge what it could not keep "
    "([durability](reliability/durability.md)); `off` turns the guard off",
)  # fmt: skip
STORE_ALLOCATOR = Setting(
    "LV_STORE_ALLOCATOR",
    Choice(
        ("jemalloc", "builtin"),
        explain="'jemalloc' runs the embedded store with jemalloc when the machine has it, "
        "'builtin' with the allocator its server was built with.",
    ),
    "jemalloc", section=STORE,
    doc="the embedded store's allocator: `jemalloc` (installed by `scripts/setup.sh`) when the "
    "machine has it, about half the store's CPU per row change of the server's own; `builtin` "
    "keeps the allocator its server was built with",
)  # fmt: skip
STORE_FSYNC = Setting(
    "LV_STORE_FSYNC",
    Choice(
        ("always", "everysec"),
        explain="'always' syncs every write to disk before it is acknowledged, 'everysec' once "
        "a second.",
    ),
    "always", section=STORE,
    doc="the embedded store's AOF fsync: `always` keeps every acknowledged event through any "
    "crash; `everysec` is faster and can lose ~2 s of them "
    "([durability](reliability/durability.md))",
)  # fmt: skip
STORE_CLUSTER_PRIMARIES = Setting(
    "LV_STORE_CLUSTER_PRIMARIES", Whole(), 3, section=STORE,
    doc="primaries of the store cluster `python -m liveviews.store.cluster` starts on this machine "
    "(`make run-cluster`), each with a replica",
)  # fmt: skip

# The pipeline

SPARK_MASTER = Setting(
    "SPARK_MASTER", Text("a Spark master URL"), None, section=PIPELINE,
    shown="`local[2×cores]` (`local[4]` on 2 cores)",
    doc="any Spark master URL, e.g. `spark://host:7077`, runs the same job on a cluster. "
    "Locally, twice as many task slots as cores: Spark never preempts a task, so a rebuild's "
    "long tasks would otherwise keep the serving queries' batches waiting "
    "([rebuilds](performance/rebuild.md))",
)  # fmt: skip
CHECKPOINT_DIR = Setting(
    "LV_CHECKPOINT_DIR", Text("a path or a Hadoop URI"), None, section=PIPELINE,
    shown="`$LV_DATA_DIR/checkpoints`",
    doc="Spark checkpoint location (HDFS/S3 paths work on a cluster)",
)  # fmt: skip
TRIGGER_INTERVAL = Setting(
    "LV_TRIGGER_INTERVAL", Text("a Spark interval (0 seconds, 500 milliseconds)"), "0 seconds",
    section=PIPELINE,
    doc="time between micro-batches, for each pipeline that declares no `trigger_interval`",
)  # fmt: skip
REALTIME = Setting(
    "LV_REALTIME",
    Choice(
        ("on", "off"),
        explain="'on' runs the pipelines declared realtime=True in Spark's Real-Time Mode, "
        "'off' runs every pipeline in micro-batches.",
    ),
    "on", section=PIPELINE,
    doc="`on`: pipelines declared `realtime=True` run in Spark's Real-Time Mode; `off`: every "
    "pipeline runs in micro-batches (a master without the task slots it needs, a comparison). "
    "A pipeline moved in or out of the mode is rebuilt ([REALTIME.md](REALTIME.md))",
)  # fmt: skip
REALTIME_INTERVAL = Setting(
    "LV_REALTIME_INTERVAL",
    Text("an interval of 1 second or more (5 seconds, 1500 milliseconds)",
         r"[0-9]+ (millisecond|second|minute)s?"),
    "5 seconds", section=PIPELINE,
    doc="time between the checkpoints of a pipeline in Real-Time Mode that declares no "
    "`trigger_interval`: the records that arrive at one wait for it, a restarted query reads "
    "again what came since the last, and `reflects()` waits for the next unless its client "
    "sends `wait`, which ends the epoch early ([REALTIME.md](REALTIME.md))",
)  # fmt: skip
SHUFFLE_PARTITIONS = Setting(
    "LV_SHUFFLE_PARTITIONS", Whole(), 2, section=PIPELINE,
    doc="`spark.sql.shuffle.partitions` (Spark's default of 200 makes tiny batches slow)",
)  # fmt: skip
MAX_EVENTS_PER_BATCH = Setting(
    "LV_MAX_EVENTS_PER_BATCH", Whole(), 100_000, section=PIPELINE,
    doc="admission control when draining a backlog",
)  # fmt: skip
REBUILD_SWITCH = Setting(
    "LV_REBUILD_SWITCH",
    Choice(
        ("auto", "manual"),
        explain="'auto' switches readers once a rebuilt version has caught up, 'manual' when "
        "an operator runs liveviews switch.",
    ),
    "auto", section=PIPELINE,
    doc="`auto`: readers move to a rebuilt pipeline version once it has caught up; `manual`: "
    "when an operator runs `liveviews switch`",
)  # fmt: skip
REBUILD_SWITCH_DISTANCE = Setting(
    "LV_REBUILD_SWITCH_DISTANCE", Whole(0), 100, section=PIPELINE,
    doc="a rebuilt version has caught up within this many events of the serving one",
)  # fmt: skip
REBUILD_GRACE_SECONDS = Setting(
    "LV_REBUILD_GRACE_SECONDS", Whole(0), 60, section=PIPELINE,
    doc="how long a replaced version's state is kept before it is deleted",
)  # fmt: skip
REBUILD_NICENESS = Setting(
    "LV_REBUILD_NICENESS", Custom(f"idle, or a niceness from 0 to {MAX_NICENESS}", niceness),
    "idle", section=PIPELINE,
    doc="on a local master, a version being built runs in a process of its own at the lowest "
    "CPU priority, in the kernel's idle class (`SCHED_IDLE`), so that the serving queries get "
    "the cores first and readers' latency keeps its bounds during a rebuild "
    "([rebuilds](performance/rebuild.md)); a number from 1 to 19 runs it that much nicer than "
    "the pipeline instead, with a share of the cores however busy the serving queries are; `0` "
    "builds it in the pipeline process",
)  # fmt: skip
REBUILD_MAX_EVENTS_PER_BATCH = Setting(
    "LV_REBUILD_MAX_EVENTS_PER_BATCH", Whole(), 10_000, section=PIPELINE,
    doc="the most events a version being built reads per micro-batch, never more than "
    "`LV_MAX_EVENTS_PER_BATCH` (pipelines with a `trigger_interval` of their own keep "
    "`LV_MAX_EVENTS_PER_BATCH`): short tasks leave task slots to the serving versions, for a "
    "longer rebuild",
)  # fmt: skip
READ_TASKS = Setting(
    "LV_READ_TASKS", Whole(0), 0, section=PIPELINE,
    doc="`0`: the driver reads each micro-batch while planning it and hands the events to Spark "
    "(no read task; lowest latency on one machine); `N`: N Spark tasks read the log on "
    "executors (spreads a backlog's reads over a cluster)",
)  # fmt: skip
DRIVER_MEMORY = Setting(
    "LV_DRIVER_MEMORY", Text("a JVM heap size (4g, 512m)", r"\d+[kKmMgGtT]?"), "4g",
    section=PIPELINE,
    doc="the Spark driver's heap (a backlog batch's changes are collected there)",
)  # fmt: skip
CLASS_ARCHIVE = Setting(
    "LV_CLASS_ARCHIVE", Text("a path, or off"), None, section=PIPELINE,
    shown="`~/.cache/liveviews/spark-classes-<key>.jsa`",
    doc="the JVM class archive the pipeline's driver starts from (`off`: none); `python -m "
    "liveviews.pipeline.tuning.classarchive --rebuild` rebuilds it "
    "([start-up tuning](#start-up-tuning))",
)  # fmt: skip
PYTHON_LAUNCHER = Setting(
    "LV_PYTHON_LAUNCHER", Switch(), True, section=PIPELINE,
    doc="in local mode, the Python processes Spark starts for the pipeline import the installed "
    "PySpark, with its compiled bytecode, instead of Spark's zipped copy of it, when they run the "
    "pipeline's own interpreter (`PYSPARK_PYTHON` unset or naming it); `off`: Spark starts them "
    "as it would",
)  # fmt: skip
SPARK_CONF = Setting(
    "LV_SPARK_CONF_<NAME>", Text("a Spark setting's value"), None, section=PIPELINE,
    family=True, key="[spark_conf]",
    doc="any Spark setting, `__` standing for `.`: `LV_SPARK_CONF_SPARK__EXECUTOR__MEMORY=4g` "
    "sets `spark.executor.memory` (a name in capitals is lowercased; any other keeps its case, "
    "for camel-case settings: `LV_SPARK_CONF_spark__eventLog__enabled=true`). In a settings file, "
    '`[spark_conf]` takes Spark\'s own names (`"spark.executor.memory" = "4g"`). '
    "`spark.driver.extraJavaOptions` is added after the pipeline's own JVM options",
)  # fmt: skip

# The gateway

HOST = Setting("LV_HOST", Text("an address"), "127.0.0.1", section=GATEWAY,
               doc="the address the gateway listens on")  # fmt: skip
PORT = Setting("LV_PORT", Whole(0), 8000, section=GATEWAY,
               doc="the port the gateway listens on (`0`: any free port)")  # fmt: skip
ENV = Setting(
    "LV_ENV", Choice(("dev", "production")), "dev", section=GATEWAY,
    doc="`production` requires `LV_JWT_SECRET` or an identity provider (`LV_JWT_ISSUER`) and "
    "has no dev tokens and no log feed (turning either on is refused at start). With "
    "`LV_JWT_SECRET` set, `LV_ENV` must be set too (`production`, or `dev` to try the secret "
    "locally, without dev tokens), else the gateway refuses to start",
)  # fmt: skip
JWT_SECRET = Setting(
    "LV_JWT_SECRET", Text("at least 32 bytes"), None, section=GATEWAY, secret=True,
    shown="the public dev secret, in dev only",
    doc="the HS256 secret that signs users' tokens; the public dev secret only in dev mode "
    "without `LV_JWT_SECRET`; in `production` with an identity provider, unset means that no "
    "HS256 token is taken",
)  # fmt: skip
JWT_AUDIENCE = Setting(
    "LV_JWT_AUDIENCE", Text(), "liveviews", section=GATEWAY,
    doc="the `aud` a user's token must carry",
)  # fmt: skip
JWT_ISSUER = Setting(
    "LV_JWT_ISSUER", Text("an http(s) URL", r"https?://\S+"), None, section=GATEWAY,
    shown="none",
    doc="an identity provider's issuer URL: tokens it signs (`LV_JWT_ALGORITHMS`) are taken, "
    "and must carry it as `iss`; its keys come from its OpenID Connect discovery document "
    "unless `LV_JWKS_URL` names them",
)  # fmt: skip
JWKS_URL = Setting(
    "LV_JWKS_URL", Text("an http(s) URL", r"https?://\S+"), None, section=GATEWAY,
    shown="the issuer's `jwks_uri`",
    doc="the identity provider's key set (JWKS); fetched again when a token names a key it does "
    "not hold, at most once every 5 s, and every 10 minutes",
)  # fmt: skip
JWT_ALGORITHMS = Setting(
    "LV_JWT_ALGORITHMS", Custom("a comma-separated list of RS256, ES256, EdDSA", algorithms),
    ("RS256", "ES256", "EdDSA"), section=GATEWAY, shown="RS256,ES256,EdDSA",
    doc="the signatures taken from the identity provider (HS256 is the secret's only)",
)  # fmt: skip
JWT_LEEWAY_SECONDS = Setting(
    "LV_JWT_LEEWAY_SECONDS", Whole(0, 300), 30, section=GATEWAY,
    doc="seconds of clock skew allowed when checking a token's `exp`, `nbf` and `iat`",
)  # fmt: skip
JWT_SUBJECT_CLAIM = Setting(
    "LV_JWT_SUBJECT_CLAIM", Text("a claim name, or a dotted path", r"[A-Za-z0-9_:/.-]+"), "sub",
    section=GATEWAY,
    doc="the claim of an identity provider's token that names its subject",
)  # fmt: skip
JWT_SCOPE_CLAIM = Setting(
    "LV_JWT_SCOPE_CLAIM", Text("a claim name, or a dotted path", r"[A-Za-z0-9_:/.-]+"), "scope",
    section=GATEWAY,
    doc="the claim of an identity provider's token that holds its scopes (`read`, `publish`): "
    "a space-separated string or a list, e.g. `realm_access.roles` for Keycloak's roles",
)  # fmt: skip
DEV_TOKENS = Setting(
    "LV_DEV_TOKENS", Switch(), None, section=GATEWAY, shown="on in `dev` without `LV_JWT_SECRET`",
    doc="`POST /v1/dev/token` signs a token for any user with the public dev secret; refused at "
    "start with `LV_ENV=production` or with `LV_JWT_SECRET` set",
)  # fmt: skip
DEV_TOKEN_TTL = Setting(
    "LV_DEV_TOKEN_TTL", Whole(), 3600, section=GATEWAY,
    doc="seconds a token from `POST /v1/dev/token` is valid",
)  # fmt: skip
CORS_ORIGINS = Setting(
    "LV_CORS_ORIGINS", Custom("comma-separated origins (scheme://host[:port])", origins), (),
    section=GATEWAY, shown="none",
    doc="comma-separated origins allowed to call the gateway (with credentials), each "
    "`scheme://host[:port]`; `*` is refused at start. Also the origins, beside the gateway's "
    "own, whose pages may publish or open a WebSocket with the `lv_token` cookie "
    "([PROTOCOL.md](PROTOCOL.md), section 1)",
)  # fmt: skip
MAX_BODY_BYTES = Setting("LV_MAX_BODY_BYTES", Whole(), 1_048_576, section=GATEWAY,
                         doc="the largest request body a publish may send")  # fmt: skip
MAX_BATCH_EVENTS = Setting("LV_MAX_BATCH_EVENTS", Whole(), 1000, section=GATEWAY,
                           doc="the most events one publish may carry")  # fmt: skip
PUBLISH_RATE = Setting(
    "LV_PUBLISH_RATE", Rate(), 100.0, section=GATEWAY,
    doc="events per second each subject (token `sub`) may publish on average; a batch counts "
    "its events, and one over the rate is refused whole with 429 `rate_limited` and "
    "`Retry-After`. `0` (or `off`): no limit. Each gateway process keeps its own buckets, for at "
    "most 100,000 subjects (the least recently active are forgotten first)",
)  # fmt: skip
PUBLISH_BURST = Setting(
    "LV_PUBLISH_BURST", Whole(), 1000, section=GATEWAY,
    doc="events a subject may publish at once after a pause; at least `LV_MAX_BATCH_EVENTS`",
)  # fmt: skip
EVENT_TIME_MAX_AHEAD_SECONDS = Setting(
    "LV_EVENT_TIME_MAX_AHEAD_SECONDS", Whole(0), 86_400, section=GATEWAY,
    doc="a published event's `time` may be at most this far after the gateway's clock, else 422 "
    "`time_out_of_range` (the pipeline's own appends, such as the demo's, are not bounded)",
)  # fmt: skip
EVENT_TIME_MAX_AGE_DAYS = Setting(
    "LV_EVENT_TIME_MAX_AGE_DAYS", Whole(), 3650, section=GATEWAY,
    doc="a published event's `time` may be at most this many days before the gateway's clock, "
    "else 422 `time_out_of_range`",
)  # fmt: skip
STORE_FULL_PERCENT = Setting(
    "LV_STORE_FULL_PERCENT", Whole(1, 100), 90, section=GATEWAY,
    doc="publishing answers 503 `store_full` while the store uses more than this share of its "
    "maxmemory (a store with no maxmemory is not guarded), so the pipeline keeps the rest to "
    "turn the log into views",
)  # fmt: skip
STORE_MEMORY_CHECK_MS = Setting(
    "LV_STORE_MEMORY_CHECK_MS", Whole(10), 500, section=GATEWAY,
    doc="how often, at most, a publish reads the store's `INFO memory`",
)  # fmt: skip
IDEMPOTENCY_SECONDS = Setting(
    "LV_IDEMPOTENCY_SECONDS", Whole(60), 86_400, section=GATEWAY,
    doc="how long a batch published with an idempotency key (the `Idempotency-Key` header, a "
    "WebSocket publish's `idempotency_key`, which `client-js` sends with every batch) is "
    "remembered, so that sent again it is answered with the same offsets and appended no second "
    "time; each batch's record costs the store ~160 bytes for that long "
    "([publishing once](performance/publish.md))",
)  # fmt: skip
APPEND_RETRY_SECONDS = Setting(
    "LV_APPEND_RETRY_SECONDS", Seconds(), 10.0, section=GATEWAY,
    doc="on a store cluster, how long a publish retries a log partition whose primary fails "
    "over before it answers 503 (`partial_append` when other partitions were appended: send the "
    "batch again with the same `Idempotency-Key`)",
)  # fmt: skip
MAX_CONNECTIONS = Setting("LV_MAX_CONNECTIONS", Whole(), 10_000, section=GATEWAY,
                          doc="connections one gateway process holds at most")  # fmt: skip
MAX_CONNECTIONS_PER_SUBJECT = Setting(
    "LV_MAX_CONNECTIONS_PER_SUBJECT", Whole(0), 100, section=GATEWAY,
    doc="connections one user (token subject) may hold in a process (429 past it; `0`: no cap)",
)  # fmt: skip
MAX_CONNECTIONS_PER_ADDRESS = Setting(
    "LV_MAX_CONNECTIONS_PER_ADDRESS", Whole(0), 1000, section=GATEWAY,
    doc="connections one client address may hold in a process (429 past it; `0`: no cap). The "
    "address is the one uvicorn reports: behind a proxy on another host, list the proxy in "
    "`FORWARDED_ALLOW_IPS` so that its `X-Forwarded-For` counts, or every client shares its "
    "address. Users behind one NAT share theirs, hence the larger default",
)  # fmt: skip
MAX_UNAUTHENTICATED = Setting(
    "LV_MAX_UNAUTHENTICATED", Whole(), 256, section=GATEWAY,
    doc="WebSockets that may wait to sign in at once, apart from `LV_MAX_CONNECTIONS` (a "
    "handshake with a valid token is signed in at once)",
)  # fmt: skip
WS_AUTH_TIMEOUT_SECONDS = Setting(
    "LV_WS_AUTH_TIMEOUT_SECONDS", Seconds(), 5.0, section=GATEWAY,
    doc="how long a WebSocket may wait to sign in before it is closed",
)  # fmt: skip
MAX_SUBSCRIPTIONS_PER_SOCKET = Setting(
    "LV_MAX_SUBSCRIPTIONS_PER_SOCKET", Whole(), 100, section=GATEWAY,
    doc="subscriptions one WebSocket may hold",
)  # fmt: skip
SUBSCRIBER_BUFFER = Setting(
    "LV_SUBSCRIBER_BUFFER", Whole(), 256, section=GATEWAY,
    doc="frames buffered per subscriber before the slow-consumer policy applies",
)  # fmt: skip
HEARTBEAT_SECONDS = Setting(
    "LV_HEARTBEAT_SECONDS", Seconds(), 15.0, section=GATEWAY,
    doc="idle heartbeat (and WebSocket ping) interval",
)  # fmt: skip
SEND_TIMEOUT_SECONDS = Setting(
    "LV_SEND_TIMEOUT_SECONDS", Seconds(), 10.0, section=GATEWAY,
    doc="a connection that takes no write, or answers no ping, within this time is closed",
)  # fmt: skip
WS_COMPRESSION = Setting(
    "LV_WS_COMPRESSION", Switch(), False, section=GATEWAY,
    doc="offer WebSocket clients permessage-deflate; each compressed socket then keeps its "
    "compressor and decompressor (~38 KB more per idle socket), so it is off unless snapshots "
    "are large and bandwidth dear",
)  # fmt: skip
PROGRESS_INTERVAL_MS = Setting(
    "LV_PROGRESS_INTERVAL_MS", Whole(0), 250, section=GATEWAY,
    doc="at most one `progress` frame per subscription per interval (the newest frontier), "
    "for a subscription that was sent deltas since its last frontier",
)  # fmt: skip
QUIET_PROGRESS_MS = Setting(
    "LV_QUIET_PROGRESS_MS", Whole(0), 5000, section=GATEWAY,
    doc="a subscription whose key did not change is sent the newest frontier at most once per "
    "interval; a client waiting for its writes asks for it sooner (`wait`)",
)  # fmt: skip
WORKERS = Setting(
    "LV_WORKERS", Whole(), 1, section=GATEWAY,
    doc="gateway processes sharing `LV_PORT` (`SO_REUSEPORT`), each with its own change feed; "
    "needs a fixed port",
)  # fmt: skip
HEADER_TIMEOUT_SECONDS = Setting(
    "LV_HEADER_TIMEOUT_SECONDS", Seconds(), 10.0, section=GATEWAY,
    doc="a request's headers must arrive within this time of connecting (or of the previous "
    "response), else the connection is closed",
)  # fmt: skip
BODY_TIMEOUT_SECONDS = Setting(
    "LV_BODY_TIMEOUT_SECONDS", Seconds(), 10.0, section=GATEWAY,
    doc="a request's body must arrive within this time of its headers, else it is answered 408 "
    "`body_timeout` and the connection is closed",
)  # fmt: skip
FEED_BLOCK_MS = Setting(
    "LV_FEED_BLOCK_MS", Whole(10), 1000, section=GATEWAY,
    doc="how long the change feed's blocking read waits for a new entry before it reads again",
)  # fmt: skip
LOG_FEED = Setting(
    "LV_LOG_FEED", Switch(), None, section=GATEWAY, shown="on in `dev`",
    doc="`GET /v1/log/live`, the raw events as they are appended (shows every event to every "
    "reader); refused at start with `LV_ENV=production`",
)  # fmt: skip
STATIC_DIR = Setting(
    "LV_STATIC_DIR", Folder(), None, section=GATEWAY,
    shown="`demo/web` in a checkout; installed: none",
    doc="what the gateway serves at `/`; `off` serves nothing (`liveviews dev` serves its "
    "`--pages`, `web/` in the application's folder by default)",
)  # fmt: skip
CLIENT_JS_DIR = Setting(
    "LV_CLIENT_JS_DIR", Folder(), None, section=GATEWAY,
    shown="the JavaScript client the package carries",
    doc="what the gateway serves at `/client-js/`; `off` serves nothing",
)  # fmt: skip
OPERATOR_TOKEN = Setting(
    "LV_OPERATOR_TOKEN", Text("a bearer token"), None, section=GATEWAY, secret=True,
    shown="unset: no operator endpoint",
    doc="the bearer token of `GET /v1/operator/views/{view}/{key}?as_of=` "
    "([CLI](CLI.md#over-http-get-v1operatorviewsviewkeyas_ofpartitionid))",
)  # fmt: skip

# Change data capture

DATABASE_URL = Setting(
    "DATABASE_URL", Text("a postgresql:// URL"), None, section=CDC, secret=True,
    shown="unset: the embedded PostgreSQL",
    doc="the PostgreSQL database whose declared tables (`app.table`) the CDC process follows "
    "([CDC](CDC.md)); its user needs `REPLICATION` and to own the tables",
)  # fmt: skip
_NAME = Text("lowercase letters, digits and '_' (at most 63)", NAME_PATTERN)
CDC_SLOT = Setting(
    "LV_CDC_SLOT", _NAME, "liveviews", section=CDC,
    doc="the replication slot the CDC process reads, created if missing",
)  # fmt: skip
CDC_PUBLICATION = Setting(
    "LV_CDC_PUBLICATION", _NAME, "liveviews", section=CDC,
    doc="the publication the CDC process reads, created if missing",
)  # fmt: skip
POSTGRES_PORT = Setting(
    "LV_POSTGRES_PORT", Whole(), 5433, section=CDC,
    doc="port of the embedded PostgreSQL (`python -m liveviews.cdc.embedded`: Debian's server in "
    "`$LV_DATA_DIR/postgres`, on 127.0.0.1, with a password made into "
    "`$LV_DATA_DIR/postgres/password`)",
)  # fmt: skip

# The demo

DEMO_ACTIVITY = Setting(
    "LV_DEMO_ACTIVITY", Rate(), 0.0, section=DEMO,
    doc="background events (Chirp, the board) or row changes (the shop) per second from the "
    "demo process",
)  # fmt: skip

# Set by Liveviews for its own processes

BUILD_PARENT = Setting(
    "LV_BUILD_PARENT", Whole(0), 0, section=INTERNAL,
    doc="set by the pipeline for the child process that builds a pipeline version: the "
    "pipeline process it reports to",
)  # fmt: skip
CLASS_ARCHIVE_DUMP = Setting(
    "LV_CLASS_ARCHIVE_DUMP", Text("a path"), None, section=INTERNAL,
    doc="set by the class archive's build for the pipeline run that warms up the JVM: where the "
    "JVM writes its class list",
)  # fmt: skip
LAUNCHER_PYTHON = Setting(
    "LV_LAUNCHER_PYTHON", Text("a path"), None, section=INTERNAL,
    doc="set by the pipeline in local mode for the launcher Spark starts its Python processes "
    "through (`liveviews.pipeline.tuning.pythonlauncher`): the interpreter",
)  # fmt: skip
LAUNCHER_DROP = Setting(
    "LV_LAUNCHER_DROP", Text("paths"), None, section=INTERNAL,
    doc="set with `LV_LAUNCHER_PYTHON`: the path entries the launcher drops",
)  # fmt: skip


@functools.cache
def declared() -> tuple[Setting[object], ...]:
    """Every declaration, in the page's order."""
    return tuple(v for v in globals().values() if isinstance(v, Setting))


def by_name() -> dict[str, Setting[object]]:
    return {s.name: s for s in declared()}


def by_key() -> dict[str, Setting[object]]:
    """The settings a settings file may set, by their key."""
    return {s.key: s for s in declared() if s.key and not s.family}
