"""``python -m demo.orders``: create the shop's table, seed it on first start, then keep it busy.

It writes PostgreSQL only, with plain SQL (``demo.orders.database``): the database named by
``DATABASE_URL``, or the embedded one (``python -m liveviews.cdc.embedded``, which ``make run``
starts). With ``LV_DEMO_ACTIVITY=N`` it makes about N changes per second: orders placed, paid,
shipped and archived. The CDC process carries each change into the log. Stops on Ctrl-C or
SIGTERM.

``python -m demo.orders --schema`` only creates the table, once the database answers, and
exits: ``make run`` runs it before the CDC process, which stops for good when a declared table
is missing.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

import psycopg2

from demo.orders.activity import Activity
from demo.orders.database import create_schema, current_rows, execute, seed_if_empty
from liveviews import console
from liveviews.cdc.settings import CdcSettings
from liveviews.config.catalog import HOST, PORT
from liveviews.config.layers import environment
from liveviews.errors import ConfigurationError, LiveviewsError

log = logging.getLogger("shop")
WAIT_FOR_DATABASE_S = 60.0


def connect(settings: CdcSettings, stop: threading.Event) -> Any:
    """A connection to the shop's database, waiting for a database that is still starting."""
    deadline = time.monotonic() + WAIT_FOR_DATABASE_S
    while True:
        try:
            return psycopg2.connect(settings.url, connect_timeout=2)
        except psycopg2.OperationalError as exc:
            if time.monotonic() > deadline or stop.is_set():
                where = "DATABASE_URL" if settings.database_url else "the embedded PostgreSQL"
                raise ConfigurationError(
                    f"{where} did not answer within {WAIT_FOR_DATABASE_S:.0f} s "
                    f"({str(exc).strip()}); start it ('make run' does), or fix DATABASE_URL."
                ) from None
            # Soon after it answers: the CDC process, starting beside this one, stops for good
            # if it finds the database without the table this process creates.
            time.sleep(0.1)


def run(settings: CdcSettings, rate: float) -> None:
    stop = console.stop_requested()
    conn = connect(settings, stop)
    try:
        create_schema(conn)
        if seed_if_empty(conn):
            log.info("seeded the shop's orders table")
        page = f"http://{HOST.get(environment())}:{PORT.get(environment())}"
        if rate > 0:
            log.info("ready: writing %g changes/s; open %s/orders.html", rate, page)
        else:
            log.info("ready: open %s/orders.html (LV_DEMO_ACTIVITY=N makes N changes/s)", page)
        activity = Activity(seed=int(time.time()))
        while not stop.wait(1.0 / rate if rate > 0 else 3600):
            change = activity.choose(current_rows(conn))
            with conn.cursor() as cur:
                execute(cur, change)
            conn.commit()
    finally:
        conn.close()


def create(settings: CdcSettings) -> None:
    conn = connect(settings, threading.Event())
    try:
        create_schema(conn)
    finally:
        conn.close()


def main() -> int:
    try:
        settings = CdcSettings.from_env()
        console.setup("shop", settings.store)
        if sys.argv[1:] == ["--schema"]:
            create(settings)
            return 0
        run(settings, float(os.environ.get("LV_DEMO_ACTIVITY") or 0))
    except LiveviewsError as exc:
        print(f"shop: {exc.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
