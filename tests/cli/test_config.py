"""``liveviews config``: every setting's effective value and where it came from, secrets
redacted; exit 2 with the sentence a process would stop with. And ``--config`` on a process
command: a gateway whose settings come from a file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from click.testing import CliRunner, Result

from liveviews.cli import cli
from tests.support.gateway import free_port
from tests.support.gateway_settings import PARTITIONS, SHARDS
from tests.support.running import wait_while_running

EXECUTABLE = Path(sys.executable).parent / "liveviews"
SECRET = "a-signing-secret-of-more-than-thirty-two-bytes"


def _config(tmp_path: Path, text: str, *args: str, **env: str) -> Result:
    path = tmp_path / "liveviews.toml"
    path.write_text(text)
    clean: dict[str, str | None] = {
        "LV_CONFIG": None,
        "REDIS_URL": None,
        "LV_DATA_DIR": str(tmp_path),
        **env,
    }
    return CliRunner().invoke(cli, ["--config", str(path), "config", *args], env=clean)


def test_each_value_and_where_it_came_from_secrets_redacted(tmp_path: Path) -> None:
    result = _config(
        tmp_path,
        'redis_url = "redis://:hunter2@store.internal:6379/0"\nport = 8001\nenv = "production"\n',
        "--json",
        LV_JWT_SECRET=SECRET,
        LV_OPERATOR_TOKEN="operator-token",
        LV_PORT="8002",
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    rows = {r["name"]: r for r in document["settings"]}
    assert document["file"] == str(tmp_path / "liveviews.toml") and document["errors"] == []
    assert rows["LV_PORT"]["value"] == "8002" and rows["LV_PORT"]["source"] == "environment"
    assert rows["LV_ENV"]["source"] == f"file {tmp_path / 'liveviews.toml'}"
    assert rows["LV_WORKERS"] == {"section": "gateway", "name": "LV_WORKERS", "value": "1",
                                  "source": "default", "error": None}  # fmt: skip
    assert rows["REDIS_URL"]["value"] == "redis://:***@store.internal:6379/0"
    assert rows["LV_JWT_SECRET"]["value"] == rows["LV_OPERATOR_TOKEN"]["value"] == "[redacted]"
    assert "hunter2" not in result.output and SECRET not in result.output


def test_a_table_per_part(tmp_path: Path) -> None:
    result = _config(tmp_path, "shuffle_partitions = 3\n", "--process", "pipeline")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "Every process" in lines and "The pipeline" in lines and "The gateway" not in lines
    (row,) = [line for line in lines if line.startswith("LV_SHUFFLE_PARTITIONS")]
    assert row.split()[1:3] == ["3", "file"]


def test_a_value_a_process_would_refuse_exits_2_with_its_sentence(tmp_path: Path) -> None:
    result = _config(tmp_path, 'publish_rate = "fast"\n', LV_JWT_SECRET=SECRET)
    assert result.exit_code == 2
    path = tmp_path / "liveviews.toml"
    assert f"publish_rate in {path} must be a number of events per second" in result.output
    assert "LV_JWT_SECRET is set but LV_ENV is not" in result.output
    assert "Traceback" not in result.output


def test_serve_reads_its_settings_from_the_file_it_is_given(tmp_path: Path, store_url: str) -> None:
    port = free_port()
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'redis_url = "{store_url}"\nport = {port}\nlog_partitions = {PARTITIONS}\n'
        f'change_shards = {SHARDS}\nstatic_dir = "off"\nclient_js_dir = "off"\n'
        f'data_dir = "{tmp_path / "data"}"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LV_", "REDIS_URL"))}
    log = tmp_path / "serve"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(EXECUTABLE), "serve", "--config", str(config)], env=env,
                                stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:

        def answers() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_while_running("the gateway", answers, {"serve": proc}, tmp_path)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
