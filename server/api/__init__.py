"""The gateway's HTTP API: each endpoint reads like its section of docs/PROTOCOL.md.

``rest`` answers requests (publish events, read a snapshot, health, metrics, the OpenAPI
document); ``streams`` starts SSE streams (subscriptions, the log feed); ``sessions`` serves
``/v1/ws``. What they share (JSON answers, bounded bodies, publishing, CORS, static files) sits
beside them. The endpoints check and start; the fan-out (``liveviews.gateway.fanout``) and the
senders (``liveviews.gateway.live``) carry a stream from there.
"""
