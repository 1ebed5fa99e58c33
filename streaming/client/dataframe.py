"""A subscription's contents as a pandas DataFrame. pandas comes with the ``spark`` extra only,
so it is imported here, on first use, and its absence is said plainly."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from liveviews.client.errors import LiveviewsClientError

if TYPE_CHECKING:
    import pandas


def frame_of(records: list[dict[str, Any]], index: list[str]) -> pandas.DataFrame:
    try:
        import pandas
    except ImportError:
        raise LiveviewsClientError(
            "sub.to_pandas() needs pandas, which is not installed: pip install pandas",
            code="pandas_missing",
        ) from None
    if not records:
        return pandas.DataFrame(columns=index).set_index(index)
    return pandas.DataFrame.from_records(records).set_index(index)
