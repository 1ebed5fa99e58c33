"""The CDC process's settings: defaults, the embedded database's address, refused names."""

from __future__ import annotations

from pathlib import Path

import pytest

from liveviews.cdc.settings import CdcSettings
from liveviews.errors import ConfigurationError


def test_defaults_name_the_embedded_database(tmp_path: Path) -> None:
    settings = CdcSettings.from_env({"LV_DATA_DIR": str(tmp_path)})
    assert settings.embedded and (settings.slot, settings.publication) == ("liveviews", "liveviews")
    url = settings.url
    password = (tmp_path / "postgres" / "password").read_text().strip()
    assert url == f"postgresql://liveviews:{password}@127.0.0.1:5433/liveviews"
    assert (tmp_path / "postgres" / "password").stat().st_mode & 0o077 == 0
    assert CdcSettings.from_env({"LV_DATA_DIR": str(tmp_path)}).url == url  # made once


def test_a_database_url_is_used_as_given(tmp_path: Path) -> None:
    env = {"LV_DATA_DIR": str(tmp_path), "DATABASE_URL": "postgresql://u:p@db:5432/shop",
           "LV_CDC_SLOT": "shop_1", "LV_POSTGRES_PORT": "6000"}  # fmt: skip
    settings = CdcSettings.from_env(env)
    assert not settings.embedded and settings.url == "postgresql://u:p@db:5432/shop"
    assert settings.slot == "shop_1" and settings.postgres_port == 6000
    assert not (tmp_path / "postgres").exists()


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("LV_CDC_SLOT", "Live-Views", "LV_CDC_SLOT must be lowercase letters"),
        ("LV_CDC_PUBLICATION", "x" * 64, "LV_CDC_PUBLICATION must be lowercase letters"),
        ("LV_POSTGRES_PORT", "five", "LV_POSTGRES_PORT must be a whole number"),
    ],
)
def test_refused_settings_name_the_variable(variable: str, value: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        CdcSettings.from_env({variable: value})
