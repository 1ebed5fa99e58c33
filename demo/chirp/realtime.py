"""Chirp with its ``profiles`` view in Spark's Real-Time Mode (``LV_APP=demo.chirp.realtime:app``).

A user's rename reaches their profile's subscribers in tens of milliseconds instead of a
micro-batch's hundreds (docs/REALTIME.md). ``bench.latency --configurations realtime`` measures
it beside Chirp as declared, and the pipeline kill test runs it. In Real-Time Mode the query
holds two task slots for as long as it runs (a reader and its one state partition); the
pipeline process sizes its local master for them (``liveviews.pipeline.realtime.slots``).
"""

from __future__ import annotations

import dataclasses

from demo.chirp import app as chirp

app = dataclasses.replace(
    chirp,
    pipelines={
        name: dataclasses.replace(p, realtime=True, partitions=1) if name == "profiles" else p
        for name, p in chirp.pipelines.items()
    },
)
