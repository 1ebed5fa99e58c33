"""The log, the source of truth: its entries' format (``events``), a batch appended once per
idempotency key (``append``, ``append.lua``), the ``EventLog`` applications append with
(``eventlog``), how much of it an append keeps (``retention``), and what a pipeline set aside
(``deadletters``, ``screen``). Why: every writer and reader of the log, the gateway's publish
path included, goes through one module per format.
"""
