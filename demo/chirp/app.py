"""The Chirp application, declared with Liveviews' public API only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from demo.chirp.events import declare
from streaming import App, only_owner

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

app = App("chirp")
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
    description="Events per type per minute of event time, with late arrivals apart.",
    limit=60,
)


@app.pipeline("entities", views=["profiles", "likes", "tweets", "timeline"])
def entities(events: DataFrame) -> DataFrame:
    from demo.chirp.views import entities as build

    return build(events)


@app.pipeline("activity", views=["activity"], partitions=1)  # its state has one key
def activity(events: DataFrame) -> DataFrame:
    from demo.chirp.views import activity as build

    return build(events)
