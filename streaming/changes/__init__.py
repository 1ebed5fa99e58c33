"""The change topic: where each view's state and deltas are written, its frontiers and lag, and
a key's rows as of an offset."""
