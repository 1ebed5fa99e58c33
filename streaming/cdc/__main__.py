"""``python -m liveviews.cdc``: follow the application's declared tables into the log.

Exit status: 0 when asked to stop (SIGTERM, SIGINT); 2 (``NEEDS_A_PERSON``) when a setting,
the database's tables or rows, or the slot no longer match, with a sentence saying what to do
(the supervisor does not start it again: it would stop at the same place); 1 when the database
or the store went away, so that the supervisor starts it again and it resumes where the log is.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading

import psycopg2
import redis

from liveviews import console
from liveviews.app import load_app
from liveviews.cdc.capture import run
from liveviews.cdc.settings import CdcSettings
from liveviews.errors import LiveviewsError
from liveviews.log.kafka.topic import LogUnavailable
from liveviews.supervise import NEEDS_A_PERSON

log = logging.getLogger("liveviews.cdc")


def main() -> int:
    stop = threading.Event()

    def stop_asked(*_: object) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop_asked)
    try:
        settings = CdcSettings.from_env()
        console.setup("cdc", settings.store)
        app = load_app(settings.store.app)
        run(settings, app, stop)
    except LogUnavailable as exc:  # Kafka, as a lost store: the next start resumes
        log.error("stopped: %s; starting again resumes where the log is", exc.message)
        return 1
    except LiveviewsError as exc:
        log.error("stopped: %s", exc.message)
        return NEEDS_A_PERSON
    except (psycopg2.Error, redis.RedisError, OSError) as exc:
        log.error("stopped: lost the database or the store (%s); starting again resumes "
                  "where the log is", str(exc).strip() or type(exc).__name__)  # fmt: skip
        return 1
    log.info("stopped, as asked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
