"""The Chirp application, declared with Liveviews' public API only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from demo.chirp.events import declare
from demo.chirp.generate import seed_events
from liveviews import App, only_owner

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

app = App("chirp", samples=seed_events)
declare(app)

app.view("profiles", description="A user's display name and avatar.")
app.view("likes", description="How many users like a tweet.")
app.view("tweets", description="A tweet with its author's current profile and like count.")
app.view(
    "timeline",
    description="The newest 50 tweets by everyone a user follows, each as in 'tweets'.",
    limit=50,
    readable=only_owner,
)
app.view(
    "activity",
    description="Events per type per minute of event time; an event whose minute had closed "
    "when it arrived (30 s after the newest event time seen) is not counted.",
    limit=60,
)


@app.pipeline("entities", views=["likes", "tweets", "timeline"])
def entities(events: DataFrame) -> DataFrame:
    from demo.chirp.views import entities as build

    return build(events)


# A query, run by Spark without Python per event, in Real-Time Mode: a rename reaches the
# profile's subscribers in milliseconds (docs/REALTIME.md). Its one state partition and its
# reader hold two task slots for as long as it runs; a user's profiles are few keys.
@app.pipeline("profiles", views=["profiles"], realtime=True, partitions=1)
def profiles(events: DataFrame) -> DataFrame:
    from demo.chirp.declared import profiles as build

    return build(events, app)


# A query with Spark's watermark. Its state has one key per open minute, so one partition. Its
# per-minute counts can lag by a few seconds: on a small machine its micro-batches every 2 s,
# not back to back, leave the cores to the pipelines whose views show a user's own writes
# (docs/PERFORMANCE.md).
@app.pipeline("activity", views=["activity"], partitions=1, trigger_interval="2 seconds")
def activity(events: DataFrame) -> DataFrame:
    from demo.chirp.declared import activity as build

    return build(events, app)
