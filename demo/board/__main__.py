"""``python -m demo.board``: seed the board demo once, then (optionally) keep it busy.

With ``LV_DEMO_ACTIVITY=N`` the seed people work on chores of their own on the ``launch``
board and thank each other, at about N events per second. Stops on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import logging
import sys
import time

from demo.board import app
from demo.board.activity import SEED_BOARD, Activity, seed_events
from liveviews import LiveviewsError, console
from liveviews.config.catalog import DEMO_ACTIVITY
from liveviews.config.layers import environment
from liveviews.log.eventlog import check_layout
from liveviews.log.opened import log_writer
from liveviews.log.writer import LogWriter
from liveviews.pipeline.settings import Settings
from liveviews.store import client as storeclient
from liveviews.store.embedded import ensure_store
from liveviews.store.password import redacted

log = logging.getLogger("board")

SEEDED = "demo:board:seeded"
"""Set once the seed is in the log. The log may hold another application's events (the same
data directory run first with Chirp), so an empty log cannot say whether the board is seeded,
and seeding twice would count the seed's kudos twice."""


def seed_once(client: storeclient.Client, events: LogWriter) -> bool:
    if not client.set(SEEDED, "1", nx=True):
        return False
    try:
        events.append_batch(seed_events(int(time.time() * 1000)))
    except BaseException:
        client.delete(SEEDED)
        raise
    return True


def run(settings: Settings, rate: float) -> None:
    stop = console.stop_requested()
    with ensure_store(settings) as store_url:
        log.info("starting: the board's events into the log at %s", redacted(store_url))
        client = storeclient.connect(store_url)
        check_layout(client, settings.log_partitions, settings.change_shards)  # type: ignore[arg-type]  # either client serves
        events = log_writer(settings, app, client)
        if seed_once(client, events):
            log.info("seeded the %r board", SEED_BOARD)
        if rate > 0:
            log.info("ready: writing %g events/s", rate)
        else:
            log.info("ready: no background activity (LV_DEMO_ACTIVITY=N writes N events/s)")
        activity = Activity(seed=int(time.time()), prefix=f"bg{int(time.time())}")
        try:
            while not stop.wait(1.0 / rate if rate > 0 else 3600):
                events.append(next(activity))
        finally:
            events.close()


def main() -> int:
    try:
        env = environment()
        settings = Settings.from_env(env)
        console.setup("demo", settings)
        run(settings, DEMO_ACTIVITY.get(env))
    except LiveviewsError as exc:
        print(f"board: {exc.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
