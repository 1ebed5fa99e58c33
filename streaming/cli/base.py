"""What every command shares: the store and the application, the exit codes, and the one place
where an error becomes a sentence on stderr (and, with ``--json``, a document on stdout).

Exit codes: 0 done; 1 what was asked for does not exist or did not succeed; 2 a usage error
(click's own); 3 the store cannot be reached; 130 interrupted while waiting.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import click
import orjson
import redis

from liveviews.app import App, load_app
from liveviews.config.catalog import CONFIG
from liveviews.errors import ConfigurationError, LiveviewsError
from liveviews.pipeline.settings import Settings
from liveviews.store import client as storeclient
from liveviews.store.password import password_path, redacted

F = TypeVar("F", bound=Callable[..., Any])

NOT_FOUND = 1
UNREACHABLE = 3
INTERRUPTED = 130


class Failure(click.ClickException):
    """What was asked for does not exist or did not succeed: one sentence, a code."""

    exit_code = NOT_FOUND

    def __init__(self, message: str, code: str = "failed", **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.extra = extra

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"liveviews: {self.format_message()}", err=True)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.extra}


class Unreachable(Failure):
    exit_code = UNREACHABLE


class SettingRefused(Failure):
    """A setting of the environment is wrong: like a usage error, the caller must change it."""

    exit_code = 2


class Interrupted(Failure):
    exit_code = INTERRUPTED


@dataclass
class Env:
    """The command's settings, store client and application, each made when first used."""

    json: bool = False
    _settings: Settings | None = None
    _client: storeclient.Client | None = None
    _app: App | None = None
    _closers: list[Callable[[], None]] = field(default_factory=list)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = Settings.from_env()
        return self._settings

    @property
    def client(self) -> storeclient.Client:
        if self._client is None:
            settings = self.settings
            if settings.embedded and not password_path(settings.data_dir).exists():
                # Asking for the URL would make a password for a store that never ran here.
                raise Unreachable(
                    f"no embedded store has run with data in {settings.data_dir}: run from the "
                    "directory make run runs in, or set LV_DATA_DIR or REDIS_URL.",
                    code="store_unavailable",
                )
            # The socket timeout outlasts the longest blocking read a command makes (tail's 1 s).
            self._client = storeclient.connect(
                self.settings.store_url, socket_connect_timeout=5, socket_timeout=15
            )
            self._closers.append(self._client.close)
        return self._client

    @property
    def app(self) -> App:
        if self._app is None:
            self._app = load_app(self.settings.app)
        return self._app

    def close(self) -> None:
        for close in self._closers:
            close()

    def store_text(self) -> str:
        try:
            return redacted(self.settings.store_url)
        except LiveviewsError:
            return "the store"


pass_env = click.make_pass_decorator(Env, ensure=True)


def config_option(fn: F) -> F:
    """``--config FILE``: the settings file (TOML) this process, and those it starts, read
    under the environment; the same as ``LV_CONFIG`` (liveviews.config.layers)."""

    def remember(ctx: click.Context, _: click.Parameter, value: Path | None) -> None:
        if value is not None:
            os.environ[CONFIG.name] = str(value.resolve())

    return click.option(
        "--config",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        expose_value=False,
        is_eager=True,
        callback=remember,
        help="A settings file (TOML), under the environment (LV_CONFIG).",
    )(fn)


def json_option(fn: F) -> F:
    """``--json``: one JSON document on stdout instead of tables; errors too."""

    def remember(ctx: click.Context, _: click.Parameter, value: bool) -> bool:
        ctx.ensure_object(Env).json = value
        return value

    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        expose_value=True,
        is_eager=True,
        callback=remember,
        help="Print one JSON document on stdout instead of tables.",
    )(fn)


def emit(document: Any) -> None:
    """One JSON document, on one line of stdout."""
    click.echo(orjson.dumps(document, option=orjson.OPT_NON_STR_KEYS).decode())


def translate(env: Env, exc: Exception) -> Failure | None:
    """The ``Failure`` a lower layer's error stands for; None for a bug."""
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        # AuthenticationError is a ConnectionError: a wrong password is said as such.
        why = "it refused the password" if isinstance(exc, redis.AuthenticationError) else exc
        why = str(why).rstrip(".")
        return Unreachable(
            f"the store at {env.store_text()} cannot be reached ({why}); start it (make run) or "
            "set REDIS_URL to the server the pipeline uses.",
            code="store_unavailable",
        )
    if isinstance(exc, redis.RedisError):
        return Failure(f"the store answered: {exc}.", code="store_error")
    if isinstance(exc, ConfigurationError):
        return SettingRefused(exc.message, code=exc.code)
    if isinstance(exc, LiveviewsError):
        return Failure(exc.message, code=exc.code)
    return None


class Group(click.Group):
    """The command group whose commands' errors all leave through ``translate``."""

    def invoke(self, ctx: click.Context) -> Any:
        env = ctx.ensure_object(Env)
        try:
            return super().invoke(ctx)
        except Failure as exc:
            _report(env, exc)
            raise
        except (click.ClickException, click.exceptions.Exit, click.Abort, BrokenPipeError):
            raise  # click's own, and a reader of stdout gone away, which click handles
        except KeyboardInterrupt:
            interrupted = Interrupted("interrupted.", code="interrupted")
            _report(env, interrupted)
            raise interrupted from None
        except Exception as exc:  # noqa: BLE001 - the boundary: a sentence, never a traceback
            failure = translate(env, exc) or Failure(
                f"an unexpected error stopped the command ({type(exc).__name__}: {exc}); "
                "please report it with the command you ran.",
                code="internal_error",
            )
            _report(env, failure)
            raise failure from None
        finally:
            env.close()


def _report(env: Env, failure: Failure) -> None:
    if env.json:
        emit(failure.to_dict())


def stderr(text: str) -> None:
    """A note for the person at the terminal, kept off stdout (which scripts read)."""
    print(text, file=sys.stderr, flush=True)


def known_pipeline(env: Env, pipeline: str) -> None:
    """Refuses a pipeline the application does not declare, naming the ones it does."""
    names = sorted(env.app.pipelines)
    if pipeline not in names:
        raise Failure(
            f"there is no pipeline {pipeline!r}; pipelines: {', '.join(names) or 'none'}.",
            code="unknown_pipeline",
        )
