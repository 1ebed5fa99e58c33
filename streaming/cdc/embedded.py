"""The embedded PostgreSQL: a database started for you when ``DATABASE_URL`` is not set.

Debian's ``postgresql`` server (``scripts/setup.sh`` installs it; its programs live in
``/usr/lib/postgresql/<version>/bin``, which is not on PATH) is initialized once into
``$LV_DATA_DIR/postgres/data`` with ``wal_level=logical``, and listens on 127.0.0.1 at
``LV_POSTGRES_PORT`` (5433) only, with no Unix socket. Its superuser and database are both
``liveviews``; every connection, replication included, signs in with the password made once
into ``$LV_DATA_DIR/postgres/password`` (mode 0600), as the embedded store does.

PostgreSQL refuses to run as root: started by root, it runs as the ``postgres`` user (which
Debian's package creates) through ``setpriv``, and its data directory is that user's. The data
directory's parents must then let that user through (``o+x``); the start says so when not.
``python -m liveviews.cdc.embedded`` runs it in the foreground, as the Procfile's process does,
and stops it cleanly (a fast shutdown) on SIGTERM or SIGINT.
"""

from __future__ import annotations

import glob
import logging
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import psycopg2

from liveviews.cdc.settings import DATABASE, embedded_database_url, postgres_dir, postgres_password
from liveviews.errors import ConfigurationError

log = logging.getLogger("liveviews.postgres")

SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "unix_socket_directories": "",
    "wal_level": "logical",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
}
"""What change data capture needs (logical decoding, slots, senders), on loopback only."""
RUN_AS = "postgres"


def server_programs() -> Path:
    """The directory of ``initdb`` and ``postgres``: on PATH, or Debian's newest version's."""
    found = shutil.which("initdb")
    if found and shutil.which("postgres"):
        return Path(found).parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if not candidates:
        raise ConfigurationError(
            "no PostgreSQL server found (initdb, postgres): install Debian's postgresql package "
            "(scripts/setup.sh does), or set DATABASE_URL to a running PostgreSQL."
        )
    return Path(candidates[-1]).parent


def as_server_user() -> list[str]:
    """The command prefix that runs a program as the server's user: none unless we are root."""
    if os.geteuid() != 0:
        return []
    try:
        user = pwd.getpwnam(RUN_AS)
    except KeyError:
        raise ConfigurationError(
            "PostgreSQL refuses to run as root and there is no 'postgres' user to run it as: "
            "install Debian's postgresql package, run as another user, or set DATABASE_URL."
        ) from None
    return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", "--"]


class EmbeddedPostgres:
    """A PostgreSQL server owned by this process: ``with EmbeddedPostgres(dir, port) as url``."""

    def __init__(
        self, data_dir: Path, port: int, settings: Mapping[str, str] | None = None
    ) -> None:
        self.data_dir = Path(data_dir)
        self.root = postgres_dir(self.data_dir)
        self.pgdata = self.root / "data"
        self.port = port
        self.settings = {**SERVER_SETTINGS, "port": str(port), **(settings or {})}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The database's address with its password: give it to clients, never to a log."""
        return embedded_database_url(self.data_dir, self.port)

    @property
    def log_path(self) -> Path:
        return self.root / "server.log"

    def start(self, timeout: float = 60.0) -> str:
        if self.process is not None:
            raise RuntimeError("Cannot start the embedded PostgreSQL twice.")
        programs, prefix = server_programs(), as_server_user()
        self._prepare(programs, prefix)
        args = [str(programs / "postgres"), "-D", str(self.pgdata)]
        for name, value in self.settings.items():
            args += ["-c", f"{name}={value}"]
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(prefix + args, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.process = None
                raise ConfigurationError(
                    f"the embedded PostgreSQL exited at start; see {self.log_path}. Is port "
                    f"{self.port} taken? Set LV_POSTGRES_PORT to a free port, or DATABASE_URL."
                )
            if self._answers():
                self._create_database()
                return self.url
            time.sleep(0.1)
        self.stop()
        raise ConfigurationError(f"the embedded PostgreSQL did not answer within {timeout:.0f} s.")

    def _prepare(self, programs: Path, prefix: list[str]) -> None:
        """Make the data directory once, owned by the server's user."""
        password = postgres_password(self.data_dir)  # made before the directory is opened up
        self.root.chmod(0o711)
        if (self.pgdata / "PG_VERSION").exists():
            return
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        pwfile = self.root / "initdb.pw"
        pwfile.write_text(password + "\n")
        pwfile.chmod(0o600)
        if prefix:
            user = pwd.getpwnam(RUN_AS)
            for path in (self.pgdata, pwfile):
                os.chown(path, user.pw_uid, user.pw_gid)
            if subprocess.run([*prefix, "test", "-w", str(self.pgdata)]).returncode != 0:
                pwfile.unlink()
                raise ConfigurationError(
                    f"the 'postgres' user, which runs the embedded PostgreSQL for root, cannot "
                    f"reach {self.pgdata}: let it through the parent directories (chmod o+x), "
                    "set LV_DATA_DIR to a directory it can reach, or set DATABASE_URL."
                )
        try:
            result = subprocess.run(
                [*prefix, str(programs / "initdb"), "-D", str(self.pgdata), "-U", DATABASE,
                 f"--pwfile={pwfile}", "--auth=scram-sha-256", "-E", "UTF8", "--no-locale"],
                capture_output=True, text=True,
            )  # fmt: skip
        finally:
            pwfile.unlink()
        if result.returncode != 0:
            raise ConfigurationError(
                f"initdb could not make {self.pgdata}: {result.stderr.strip()[-500:]}"
            )

    def _connect(self, database: str) -> psycopg2.extensions.connection:
        return psycopg2.connect(
            host="127.0.0.1", port=self.port, user=DATABASE, dbname=database, connect_timeout=2,
            password=postgres_password(self.data_dir),
        )  # fmt: skip

    def _answers(self) -> bool:
        try:
            self._connect("postgres").close()
        except psycopg2.OperationalError:
            return False
        return True

    def _create_database(self) -> None:
        conn = self._connect("postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
                if cur.fetchone() is None:
                    cur.execute(f"CREATE DATABASE {DATABASE}")
        finally:
            conn.close()

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)  # a fast shutdown: clients are cut, the data is synced
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def main() -> int:
    from liveviews import console
    from liveviews.cdc.settings import CdcSettings

    # Caught from the start, so a stop asked while the server starts still stops it.
    stop = console.stop_requested()
    try:
        settings = CdcSettings.from_env()
        console.setup("postgres", settings.store)
        if not settings.embedded:
            log.info("DATABASE_URL is set; no embedded PostgreSQL is needed")
            stop.wait()
            return 0
        server = EmbeddedPostgres(settings.store.data_dir, settings.postgres_port)
        log.info("starting the embedded PostgreSQL on port %d (data in %s)", server.port,
                 console.shown(server.pgdata))  # fmt: skip
        server.start()
    except ConfigurationError as exc:
        print(f"liveviews: {exc.message}", file=sys.stderr)
        return 2
    try:
        log.info("ready on postgresql://%s@127.0.0.1:%d/%s; its password is in %s", DATABASE,
                 server.port, DATABASE, console.shown(server.root / "password"))  # fmt: skip
        stop.wait()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
