"""nginx as the load balancer in front of several gateway processes, as deployed.

The configuration is ``deploy/nginx/liveviews.conf.template``, rendered into a directory of
the test's own; nginx runs in the foreground as a child of the test process and is stopped by
its pid. The gateways behind it are whatever the test started on the ports it names.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from deploy.nginx import render

INSTALL = "apt-get install nginx (scripts/setup.sh does it)"


class Balancer:
    """nginx on ``port`` in front of ``gateways`` (host:port each); ``url`` is what clients use."""

    def __init__(self, prefix: Path, port: int, gateways: list[str], workers: int = 1) -> None:
        if shutil.which("nginx") is None:
            raise AssertionError(f"nginx is not installed: {INSTALL}.")
        self.prefix = prefix
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        render.write(gateways, f"127.0.0.1:{port}", prefix, str(workers))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10) -> Balancer:
        log = open(self.prefix / "nginx.out", "ab")  # noqa: SIM115 - the child owns it
        self.process = subprocess.Popen(
            render.command(self.prefix), stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"nginx exited: {self.errors()}"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"nginx did not listen on {self.port}: {self.errors()}")

    def stop(self) -> None:
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.terminate()  # nginx's fast shutdown: its workers end with it
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def errors(self, lines: int = 20) -> str:
        """The end of nginx's error log and of its own output."""
        out = []
        for name in ("error.log", "nginx.out"):
            path = self.prefix / name
            if path.exists():
                out += path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(out)
