"""Two gateways behind nginx: stop one under subscribers, each resumes on the other.

The scenario is ``failover_support.run_failover``: two ``python -m liveviews.gateway`` processes behind
nginx configured by ``deploy/nginx/``; Python SSE and WebSocket subscribers and the JavaScript
client in Chromium connected through nginx only; one gateway SIGKILLed, started again, then
the other one, so every subscriber fails over in both directions. At the end each
subscription's deltas are exactly the change topic's for its key after its one snapshot (no
gap, no duplicate, no reset), and its rows are the stored rows.

Two sources of deltas: the real sink written to directly every 20 ms, as in
``test_gateway_kills`` (fast, and every key changes all the time), and the live pipeline on the
session's SparkSession reading Chirp events a writer appends to the log.

``LV_FAULT_KILLS`` stops (default 2, alternating gateways; from the third on, every other one
a SIGTERM, as in a rolling restart), ``LV_FAULT_SEED``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import redis

from liveviews.pipeline.settings import Settings
from tests.faults.failover_support import Plan, run_failover
from tests.faults.harness import PARTITIONS, RETENTION, SHARDS, Figures, Knobs, LogWriter

# The steady delta writer and its keys are the single-gateway kill test's.
from tests.faults.test_gateway_kills import KEYS, DeltaPump
from tests.support.pipeline import RunningPipeline

KNOBS = Knobs.from_env(kills=2)


class SinkSource:
    """Deltas written through the real sink every 20 ms (``DeltaPump``)."""

    def __init__(self, store: redis.Redis) -> None:
        self.pump = DeltaPump(store, KNOBS.seed)

    def start(self) -> None:
        self.pump.start()

    def stop(self) -> int:
        return self.pump.stop()

    def halt(self) -> None:
        self.pump.halt.set()


class PipelineSource:
    """Chirp events appended to the log (~100/s); the live pipeline turns them into deltas."""

    def __init__(self, store: redis.Redis, pipeline: RunningPipeline) -> None:
        self.store = store
        self.pipeline = pipeline
        self.writer = LogWriter(store, KNOBS.seed, batch=10, pause=0.1)

    def start(self) -> None:
        self.writer.start()

    def stop(self) -> int:
        written = self.writer.stop()
        self.pipeline.wait_until_caught_up(self.store, timeout=120)
        return written

    def halt(self) -> None:
        self.writer.halt.set()


@pytest.mark.timeout(90 + 30 * KNOBS.kills)
def test_subscribers_fail_over_between_gateways_behind_nginx(
    store: redis.Redis, store_url: str, tmp_path: Path
) -> None:
    plan = Plan(
        sse=[("alice", k) for k in KEYS],
        ws_user="alice",
        ws=list(KEYS),
        pages=[("alice", "ws", list(KEYS)), ("alice", "sse", list(KEYS))],
    )
    figures = run_failover(store, store_url, tmp_path, plan, SinkSource(store), KNOBS.kills,
                           KNOBS.rng())  # fmt: skip
    Figures("gateway_failover", {"seed": KNOBS.seed, "source": "sink", **figures}).print()


@pytest.mark.timeout(180 + 40 * KNOBS.kills)
def test_subscribers_fail_over_with_the_live_pipeline(
    spark: Any, store: redis.Redis, store_url: str, tmp_path: Path
) -> None:
    # Chirp's activity users are u0, u1, ...; a timeline is readable by its owner only, so
    # each reader is the user whose timeline it follows, beside the one global activity key.
    activity = ("activity", "global")
    plan = Plan(
        sse=[("u0", ("timeline", "u0")), ("u1", ("timeline", "u1")), ("u0", activity)],
        ws_user="u2",
        ws=[("timeline", "u2"), activity],
        pages=[("u3", "ws", [("timeline", "u3"), activity]),
               ("u4", "sse", [("timeline", "u4"), activity])],
    )  # fmt: skip
    settings = Settings.from_env({
        "REDIS_URL": store_url,
        "LV_DATA_DIR": str(tmp_path / "data"),
        "LV_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "LV_LOG_PARTITIONS": str(PARTITIONS),
        "LV_CHANGE_SHARDS": str(SHARDS),
        "LV_CHANGE_RETENTION": str(RETENTION),
        "LV_SHUFFLE_PARTITIONS": "2",
        "LV_REALTIME": os.environ["LV_REALTIME"],  # micro-batches: tests/conftest.py
    })  # fmt: skip
    pipeline = RunningPipeline(spark, settings)
    try:
        figures = run_failover(store, store_url, tmp_path, plan, PipelineSource(store, pipeline),
                               KNOBS.kills, KNOBS.rng(), live_again_s=40)  # fmt: skip
    finally:
        pipeline.stop()
    Figures("gateway_failover", {"seed": KNOBS.seed, "source": "pipeline", **figures}).print()
