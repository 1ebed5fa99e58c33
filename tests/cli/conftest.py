"""The command line against the run's real store: settings in the environment, as an operator
has them, and a ``Pipelines`` that writes what the pipeline process would, without Spark."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from click.testing import CliRunner, Result

from demo.chirp import app as chirp
from liveviews.cli import cli
from liveviews.log.eventlog import EventLog
from liveviews.log.events import Offset
from liveviews.pipeline.sink import ChangeTopicSink

PARTITIONS = 4
SHARDS = 8


@pytest.fixture()
def env(store_url: str, tmp_path: Path) -> dict[str, str]:
    """The environment of an operator's shell: the store, its layout and the application."""
    return {
        "REDIS_URL": store_url,
        "LV_DATA_DIR": str(tmp_path / "data"),
        "LV_LOG_PARTITIONS": str(PARTITIONS),
        "LV_CHANGE_SHARDS": str(SHARDS),
        "LV_APP": "demo.chirp:app",
    }


class Run:
    """``liveviews ARGS`` in this process, through click's runner."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def __call__(self, *args: str) -> Result:
        return CliRunner().invoke(cli, list(args), env=self.env, catch_exceptions=False)

    def json(self, *args: str, code: int = 0) -> Any:
        result = self(*args, "--json")
        assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
        return orjson.loads(result.stdout)


@pytest.fixture()
def run(env: dict[str, str], store: redis.Redis) -> Run:
    return Run(env)


class Pipelines:
    """Writes the store as Chirp's pipeline versions would: events through the log, each batch's
    rows, deltas, frontier and history through the real sink."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.log = EventLog(client, chirp, PARTITIONS)
        self.sinks: dict[str, ChangeTopicSink] = {}
        self.batches: dict[str, int] = {}

    def append(self, *events: dict[str, Any]) -> list[Offset]:
        return self.log.append_batch(list(events))

    def sink(self, pipeline: str, namespace: str = "") -> ChangeTopicSink:
        name = pipeline + namespace
        if name not in self.sinks:
            self.sinks[name] = ChangeTopicSink(self.client, chirp, pipeline, SHARDS, 10_000,
                                               list(chirp.pipelines), namespace=namespace)  # fmt: skip
        return self.sinks[name]

    def batch(
        self,
        changes: list[tuple[str, str, str, Any]],
        read_to: dict[int, str],
        pipeline: str | None = None,
        namespace: str = "",
    ) -> int:
        """One micro-batch of ``pipeline`` (by default, the one that writes the first change's
        view): ``changes`` are (view, key, row, value or None to delete); a value's ``score``
        orders the rows of a view with a limit."""
        pipeline = pipeline or (chirp.owner_of(changes[0][0]) if changes else "entities")
        name = pipeline + namespace
        batch = self.batches.get(name, -1) + 1
        self.batches[name] = batch
        rows = [{"view": v, "key": k, "row": r,
                 "score": float(val.get("score", 0)) if isinstance(val, dict) else 0.0,
                 "value": None if val is None else orjson.dumps(val).decode()}
                for v, k, r, val in changes]  # fmt: skip
        self.sink(pipeline, namespace).write(rows, batch, read_to)
        return batch


@pytest.fixture()
def pipelines(store: redis.Redis) -> Iterator[Pipelines]:
    yield Pipelines(store)


def profile(user: str, name: str) -> dict[str, Any]:
    return {"type": "profile_set", "payload": {"user": user, "name": name}}
