"""Benchmarks: ``python -m bench`` runs them all (docs/PERFORMANCE.md)."""

import os

# The demos declare views in Real-Time Mode. The benchmarks measure micro-batches unless they
# ask for the mode (bench.latency's "realtime", bench.realtime), so that their figures compare
# with earlier runs and with checkouts from before the demos ran in it.
os.environ.setdefault("LV_REALTIME", "off")
