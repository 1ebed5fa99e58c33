"""Optional start-up tuning of the pipeline's JVM and Python workers, for local mode only.

Each piece saves start-up time or CPU on one machine (figures in docs/PERFORMANCE.md) and
turns itself off on a cluster or when its prerequisite is missing; the job works without any
of them. ``liveviews.pipeline.session`` is the only place that switches them on.
"""
