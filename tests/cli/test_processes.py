"""``liveviews store | serve | pipeline | cdc``: the processes of a deployment, run by the
installed executable as a process manager runs them."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from liveviews.cli import cli
from liveviews.cli import processes as process_commands
from tests.support.gateway import free_port
from tests.support.running import wait_while_running

EXECUTABLE = Path(sys.executable).parent / "liveviews"


def test_store_and_serve_run_a_gateway_on_the_embedded_store_and_stop_on_sigterm(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(LV_DATA_DIR=str(tmp_path / "data"), LV_EMBEDDED_PORT=str(free_port()),
               LV_PORT=str(free_port()), LV_STATIC_DIR="off", LV_CLIENT_JS_DIR="off")  # fmt: skip
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for command in ("store", "serve"):
            with open(tmp_path / command, "wb") as out:
                procs[command] = subprocess.Popen([str(EXECUTABLE), command], env=env,
                                                  stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
            if command == "store":  # as a process manager would, the gateway after the store
                wait_while_running("the store", lambda: "ready on" in (tmp_path / "store").read_text(),
                                   procs, tmp_path)  # fmt: skip

        def ready() -> bool:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{env['LV_PORT']}/readyz", timeout=1
                ) as resp:
                    return bool(resp.status == 200)
            except OSError:
                return False

        wait_while_running("the gateway", ready, procs, tmp_path)
        # The gateway shuts down gracefully, then uvicorn ends it by the signal it was sent, as a
        # process manager expects; the store exits 0 once its clients are gone.
        for command, stopped in (("serve", -signal.SIGTERM), ("store", 0)):
            procs[command].send_signal(signal.SIGTERM)
            code = procs[command].wait(timeout=30)
            assert code == stopped, (tmp_path / command).read_text()
        assert "Traceback" not in (tmp_path / "serve").read_text()
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_pipeline_check_verifies_java_and_the_application(tmp_path: Path) -> None:
    env = {**os.environ, "LV_APP": "demo.chirp:app", "LV_DATA_DIR": str(tmp_path)}
    done = subprocess.run([str(EXECUTABLE), "pipeline", "--check"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    env["LV_APP"] = "demo.nothing_here:app"
    done = subprocess.run([str(EXECUTABLE), "pipeline", "--check"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2
    assert "LV_APP='demo.nothing_here:app' does not name an application" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["serve", "pipeline", "cdc", "store"])
def test_a_process_refuses_an_argument_it_does_not_take(command: str) -> None:
    done = CliRunner().invoke(cli, [command, "--no-such-option"])
    assert done.exit_code == 2
    assert "No such option '--no-such-option'" in done.output


@pytest.mark.parametrize(("command", "extra"), [("pipeline", "spark"), ("cdc", "postgres")])
def test_a_process_without_its_extra_names_the_extra_to_install(
    command: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = {"pyspark", "psycopg2"}
    found = importlib.util.find_spec
    monkeypatch.setattr(
        process_commands.importlib.util, "find_spec",
        lambda name, *a: None if name in missing else found(name, *a),
    )  # fmt: skip
    done = CliRunner().invoke(cli, [command])
    assert done.exit_code == 2
    assert f"pip install 'liveviews[{extra}]'" in done.output
    assert "Traceback" not in done.output


def test_the_version_is_the_installed_distributions() -> None:
    from importlib.metadata import version

    done = subprocess.run([str(EXECUTABLE), "--version"], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0
    assert done.stdout.strip() == f"liveviews, version {version('liveviews')}"


def test_python_m_liveviews_is_the_command_line() -> None:
    done = subprocess.run([sys.executable, "-m", "liveviews", "--help"], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    for command in ("serve", "pipeline", "cdc", "store", "status", "tail"):
        assert f"  {command}" in done.stdout
