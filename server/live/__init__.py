"""The live senders: where a stream's bytes meet its socket.

One ``Sender`` (``sender``) keeps the delivery rules (ordering, progress, slow consumers,
wake-ups, ending) for both transports and every stream's ``FrameSource`` (``source``): a
subscription, or a reader of the log feed. ``sse`` and ``ws`` supply how frames are framed and
written. ``sockets`` is a WebSocket as the gateway writes and hears it, ``writes`` the one
place a descriptor is written to directly, ``ticker`` the one task per process for heartbeats,
expiry and shutdown.
"""
