"""The embedded store's password: one per data directory, whoever asks first, and never shown
in a URL that goes to a log."""

from __future__ import annotations

import stat
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from liveviews.errors import ConfigurationError
from liveviews.pipeline.settings import Settings
from liveviews.store.password import password_path, redacted, store_password


def test_processes_starting_together_agree_on_one_password(tmp_path: Path) -> None:
    with ProcessPoolExecutor(4) as pool:
        made = set(pool.map(store_password, [tmp_path] * 16))
    assert len(made) == 1
    (password,) = made
    assert password_path(tmp_path).read_text() == password + "\n"
    assert stat.S_IMODE(password_path(tmp_path).stat().st_mode) == 0o600
    assert [p.name for p in password_path(tmp_path).parent.iterdir()] == ["password"]


def test_the_embedded_default_url_carries_it_and_a_configured_one_is_kept(tmp_path: Path) -> None:
    embedded = Settings.from_env({"LV_DATA_DIR": str(tmp_path), "LV_EMBEDDED_PORT": "7001"})
    password = store_password(tmp_path)
    assert embedded.store_url == f"redis://:{password}@127.0.0.1:7001/0"
    configured = Settings.from_env({"LV_DATA_DIR": str(tmp_path / "x"), "REDIS_URL": "redis://h/0"})
    assert configured.store_url == "redis://h/0"
    assert not password_path(tmp_path / "x").exists()


def test_a_password_file_it_did_not_make_is_refused(tmp_path: Path) -> None:
    password_path(tmp_path).parent.mkdir(parents=True)
    password_path(tmp_path).write_text("short\n")
    with pytest.raises(ConfigurationError, match="remove the file and start again"):
        store_password(tmp_path)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cr3t-pass@127.0.0.1:6390/0", "redis://:***@127.0.0.1:6390/0"),
        ("rediss://app:p@ss@db.example:6380/1", "rediss://app:***@db.example:6380/1"),
        ("redis://:pw@[::1]:6379", "redis://:***@[::1]:6379"),
        ("unix:///run/valkey.sock?db=0&password=pw", "unix:///run/valkey.sock?db=0&password=***"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://app@db.example/0", "redis://app@db.example/0"),
    ],
)
def test_urls_are_shown_without_their_password(url: str, shown: str) -> None:
    assert redacted(url) == shown
