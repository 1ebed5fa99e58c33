"""Network faults between one process and the store: a network namespace of its own, joined to
this one by a veth pair, whose own nftables table drops all or some of the store's traffic, and
a proxy on the way that holds every chunk for a while.

The process (a gateway, a pipeline) runs under ``ip netns exec``, so only its traffic passes
the rules; the host's firewall is never touched, and the test reaches the process at the
namespace's address. Delay comes from a proxy rather than ``tc netem`` because the kernels of
the project's machines are built without netem (``CONFIG_NET_SCH_NETEM``); loss and partitions
are the kernel's own, packets dropped on the namespace's side of the link.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
import urllib.parse
from collections import deque

_SUBNET = 200 + os.getpid() % 50
"""Second octet of this run's addresses (10.<n>.<index>.0/30), apart from other runs'."""


def _run(*command: str, stdin: str | None = None) -> None:
    subprocess.run(command, check=True, capture_output=True, text=True, input=stdin)


class Namespace:
    """``lvf<pid>n<index>``: here ``host`` (10.n.i.1), there ``peer`` (10.n.i.2)."""

    def __init__(self, index: int) -> None:
        self.name = f"lvf{os.getpid()}n{index}"
        self.link = f"lv{os.getpid() % 100000}h{index}"  # interface names have 15 bytes at most
        self.host = f"10.{_SUBNET}.{index}.1"
        self.peer = f"10.{_SUBNET}.{index}.2"

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def create(self) -> Namespace:
        _run("ip", "netns", "add", self.name)
        inside = f"{self.link}p"
        _run("ip", "link", "add", self.link, "type", "veth", "peer", "name", inside)
        _run("ip", "link", "set", inside, "netns", self.name)
        _run("ip", "addr", "add", f"{self.host}/30", "dev", self.link)
        _run("ip", "link", "set", self.link, "up")
        _run(*self.prefix, "ip", "addr", "add", f"{self.peer}/30", "dev", inside)
        _run(*self.prefix, "ip", "link", "set", inside, "up")
        _run(*self.prefix, "ip", "link", "set", "lo", "up")
        _run(*self.prefix, "ip", "route", "add", "default", "via", self.host)
        self._nft("add table inet fault")
        self._nft("add chain inet fault out { type filter hook output priority 0; }")
        self._nft("add chain inet fault in { type filter hook input priority 0; }")
        return self

    def cut(self, port: int) -> None:
        """A partition from the store at ``host:port``: every packet either way dropped."""
        self._drop(port, "")

    def lose(self, port: int, percent: int) -> None:
        """Drop ``percent`` % of the packets either way, at random."""
        self._drop(port, f"numgen random mod 100 < {percent} ")

    def heal(self) -> None:
        self._nft("flush chain inet fault out")
        self._nft("flush chain inet fault in")

    def delete(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            _run("ip", "link", "del", self.link)  # takes its peer with it
        with contextlib.suppress(subprocess.CalledProcessError):
            _run("ip", "netns", "del", self.name)

    def _drop(self, port: int, condition: str) -> None:
        self.heal()
        self._nft(f"add rule inet fault out ip daddr {self.host} tcp dport {port} {condition}drop")
        self._nft(f"add rule inet fault in ip saddr {self.host} tcp sport {port} {condition}drop")

    def _nft(self, rule: str) -> None:
        _run(*self.prefix, "nft", "-f", "-", stdin=rule + "\n")


class DelayProxy:
    """Listens at ``(address, port)`` and forwards to ``target``, holding each chunk
    ``delay`` seconds (while ``delay`` > 0) without reordering or slowing the throughput."""

    def __init__(self, address: str, target: tuple[str, int]) -> None:
        self.target = target
        self.delay = 0.0
        self._listener = socket.create_server((address, 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="delay-proxy").start()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(self.target)
            except OSError:
                continue
            self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                self._pipe(source, sink)

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        held: deque[tuple[float, bytes]] = deque()
        ready = threading.Condition()

        def read() -> None:
            while True:
                try:
                    chunk = source.recv(65536)
                except OSError:
                    chunk = b""
                with ready:
                    held.append((time.monotonic() + self.delay, chunk))
                    ready.notify()
                if not chunk:
                    return

        def write() -> None:
            while True:
                with ready:
                    while not held:
                        ready.wait()
                    due, chunk = held.popleft()
                time.sleep(max(0.0, due - time.monotonic()))
                try:
                    if not chunk:
                        sink.shutdown(socket.SHUT_WR)
                        return
                    sink.sendall(chunk)
                except OSError:
                    with contextlib.suppress(OSError):
                        source.close()
                    return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()


def with_host(url: str, host: str, port: int) -> str:
    """``url`` (``redis://:<password>@127.0.0.1:<port>/0``) at ``host:port`` instead."""
    parts = urllib.parse.urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    at = f"{credentials}@" if credentials else ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{at}{host}:{port}"))
