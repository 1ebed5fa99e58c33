"""The gateway's publish path, behind ``POST /v1/events`` and a socket's ``publish``: the
append with the asyncio client, once per idempotency key (``append``), the room left in the
store for the log (``memory``), and each subject's publish rate (``ratelimit``). Why: the path
that writes is apart from the store's readers (``liveviews.gateway.feed``), and each of its
refusals has one place.
"""
