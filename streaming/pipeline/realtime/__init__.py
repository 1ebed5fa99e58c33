"""Declared views in Spark's Real-Time Mode: the log read and the change topic written by JVM
code (``jvm/``), so that no Python runs between an event and its delta (docs/REALTIME.md)."""
