"""An application with one table of large text values, which PostgreSQL keeps out of line
(TOAST) and leaves out of an update that does not change them."""

from __future__ import annotations

from liveviews import App, Integer, String

app = App("notes")
notes = app.table(
    "notes",
    columns={"id": Integer(), "title": String(), "body": String(max_length=1_000_000)},
    key="id",
)

SCHEMA = "CREATE TABLE notes (id int PRIMARY KEY, title text NOT NULL, body text NOT NULL)"
