"""The store the log and the change topic live in: clients of one server or a cluster
(``client``), the embedded Valkey started when ``REDIS_URL`` is not set (``embedded``, with its
``password``), a store cluster on this machine (``cluster``), and the move of an older store's
keys to today's names (``upgrade``). Why: every process reaches the store the same way, and
the embedded default needs nothing installed.
"""
