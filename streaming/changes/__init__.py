"""The change topic, which the pipeline's sink writes and every gateway reads: its keys and
entries (``topic``: each view's rows, deltas, frontiers), how far a frontier is behind the log
(``lag``), and a key's rows as they were at a log offset (``asof``). Why: the one format between
Spark and the gateways has one module that names its keys and reads its entries.
"""
