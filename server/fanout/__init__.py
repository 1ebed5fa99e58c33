"""Who gets which delta: the hub, its subscribers, cohorts and cursors. No bytes, no HTTP.

How the pieces relate:

- a ``Subscription`` (``subscription``) is one client's subscription to one (view, key): it
  reads the snapshot or the missed deltas and is a ``Cursor`` (``cursor``), what the client
  was sent last, which holds the protocol's ordering rules;
- a ``Subscriber`` (``subscriber``) is the hub's side of it: a bounded buffer while its sender reads
  the store, then a sink (the sender, ``liveviews.gateway.live``) that takes each item at once;
- a ``Cohort`` (``cohort``) is a key's subscribers in step: one cursor, one decision per item;
- a ``Lane`` (``hub``) is one frontier's progress and the subscribers that follow it;
- the items themselves (``items``) carry the delta, its shared frame and its position.
"""
