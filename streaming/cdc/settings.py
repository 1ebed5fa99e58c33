"""Settings of the change data capture process, read once from the environment.

``DATABASE_URL`` names the PostgreSQL database to follow; unset, it is the embedded server's
(``liveviews.cdc.embedded``) on ``LV_POSTGRES_PORT``, with the password it made into the data
directory. ``LV_CDC_SLOT`` and ``LV_CDC_PUBLICATION`` name the replication slot and the
publication it creates if missing. The store and the application are the other processes'
settings (``liveviews.pipeline.settings``).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from liveviews.config import catalog as C
from liveviews.config.layers import environment
from liveviews.errors import ConfigurationError
from liveviews.pipeline.settings import Settings

DATABASE = "liveviews"
"""The embedded server's database and user."""
PASSWORD_RE = re.compile(r"[A-Za-z0-9_-]{16,}")


def postgres_dir(data_dir: Path) -> Path:
    """The embedded server's directory: its data (``data/``), password and log."""
    return Path(data_dir) / "postgres"


def postgres_password(data_dir: Path) -> str:
    """The embedded server's password, made once into a file only its owner reads. Two
    processes starting together agree on one: a new password is linked into place."""
    path = postgres_dir(data_dir) / "password"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        draft = path.with_name(f".password.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(32) + "\n")
            with contextlib.suppress(FileExistsError):  # another's came first: it is the one
                os.link(draft, path)
        finally:
            draft.unlink(missing_ok=True)
    password = path.read_text().strip()
    if PASSWORD_RE.fullmatch(password) is None:
        raise ConfigurationError(
            f"{path} does not hold a password the embedded PostgreSQL made; remove the file and "
            f"the directory {postgres_dir(data_dir) / 'data'} to start the database afresh."
        )
    return password


def embedded_database_url(data_dir: Path, port: int) -> str:
    password = quote(postgres_password(data_dir), safe="")
    return f"postgresql://{DATABASE}:{password}@127.0.0.1:{port}/{DATABASE}"


@dataclass(frozen=True)
class CdcSettings:
    database_url: str | None
    """``DATABASE_URL``; None: the embedded server."""
    slot: str
    publication: str
    postgres_port: int
    store: Settings

    @property
    def embedded(self) -> bool:
        return self.database_url is None

    @property
    def url(self) -> str:
        """The database's address with its password: give it to clients, never to a log."""
        if self.database_url is not None:
            return self.database_url
        return embedded_database_url(self.store.data_dir, self.postgres_port)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CdcSettings:
        env = environment(env)
        return cls(
            database_url=C.DATABASE_URL.read(env),
            slot=C.CDC_SLOT.get(env),
            publication=C.CDC_PUBLICATION.get(env),
            postgres_port=C.POSTGRES_PORT.get(env),
            store=Settings.from_env(env),
        )
