"""``python -m liveviews``: the ``liveviews`` command line."""

import sys

from liveviews.cli import main

sys.exit(main())
