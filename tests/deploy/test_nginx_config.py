"""deploy/nginx: the rendered configuration is one nginx accepts, and bad addresses are refused
with a sentence saying what to write."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from deploy.nginx import render


def test_rendered_configuration_passes_nginx_own_check(tmp_path: Path) -> None:
    gateways = ["127.0.0.1:8001", "localhost:8002", "[::1]:8003"]
    render.write(gateways, "127.0.0.1:8080", tmp_path, "1")
    text = (tmp_path / "nginx.conf").read_text()
    for g in gateways:
        assert f"server {g} max_fails=0;" in text
    assert "{" + "gateways}" not in text and "{" + "prefix}" not in text
    check = subprocess.run([*render.command(tmp_path), "-t"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("address", ["127.0.0.1", "localhost:0", "http://x:80", "a b:1", ""])
def test_an_address_that_is_not_host_port_is_refused(tmp_path: Path, address: str) -> None:
    with pytest.raises(render.InvalidAddress, match="is not host:port: write it as"):
        render.render([address], "127.0.0.1:8080", tmp_path)


def test_the_command_line_names_the_error_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert render.main(["--prefix", str(tmp_path), "127.0.0.1"]) == 2
    assert "invalid_address: the gateway address '127.0.0.1'" in capsys.readouterr().err
    assert not (tmp_path / "nginx.conf").exists()
    with pytest.raises(render.InvalidAddress, match="no gateway address"):
        render.render([], "127.0.0.1:8080", tmp_path)
