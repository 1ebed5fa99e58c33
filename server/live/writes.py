"""Where a byte meets a socket: the one place the live senders write to a descriptor directly.

Written under the transport's feet while it holds nothing unsent: the transport's own ``write``
makes the same system call with a buffer list and bookkeeping around it that cost more than the
call at 100,000 writes a second (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

_os_write = os.write


def socket_fd(transport: Any) -> int:
    """The descriptor of the transport's socket, or -1 if it has none."""
    sock = transport.get_extra_info("socket")
    try:
        return int(sock.fileno()) if sock is not None else -1
    except (AttributeError, OSError, ValueError):
        return -1


def write_now(fd: int, data: bytes, write: Callable[[bytes], None]) -> None:
    """Write ``data`` to the socket ``fd`` itself, when its transport holds nothing unsent.

    The transport's own ``write`` (passed as ``write``) makes the same system call, with a
    buffer list and bookkeeping around it that cost more than the call at 100,000 writes a
    second. What the socket does not take now (a full buffer, a partial write) and any error
    are handed to ``write``, which queues the rest in order, or closes the transport on the
    error. The descriptor is the socket's as long as the transport is not closing: both loops
    mark a transport closing before they close its socket.
    """
    if fd < 0:
        write(data)
        return
    try:
        sent = _os_write(fd, data)
    except (BlockingIOError, InterruptedError):
        sent = 0
    except OSError:
        write(data)  # it meets the same error and closes the transport
        return
    if sent < len(data):
        write(data[sent:])
