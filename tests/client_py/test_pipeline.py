"""The Python client against the real pipeline: the application's query (``tests.support.queryapp``)
runs on the test run's SparkSession, and a Python publisher and subscriber go on through its
queries being stopped mid-stream and started again, then through a version switch (a rebuild
of the pipeline beside the serving version, after which the gateway resets its subscribers).

The subscriber must end with the rows a recomputation gives, having seen each task's titles only
move forward (no event applied twice, none undone), and the publisher's every batch must be in
the log once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import redis

from liveviews.client import Change
from liveviews.log.events import log_stream
from liveviews.pipeline.settings import Settings
from tests.client_py.support import Collected, client_of
from tests.support.gateway import ServedGateway
from tests.support.gateway_settings import PARTITIONS, SHARDS
from tests.support.pipeline import RunningPipeline

TASKS = 6


def titles_seen(changes: list[Change]) -> dict[str, list[int]]:
    """Each task key's titles (as publish numbers), in the order the subscriber saw them: from
    every snapshot (after a reset too) and every delta."""
    seen: dict[str, list[int]] = {}
    for change in changes:
        if change.kind == "snapshot":
            for key, rows in change.contents.items():
                for value in rows.values():
                    seen.setdefault(key, []).append(int(value["title"]))
        for op in change.ops:
            if op["op"] == "upsert":
                value: Any = op["value"]
                seen.setdefault(change.key or "", []).append(int(value["title"]))
    return seen


@pytest.mark.timeout(300)
async def test_a_python_client_through_a_pipeline_restart_and_a_version_switch(
    gateway: ServedGateway, store: redis.Redis, spark: Any, tmp_path: Path
) -> None:
    from tests.support.queryapp import app

    settings = Settings.from_env({
        "REDIS_URL": gateway.settings.store.store_url,
        "LV_DATA_DIR": str(tmp_path / "data"),
        "LV_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "LV_LOG_PARTITIONS": str(PARTITIONS),
        "LV_CHANGE_SHARDS": str(SHARDS),
        "LV_SHUFFLE_PARTITIONS": "2",
        "LV_REBUILD_GRACE_SECONDS": "1",
    })  # fmt: skip
    running = await asyncio.to_thread(RunningPipeline, spark, settings, app)
    last: dict[str, int] = {}
    batches: list[list[str]] = []
    async with client_of(gateway) as client:
        sub = client.subscribe("tasks", prefix="b1/")
        await sub.ready()
        collected = Collected(sub)

        async def publish(count: int) -> None:
            for _ in range(count):
                n = len(batches)
                events = [{"type": "task_set",
                           "payload": {"board": "b1", "task": f"t{(n + i) % TASKS}",
                                       "title": str(n)}} for i in range(2)]  # fmt: skip
                offsets = await client.publish(events)
                batches.append([str(o) for o in offsets])
                for e in events:
                    last[f"b1/{e['payload']['task']}"] = n
                await asyncio.sleep(0.02)

        await publish(20)
        await sub.reflects(batches[-1])
        # Stopped mid-stream, with writes going on, and started again from its checkpoint.
        writing = asyncio.create_task(publish(30))
        await asyncio.sleep(0.3)
        await asyncio.to_thread(running.stop)
        await asyncio.sleep(0.5)
        running = await asyncio.to_thread(RunningPipeline, spark, settings, app)
        await writing
        await sub.reflects(batches[-1])
        # A version built beside the serving one; readers switch to it with a reset.
        resets = gateway.gateway.metrics.resets
        rebuild = asyncio.create_task(asyncio.to_thread(running.rebuild, store, "queries"))
        await publish(10)
        await rebuild
        await publish(5)
        await sub.reflects(batches[-1])
        await collected.until(lambda _: dict(sub.keys) == expected(last), 30)
        await collected.stop()
    await asyncio.to_thread(running.stop)
    assert gateway.gateway.metrics.resets > resets, "the switch reset no subscriber"
    # The switch reached the subscriber as a reset, then the new version's snapshot.
    assert any(c.kind == "snapshot" and c.was_recovering and c.reason for c in collected.changes)
    for key, order in titles_seen(collected.changes).items():
        assert order == sorted(order), (key, order)  # each task only moved forward
    # Every acknowledged batch is in the log once.
    logged = [entry.decode() for p in range(PARTITIONS)
              for entry, _ in store.xrange(log_stream(p))]  # fmt: skip
    acknowledged = [offset.split(":", 1)[1] for batch in batches for offset in batch]
    assert len(logged) == len(set(logged)) == len(acknowledged)


def expected(last: dict[str, int]) -> dict[str, dict[str, Any]]:
    return {key: {"tasks": {"title": str(n)}} for key, n in last.items()}
