"""Why change data capture stops for a person rather than for a restart."""

from __future__ import annotations

from liveviews.errors import LiveviewsError


class SourceChanged(LiveviewsError):
    """The database or its rows no longer match the declaration, or the slot and the log no
    longer agree: following on would lose or invent changes. The message says what changed
    and what to do; nothing of the transaction it met was appended."""

    code = "source_changed"
