"""The Spark job: where views are computed.

``session`` builds the SparkSession, ``queries`` starts one streaming query per pipeline over
the log (``source``), and ``sink`` writes each micro-batch's row changes and deltas to the
change topic exactly once. ``views`` is the toolkit a view's processor is written with.
Nothing is imported here, so that ``liveviews.pipeline.java`` stays cheap to import.
"""
