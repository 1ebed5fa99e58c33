"""The Spark-free core every Liveviews process shares: the declaration API, events and their
validation, the log, the change topic's format, settings, errors, and the embedded store.

The gateway, the demo and the command line import only this; nothing here imports Spark.
"""
