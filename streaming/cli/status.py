"""``liveviews status``: each pipeline version's frontier, lag, batch durations and dead letters,
and the gateways with their connections and subscribers."""

from __future__ import annotations

import math
import time
from typing import Any

import click
import orjson
from redis.cluster import RedisCluster

from liveviews.changes import lag
from liveviews.changes.topic import read_frontier
from liveviews.cli import render
from liveviews.cli.base import Env, emit, json_option, pass_env
from liveviews.gateway.report import read_gateways
from liveviews.log import deadletters
from liveviews.log.events import entry_id_tuple, log_stream
from liveviews.pipeline import versions
from liveviews.pipeline.settings import Settings
from liveviews.pipeline.versions import Version, Versions
from liveviews.store.client import Client

# Written by liveviews.pipeline.progress and named by liveviews.pipeline.session (QUERY_NAME), which
# import Spark; the command line reads them without it.
PROGRESS_STREAM = "lv:pipeline:progress"
QUERY_PREFIX = "liveviews."


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile: a duration some batch actually took."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def batch_durations(client: Client, since_ms: int) -> dict[str, list[float]]:
    """Each pipeline version's micro-batch durations (ms) since ``since_ms``."""
    out: dict[str, list[float]] = {}
    start = f"{since_ms}-0"
    while True:
        entries: Any = client.xrange(PROGRESS_STREAM, start, "+", count=1000)
        for _, fields in entries:
            query = fields.get(b"query", b"").decode()
            if not query.startswith(QUERY_PREFIX):
                continue
            try:
                total = orjson.loads(fields.get(b"duration_ms", b"{}")).get("triggerExecution")
            except orjson.JSONDecodeError:
                continue
            if isinstance(total, int | float):
                out.setdefault(query[len(QUERY_PREFIX) :], []).append(float(total))
        if len(entries) < 1000:
            return out
        start = f"({entries[-1][0].decode()}"


def _roles(reg: Versions) -> list[tuple[str, Version | None]]:
    roles: list[tuple[str, Version | None]] = [("active", reg.active)]
    if reg.next is not None:
        roles.append(("next", reg.next))
    roles += [("retired", r) for r in reg.retired]
    return roles


def _version(
    client: Client,
    settings: Settings,
    pipeline: str,
    role: str,
    v: Version | None,
    durations: dict[str, list[float]],
) -> dict[str, Any]:
    qualified = v.qualified(pipeline) if v else pipeline
    frontier = read_frontier(client, qualified)
    measured = None
    if frontier or role != "retired":  # a retired version's frontier is deleted with its state
        m = _lag(client, settings, frontier)
        measured = {"events": m.events, "capped": m.capped, "seconds": m.ms / 1000}
    spent = durations.get(qualified, [])
    return {
        "role": role,
        "version": v.version if v else None,
        "qualified": qualified,
        "started": v.started if v else None,
        "ended": v.ended if v else None,
        "frontier": {str(p): i for p, i in sorted(frontier.items())},
        "lag": measured,
        "batches": {
            "count": len(spent),
            "p50_ms": percentile(spent, 0.5),
            "p99_ms": percentile(spent, 0.99),
        },  # fmt: skip
    }


def collect(env: Env, minutes: float) -> dict[str, Any]:
    """The whole status as one JSON document (what ``--json`` prints)."""
    client, partitions = env.client, env.settings.log_partitions
    registry = versions.read_all(client)
    names = sorted(set(env.app.pipelines) | set(registry))
    durations = batch_durations(client, int((time.time() - minutes * 60) * 1000))
    pipelines = []
    for name in names:
        reg = registry.get(name) or Versions(name)
        rows = [_version(client, env.settings, name, role, v, durations)
                for role, v in _roles(reg)]  # fmt: skip
        letters = deadletters.counts(client, [r["qualified"] for r in rows])
        for r in rows:
            r["dead_letters"] = letters[r["qualified"]]
        pipelines.append({"pipeline": name, "declared": name in env.app.pipelines,
                          "request": reg.request, "versions": rows})  # fmt: skip
    sizes, heads = log_sizes(client, env.settings)
    gateways = read_gateways(client)
    subscribers: dict[str, int] = {}
    for g in gateways:
        for view, n in g.subscribers.items():
            subscribers[view] = subscribers.get(view, 0) + n
    return {
        "minutes": minutes,
        "store": store_shape(client),
        "log": {"partitions": partitions, "events": sum(sizes),
                "heads": {str(p): h for p, h in heads.items()},
                "kafka": ({"bootstrap": env.settings.kafka, "topic": env.settings.kafka_topic}
                          if env.settings.kafka else None)},
        "pipelines": pipelines,
        "gateways": [{"name": g.name, "at": g.at, "connections": g.connections,
                      "subscribers": g.subscribers} for g in gateways],
        "connections": sum(g.connections for g in gateways),
        "subscribers": dict(sorted(subscribers.items())),
    }  # fmt: skip


