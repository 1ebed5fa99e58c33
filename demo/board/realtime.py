"""The board with only some of its declared views in Spark's Real-Time Mode, the others in
micro-batches, for ``bench.realtime``: what each query in the mode costs at idle and under load
(``LV_APP=demo.board.realtime:ONE``, ``:TWO``; the board itself runs all three in the mode,
and ``LV_REALTIME=off`` none).
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
            name: p if name in chosen else dataclasses.replace(p, realtime=False)
            for name, p in board.pipelines.items()
        },
    )


ONE, TWO = realtime(1), realtime(2)
