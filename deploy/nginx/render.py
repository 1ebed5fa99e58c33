"""nginx in front of several gateway processes: ``liveviews.conf.template`` filled in.

    python deploy/nginx/render.py --listen 127.0.0.1:8080 --prefix /tmp/lv-nginx \\
        127.0.0.1:8001 127.0.0.1:8002
    nginx -p /tmp/lv-nginx -c /tmp/lv-nginx/nginx.conf -e /tmp/lv-nginx/error.log

The prefix directory gets ``nginx.conf``; nginx keeps its pid, error log and temporary files
there, so it runs as any user. Standard library only, so a deployment can copy this file alone.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "liveviews.conf.template"
_ADDRESS = re.compile(r"^(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$")


class InvalidAddress(ValueError):
    """An address that is not ``host:port``; the message says which and what to write."""

    code = "invalid_address"


def check_address(what: str, address: str) -> str:
    if not _ADDRESS.match(address) or not 0 < int(address.rsplit(":", 1)[1]) < 65536:
        raise InvalidAddress(
            f"{what} {address!r} is not host:port: write it as 127.0.0.1:8001, "
            "gateway-1.internal:8000 or [::1]:8001."
        )
    return address


def render(gateways: Sequence[str], listen: str, prefix: Path, workers: str = "auto") -> str:
    """The configuration text: nginx on ``listen`` in front of ``gateways`` (host:port each)."""
    if not gateways:
        raise InvalidAddress("no gateway address was given: name at least one host:port.")
    check_address("the listen address", listen)
    servers = "\n".join(
        f"        server {check_address('the gateway address', g)} max_fails=0;" for g in gateways
    )
    text = TEMPLATE.read_text()
    for name, value in (("{prefix}", str(prefix)), ("{listen}", listen),
                        ("{workers}", workers), ("{gateways}", servers)):  # fmt: skip
        text = text.replace(name, value)
    return text


def write(gateways: Sequence[str], listen: str, prefix: Path, workers: str = "auto") -> Path:
    """Writes ``prefix/nginx.conf`` (creating ``prefix``) and returns its path."""
    prefix.mkdir(parents=True, exist_ok=True)
    path = prefix / "nginx.conf"
    path.write_text(render(gateways, listen, prefix.resolve(), workers))
    return path


def command(prefix: Path) -> list[str]:
    """nginx's command line for the configuration ``write`` put in ``prefix``."""
    p = prefix.resolve()
    return ["nginx", "-p", str(p), "-c", str(p / "nginx.conf"), "-e", str(p / "error.log")]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("gateways", nargs="+", metavar="HOST:PORT", help="each gateway process")
    parser.add_argument("--listen", default="127.0.0.1:8080", help="nginx's own address")
    parser.add_argument("--prefix", type=Path, required=True, help="nginx's working directory")
    parser.add_argument("--workers", default="auto", help="nginx worker processes")
    parser.add_argument(
        "--run",
        action="store_true",
        help="then run nginx in the foreground in place of this process",
    )
    args = parser.parse_args(argv)
    try:
        path = write(args.gateways, args.listen, args.prefix, args.workers)
    except InvalidAddress as exc:
        print(f"render: {exc.code}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}", file=sys.stderr)
    if args.run:
        sys.stdout.flush()
        os.execvp("nginx", command(args.prefix))  # stops with the process that started this one
    print(" ".join(command(args.prefix)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
