"""``python -m demo.chirp``: seed Chirp on first start, then (optionally) keep it busy.

With ``LV_DEMO_ACTIVITY=N`` the seed users post, like and follow at about N events per second,
so a freshly opened demo has something moving. Stops on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import logging
import sys
import time

from demo.chirp import app
from demo.chirp.generate import SEED_USERS, Activity, seed_events
from liveviews import console
from liveviews.config.catalog import DEMO_ACTIVITY
from liveviews.config.layers import environment
from liveviews.errors import LiveviewsError
from liveviews.log.eventlog import check_layout
from liveviews.log.opened import log_writer
from liveviews.log.writer import LogWriter
from liveviews.pipeline.settings import Settings
from liveviews.store import client as storeclient
from liveviews.store.embedded import ensure_store
from liveviews.store.password import redacted

log = logging.getLogger("chirp")


def seed_if_empty(events: LogWriter) -> bool:
    if not events.empty():
        return False
    events.append_batch(seed_events(int(time.time() * 1000)))
    return True


def run(settings: Settings, rate: float) -> None:
    stop = console.stop_requested()
    with ensure_store(settings) as store_url:
        log.info("starting: Chirp's events into the log at %s", redacted(store_url))
        client = storeclient.connect(store_url)
        check_layout(client, settings.log_partitions, settings.change_shards)  # type: ignore[arg-type]  # either client serves
        events = log_writer(settings, app, client)
        if seed_if_empty(events):
            log.info("seeded Chirp with %d users", len(SEED_USERS))
        if rate > 0:
            log.info("ready: writing %g events/s", rate)
        else:
            log.info("ready: no background activity (LV_DEMO_ACTIVITY=N writes N events/s)")
        activity = Activity(users=list(SEED_USERS), seed=int(time.time()))
        activity.prefix = f"bg{int(time.time())}-"
        try:
            while not stop.wait(1.0 / rate if rate > 0 else 3600):
                item = next(activity)
                item["time"] = int(time.time() * 1000)
                events.append(item)
        finally:
            events.close()


def main() -> int:
    try:
        env = environment()
        settings = Settings.from_env(env)
        console.setup("demo", settings)
        run(settings, DEMO_ACTIVITY.get(env))
    except LiveviewsError as exc:
        print(f"chirp: {exc.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
