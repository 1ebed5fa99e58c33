"""The shop with its row changes published through ``POST /v1/events`` instead of captured
from PostgreSQL: the baseline of ``bench.cdc``.

The same event types, payloads, partition keys, views and pipeline as ``demo.orders``; only the
way in differs: here the types are ordinary, publishable ones. Kept small, since every Python
process Spark starts for the pipeline imports it.
"""

from __future__ import annotations

from demo.orders.app import COLUMNS, declare_views
from liveviews import App
from liveviews.tables import OPERATIONS, declare_table

app = App("shop_posted")
_table = declare_table("orders", COLUMNS, ("id",), None, "")
for _operation in OPERATIONS:
    _name = _table.event_type(_operation)
    app.event_type(_name, _table.payload_schemas()[_name], _table.partition_key_of(_operation))
declare_views(app)
