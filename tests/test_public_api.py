"""The names an application imports from ``liveviews``: pinned, each real, none importing Spark
until used."""

from __future__ import annotations

import subprocess
import sys

import pytest

import liveviews

PUBLIC = [
    "CHANGE_SCHEMA", "App", "Boolean", "Changes", "ConfigurationError", "Event", "EventLog",
    "EventType", "FieldType", "Float", "Integer", "InvalidEvent", "Json", "LiveviewsError",
    "LoggedEvent", "Offset", "Pipeline", "Schema", "StoreMismatch", "String", "Table", "View",
    "__version__", "anyone_signed_in", "isolated", "load_app", "log_order", "only_owner",
    "payloads", "sql", "view_changes",
]  # fmt: skip


def test_the_public_names_are_pinned() -> None:
    # A name added or taken away is a change of the public API: say so here, in the docs and in
    # the changelog of the release.
    assert sorted(liveviews.__all__) == sorted(PUBLIC)


def test_every_public_name_is_there() -> None:
    for name in liveviews.__all__:
        assert getattr(liveviews, name) is not None, name
    assert set(liveviews.__all__) <= set(dir(liveviews))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        liveviews.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def test_importing_the_package_imports_neither_spark_nor_the_store_client() -> None:
    code = (
        "import sys, liveviews; from liveviews import App, Schema, String, only_owner; "
        "print(sorted(m for m in ('pyspark', 'redis', 'pandas', 'pyarrow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_version_is_the_installed_distributions() -> None:
    from importlib.metadata import version

    assert liveviews.__version__ == version("liveviews")
