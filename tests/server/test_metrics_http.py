"""/metrics of a served gateway: the counters of this process, then the figures read from the
store at each scrape, in one document a Prometheus server can parse."""

from __future__ import annotations

import aiohttp
import orjson
import redis
from prometheus_client.parser import text_string_to_metric_families

from liveviews.changes.topic import FRONTIER_KEY, PROGRESS_STREAM
from liveviews.gateway.metrics import PIPELINE_PROGRESS_STREAM
from liveviews.log.events import log_stream
from liveviews.pipeline import versions
from tests.support.gateway import ServedGateway, open_sse

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(s: aiohttp.ClientSession, gateway: ServedGateway) -> tuple[str, Samples]:
    resp = await s.get(gateway.url + "/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = await resp.text()
    families = list(text_string_to_metric_families(text))  # the whole document parses
    names = [f.name for f in families]
    assert len(names) == len(set(names)), "each family once"
    return text, {(x.name, tuple(sorted(x.labels.items()))): x.value
                  for f in families for x in f.samples}  # fmt: skip


def at(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_carry_pipeline_histograms_lag_and_subscribers(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    versions.register(store, "entities", "abc123")
    versions.register(store, "activity", "fff000")
    serving = {"pipeline": "entities", "version": "abc123"}
    async with aiohttp.ClientSession(headers=gateway.headers()) as s:
        _, before = await scrape(s, gateway)

        for entry_id in ("1000-0", "2500-0"):
            store.xadd(log_stream(1), {"type": "x"}, id=entry_id)
        store.hset(FRONTIER_KEY, "entities", orjson.dumps({"1": "1000-0"}))
        store.hset(FRONTIER_KEY, "activity", orjson.dumps({"1": "2500-0"}))
        for ms in (30, 700):
            store.xadd(PIPELINE_PROGRESS_STREAM, {"query": "liveviews.entities", "batch": 1,
                       "events": 2, "duration_ms": orjson.dumps({"triggerExecution": ms})})  # fmt: skip
        store.xadd(PROGRESS_STREAM, {"pipeline": "entities", "batch": 1, "frontier": "{}",
                                     "rows": 12, "lag_ms": 0})  # fmt: skip
        stream = await open_sse(s, gateway.url + "/v1/views/profiles/alice/live")
        await stream.next()
        text, after = await scrape(s, gateway)
        await stream.close()

    duration = "lv_pipeline_batch_duration_seconds"
    assert (
        at(after, duration + "_count", **serving) - at(before, duration + "_count", **serving) == 2
    )
    assert (
        at(after, duration + "_bucket", le="0.05", **serving)
        - at(before, duration + "_bucket", le="0.05", **serving)
        == 1
    )
    rows = "lv_pipeline_rows_changed"
    assert at(after, rows + "_sum", **serving) - at(before, rows + "_sum", **serving) == 12
    assert at(after, "lv_pipeline_lag_events", **serving) == 1
    assert at(after, "lv_pipeline_lag_seconds", **serving) == 1.5
    assert at(after, "lv_pipeline_lag_seconds", pipeline="activity", version="fff000") == 0
    assert at(after, "lv_view_subscribers", view="profiles") == 1
    assert ("lv_view_subscribers", (("view", "timeline"),)) in after  # every view, even at 0
    assert "# TYPE lv_push_latency_seconds histogram" in text
    assert "_created" not in text  # a series per label set that says nothing of the product
    # The counters of this process and the dead letters come first, as they always did.
    assert text.index("lv_deltas_out_total") < text.index("lv_dead_letters")
    assert text.index("lv_dead_letters") < text.index("lv_pipeline_lag_events")
    assert 'lv_dead_letters{pipeline="entities"} 0' in text
    for labels in (k[1] for k in after):
        assert {name for name, _ in labels} <= {
            "pipeline",
            "version",
            "view",
            "le",
            "budget",
            "transport",
            "reason",
        }  # no user, no key
