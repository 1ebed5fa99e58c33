"""The pipeline: the Spark job where views are computed, and the versions it runs.

``session`` builds the SparkSession, ``queries`` starts one streaming query per pipeline over
the log (``source``), and ``sink`` writes each micro-batch's row changes and deltas to the
change topic exactly once. ``views`` and ``declared`` are the toolkits a view is written with
(a state processor, or a query), ``isolation`` and ``recovery`` set aside what a view's code
raises on. ``versioning`` runs each pipeline's serving version and the one being rebuilt beside
it; ``versions`` (the registry), ``code`` (a version's code) and ``settings`` are Spark-free,
since the gateway and the command line read them too. Why: a view is a pure function from the
log's events to row changes, and everything that makes it exactly once (source offsets, sink,
frontier) is shared by every view.

Nothing is imported here, so that ``liveviews.pipeline.java`` stays cheap to import.
"""
