"""The board with its three declared views in Spark's Real-Time Mode
(``LV_APP=demo.board.realtime:app``), each query on one state partition.

Each query then holds two task slots for as long as it runs, six in all; the pipeline process
sizes its local master for them (``liveviews.pipeline.realtime.slots``). ``bench.realtime``
measures what each costs at idle and under load, beside the board in micro-batches.
"""

from __future__ import annotations

import dataclasses

from demo.board.app import app as board
from liveviews import App


def realtime(count: int) -> App:
    """The board with its first ``count`` pipelines (tasks, leaderboard, boards) in Real-Time
    Mode and the others in micro-batches."""
    chosen = list(board.pipelines)[:count]
    return dataclasses.replace(
        board,
        pipelines={
            name: dataclasses.replace(p, realtime=True, partitions=1) if name in chosen else p
            for name, p in board.pipelines.items()
        },
    )


app = realtime(3)
ONE, TWO = realtime(1), realtime(2)
