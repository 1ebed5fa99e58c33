"""The embedded store's password, generated once into the data directory, and URLs shown
without theirs.

The embedded store listens on 127.0.0.1 only, but every user of the machine can reach that: its
password keeps them from writing the log or reading the views. It is created by whichever
process needs it first (the store, or a process waiting for it) and read by all of them, from a
file only the data directory's owner may read.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from liveviews.errors import ConfigurationError

PASSWORD_FILE = Path("store") / "password"
"""Where the password lives, under the data directory (``LV_DATA_DIR``)."""
PASSWORD_RE = re.compile(r"[A-Za-z0-9_-]{16,}")
QUERY_PASSWORD_RE = re.compile(r"((?:^|&)password=)[^&]*")


def password_path(data_dir: Path) -> Path:
    return Path(data_dir) / PASSWORD_FILE


def store_password(data_dir: Path) -> str:
    """The password of the embedded store of ``data_dir``, made now if there is none yet.

    A new one is written to a file of its own (mode 0600) and linked into place, so two
    processes starting together agree on one password, and none reads a half-written file.
    """
    path = password_path(data_dir)
    try:
        return _checked(path)
    except FileNotFoundError:
        pass
    # The store's own files (the log itself) are in this directory too: its owner's only, also
    # when an earlier version made it without a password.
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    draft = path.with_name(f".password.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):  # another's came first: it is the one
            os.link(draft, path)
    finally:
        draft.unlink(missing_ok=True)
    return _checked(path)


def _checked(path: Path) -> str:
    password = path.read_text().strip()
    if PASSWORD_RE.fullmatch(password) is None:
        raise ConfigurationError(
            f"{path} does not hold a password the embedded store made (16 or more letters, "
            "digits, '-' or '_'); remove the file and start again to make a new one."
        )
    return password


def embedded_url(port: int, password: str) -> str:
    return f"redis://:{quote(password, safe='')}@127.0.0.1:{port}/0"


def redacted(url: str) -> str:
    """``url`` with its password replaced by ``***``, for logs and messages."""
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if at and ":" in userinfo:
        url = urlunsplit(parts._replace(netloc=f"{userinfo.split(':', 1)[0]}:***@{hostport}"))
    # redis-py also takes it as a parameter: unix:///run/redis.sock?password=...
    base, mark, query = url.partition("?")
    return base + mark + QUERY_PASSWORD_RE.sub(r"\1***", query)
