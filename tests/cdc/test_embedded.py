"""``python -m liveviews.cdc.embedded``: initializes PostgreSQL once with logical decoding, runs
it (as the ``postgres`` user when started by root), stops it cleanly on SIGTERM, and keeps its
data for the next start."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from liveviews.cdc.settings import embedded_database_url
from liveviews.store.embedded import free_port
from tests.cdc.harness import ROOT, wait_for


@pytest.fixture()
def data_dir() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="lv-pg-embedded-"))
    root.chmod(0o711)  # the postgres user passes through when the tests run as root
    yield root
    shutil.rmtree(root, ignore_errors=True)


def answers(url: str) -> bool:
    try:
        psycopg2.connect(url, connect_timeout=1).close()
    except psycopg2.OperationalError:
        return False
    return True


def run_once(data_dir: Path, port: int, sql: str) -> list[tuple[object, ...]]:
    env = {**os.environ, "LV_DATA_DIR": str(data_dir), "LV_POSTGRES_PORT": str(port)}
    env.pop("DATABASE_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "liveviews.cdc.embedded"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    url = embedded_database_url(data_dir, port)
    try:
        wait_for(lambda: answers(url) or proc.poll() is not None, 60, "the embedded PostgreSQL")
        assert proc.poll() is None, proc.communicate()[0].decode()
        conn = psycopg2.connect(url)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(sql)
            rows = cur.fetchall() if cur.description else []
        conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 0, out
    assert "ready on postgresql://liveviews@127.0.0.1" in out
    assert not answers(url)
    return rows


def test_started_stopped_and_started_again_on_its_data(data_dir: Path) -> None:
    port = free_port()
    run_once(data_dir, port, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (7)")
    assert run_once(data_dir, port, "SELECT x, current_setting('wal_level') FROM kept") == [
        (7, "logical")
    ]
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: its data is another user's
        assert (data_dir / "postgres" / "data").stat().st_uid != 0
    assert (data_dir / "postgres" / "password").stat().st_mode & 0o077 == 0
