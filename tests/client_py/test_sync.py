"""The synchronous face, as a script or a notebook uses it: blocking calls on a client whose
loop runs in a thread of its own."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from liveviews.client import ClientStateError, GatewayError, SubscriptionState, sync
from tests.client_py.support import FAST, task
from tests.support.gateway import ServedGateway, Writer


def test_a_script_follows_a_view_and_publishes(gateway: ServedGateway, writer: Writer) -> None:
    writer.write([("tasks", "b1/t1", "task", task("v0"))])
    with sync.connect(gateway.url, token=gateway.token("b1"), **FAST) as client:
        sub = client.subscribe("tasks", "b1/t1").ready()
        assert sub.rows == {"task": {"title": "v0"}}
        assert sub.next(timeout=1).kind == "snapshot"
        with pytest.raises(TimeoutError):
            sub.next(timeout=0.2)
        writer.write([("tasks", "b1/t1", "task", task("v1"))])
        writer.write([("tasks", "b1/t1", "task", task("v2"))])
        changes = list(sub.changes(timeout=1))  # until a second passes without one
        assert [c.ops[0]["value"]["title"] for c in changes] == ["v1", "v2"]
        assert sub.to_pandas().loc["task", "title"] == "v2"

        event = {"type": "task_set", "payload": {"board": "b1", "task": "t2", "title": "x"}}
        offsets = client.publish([event], idempotency_key="sync-1")
        assert client.publish([event], idempotency_key="sync-1") == offsets
        (offset,) = offsets
        writer.write([], {offset.partition: offset.id})
        sub.reflects(offsets, timeout=5)

        prefix = client.subscribe("tasks", prefix="b1/").ready()
        assert set(prefix.keys) == {"b1/t1"}
        refused = client.subscribe("nope", "k")
        with pytest.raises(GatewayError, match="nope"):
            refused.ready()
        sub.unsubscribe()
        assert sub.state == SubscriptionState.CLOSED
        assert list(sub) == [], "a closed subscription's iteration ends"
    assert not [t for t in threading.enumerate() if t.name == "liveviews-client"]
    with pytest.raises(ClientStateError):
        client.subscribe("tasks", "b1/t1")


def test_to_pandas_without_pandas_says_what_to_install(gateway: ServedGateway) -> None:
    code = (
        "import sys; sys.modules['pandas'] = None\n"
        "from liveviews.client.dataframe import frame_of\n"
        "try:\n    frame_of([], ['row'])\n"
        "except Exception as e:\n    print(type(e).__name__, e.code, e.message)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("LiveviewsClientError pandas_missing")
    assert "pip install pandas" in out.stdout


def test_importing_the_client_imports_neither_spark_nor_the_pipeline() -> None:
    code = (
        "import sys, liveviews.client, liveviews.client.sync\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'pandas')"
        " or m.startswith('liveviews.pipeline')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
