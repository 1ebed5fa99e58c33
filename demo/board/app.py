"""The board application, declared with Liveviews' public API only.

People create tasks on a board, move them between columns, rename and assign them, and give
each other kudos. Every page is a live view: a board's tasks (a prefix of the ``tasks`` view;
"My tasks" filters it by the rows' ``assignee``), its leaderboard (a window of its top rows) and
the list of boards (the whole ``boards`` view).

``declare_board`` declares all of it on an application, so that another one may start from the
board and add views of its own. docs/TUTORIAL.md builds a smaller board from an empty folder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from demo.board.activity import seed_events
from demo.board.events import declare
from liveviews import App

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

LEADERS = 10
"""People a board's leaderboard serves: a page shows a window of them, the top 5 say."""


def declare_board(app: App) -> None:
    """The board's event types, its three views and the pipelines that compute them."""
    declare(app)
    app.view("tasks", description="A task: its title, column and assignee. Key: <board>/<task>.",
             listable=True)  # fmt: skip
    app.view("leaderboard", description=f"A board's top {LEADERS} people by kudos received.",
             limit=LEADERS)  # fmt: skip
    app.view("boards", description="A board: tasks created, kudos given, last activity.",
             listable=True)  # fmt: skip

    # Each view is a query in Spark's Real-Time Mode (docs/REALTIME.md): a move reaches the
    # board's page in milliseconds. Each holds two task slots as long as it runs, a reader and
    # its one state partition; the pipeline process sizes its local master for the six.
    @app.pipeline("tasks", views=["tasks"], realtime=True, partitions=1)
    def tasks(events: DataFrame) -> DataFrame:
        from demo.board.views import tasks as build

        return build(events, app)

    @app.pipeline("leaderboard", views=["leaderboard"], realtime=True, partitions=1)
    def leaderboard(events: DataFrame) -> DataFrame:
        from demo.board.views import leaderboard as build

        return build(events, app)

    # Run in micro-batches (LV_REALTIME=off), its counts may lag by a second: they leave the
    # cores to the views people act on. In Real-Time Mode that second is its epoch.
    @app.pipeline("boards", views=["boards"], realtime=True, partitions=1,
                  trigger_interval="1 second")  # fmt: skip
    def boards(events: DataFrame) -> DataFrame:
        from demo.board.views import boards as build

        return build(events, app)


app = App("board", samples=seed_events)
declare_board(app)
