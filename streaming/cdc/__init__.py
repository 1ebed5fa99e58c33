"""Change data capture: a PostgreSQL database's committed row changes, appended to the log.

``python -m liveviews.cdc`` follows the tables an application declares with ``App.table``
through logical replication (a publication and a slot, the built-in ``pgoutput`` plugin),
after a snapshot of their rows as of the slot's start; ``python -m liveviews.cdc.embedded``
runs a PostgreSQL for it when ``DATABASE_URL`` is not set. docs/CDC.md says what it promises.
"""
