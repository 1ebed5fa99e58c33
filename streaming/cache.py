"""Where Liveviews keeps what it builds or fetches once per machine: ``~/.cache/liveviews``
(under ``XDG_CACHE_HOME`` when set): the pipeline's start-up archives and JVM code, Kafka's jars."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``~/.cache/liveviews`` (or under ``XDG_CACHE_HOME``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "liveviews"