def _lag(client: Client, settings: Settings, frontier: dict[int, str]) -> lag.Lag:
    if settings.kafka:
        from liveviews.log.kafka import lag as kafka_lag

        return kafka_lag.measure_all(settings.kafka, settings.kafka_topic, settings.log_partitions,
                                     {"": frontier})[""]  # fmt: skip
    return lag.measure(client, settings.log_partitions, frontier)


def log_sizes(client: Client, settings: Settings) -> tuple[list[int], dict[int, str]]:
    """Each partition's count of events and its head: the newest entry id in the store's
    streams; on Kafka, its next offset (every offset it has taken, markers of transactions
    included)."""
    if settings.kafka:
        from liveviews.log.kafka.lag import log_bounds

        bounds = log_bounds(settings.kafka, settings.kafka_topic, settings.log_partitions)
        return ([high - low for low, high in bounds.values()],
                {p: str(high) for p, (_, high) in bounds.items() if high})  # fmt: skip
    with client.pipeline(transaction=False) as pipe:
        for p in range(settings.log_partitions):
            pipe.xlen(log_stream(p))
        sizes = [int(n) for n in pipe.execute()]
    return sizes, lag.log_heads(client, settings.log_partitions)


def store_shape(client: Client) -> dict[str, Any]:
    """A single server, or a store cluster and how many primaries serve its slots."""
    if isinstance(client, RedisCluster):
        return {"cluster": True, "primaries": len(client.get_primaries())}
    return {"cluster": False, "primaries": 1}


def _show(doc: dict[str, Any]) -> None:
    out = render.console()
    shape = doc["store"]
    out.print(f"store: cluster of {shape['primaries']} primaries" if shape["cluster"]
              else "store: single server", markup=False)  # fmt: skip
    kafka = doc["log"].get("kafka")
    out.print(f"log: Kafka topic {kafka['topic']} at {kafka['bootstrap']}" if kafka
              else "log: in the store", markup=False)  # fmt: skip
    out.print()
    heads: dict[str, str] = doc["log"]["heads"]
    table = render.table("pipeline", "version", "role", "lag (events)", "lag (s)",
                         f"batch p50 / p99 ({doc['minutes']:g} min)", "dead letters")  # fmt: skip
    partitions = range(doc["log"]["partitions"])
    frontiers = render.table("version", *(f"partition {p}" for p in partitions))
    for p in doc["pipelines"]:
        for v in p["versions"]:
            lagged, b = v["lag"], v["batches"]
            table.add_row(
                p["pipeline"], v["version"] or "-", v["role"],
                render.count_text(lagged["events"], lagged["capped"]) if lagged else "-",
                f"{lagged['seconds']:.1f}" if lagged else "-",
                f"{render.ms_text(b['p50_ms'])} / {render.ms_text(b['p99_ms'])}"
                if b["count"] else "-",
                str(v["dead_letters"]),
            )  # fmt: skip
            frontiers.add_row(v["qualified"], *(_cell(v, heads, str(q)) for q in partitions))
        if p["request"]:
            table.add_row(p["pipeline"], "", f"asked: {p['request'].get('kind')}")
    render.section(out, f"Pipelines (the log holds {doc['log']['events']:,} events)", table)
    render.section(out, "Each version's frontier against the log's head (--json: entry ids)",
                   frontiers)  # fmt: skip
    gateways = render.table("gateway", "reported", "connections", "subscribers")
    for g in doc["gateways"]:
        gateways.add_row(g["name"], render.when(g["at"]), f"{g['connections']:,}",
                         f"{sum(g['subscribers'].values()):,}")  # fmt: skip
    render.section(out, f"Gateways: {len(doc['gateways'])}, {doc['connections']:,} connections",
                   gateways if doc["gateways"] else None)  # fmt: skip
    if doc["subscribers"]:
        views = render.table("view", "subscribers")
        for view, n in doc["subscribers"].items():
            views.add_row(view, f"{n:,}")
        render.section(out, "Subscribers per view, over all gateways", views)


def _cell(v: dict[str, Any], heads: dict[str, str], p: str) -> str:
    """Where a version's frontier is in one partition, against the log's head there."""
    at, head = v["frontier"].get(p), heads.get(p)
    if not v["frontier"] and v["role"] == "retired":
        return "-"  # its state, frontier included, was deleted after it retired
    if head is None:
        return "empty"
    if at is None:
        return "nothing read"
    if entry_id_tuple(at) >= entry_id_tuple(head):
        return "at head"
    if "-" not in head:  # a Kafka position: a count of offsets, not a time
        return f"behind {int(head) - int(at):,} offsets"
    behind_ms = entry_id_tuple(head)[0] - entry_id_tuple(at)[0]
    return f"behind {render.ms_text(behind_ms)}" if behind_ms > 0 else "behind"


@click.command()
@click.option("--minutes", type=click.FloatRange(min=0, min_open=True), default=5.0,
              show_default=True, help="Batch durations over the last N minutes.")  # fmt: skip
@json_option
@pass_env
def status(env: Env, minutes: float, as_json: bool) -> None:
    """Each pipeline version's lag behind the log, its batch durations and dead letters, and the
    gateways with their connections and subscribers."""
    doc = collect(env, minutes)
    if as_json:
        emit(doc)
    else:
        _show(doc)
