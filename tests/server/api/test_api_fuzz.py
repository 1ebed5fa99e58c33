"""The HTTP API fuzzed from its own OpenAPI document (schemathesis) against a real gateway.

Every operation of ``/openapi.json`` gets ``LV_FUZZ_EXAMPLES`` generated requests (valid and
invalid ones), once without a token and once with a valid one, so that the fuzzing reaches past
authentication; then half the generated events claim to be by the token's subject, so that
some batches are accepted. Every answer must: not be a 5xx; have a status, content type, headers and body
the document lists for the operation; for a 4xx, be the one error shape ``{code, message}``
with a code docs/PROTOCOL.md lists. A publish that is refused must leave the log as it was.

The SSE operations are fuzzed like the others: schemathesis reads an event stream until it has
``MAX_STREAM_EVENTS`` events or ``STREAM_SECONDS`` pass, then closes it, so a 200 stream costs
one snapshot frame. While the log feed is fuzzed, events are appended every 50 ms, so each of
its streams has a frame at once too.

    LV_FUZZ_EXAMPLES=2000 .venv/bin/pytest tests/server/test_api_fuzz.py -q -s
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from streaming.core.events import log_stream
from tests.support.gateway import ServedGateway
from tests.support.gateway_settings import PARTITIONS

EXAMPLES = int(os.environ.get("LV_FUZZ_EXAMPLES", "30"))
MAX_STREAM_EVENTS = 1
STREAM_SECONDS = 5.0
SUBJECT = "alice"
PROFILE = {"type": "profile_set", "payload": {"user": SUBJECT, "name": "Alice"}}
PROTOCOL = Path(__file__).resolve().parents[3] / "docs" / "PROTOCOL.md"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def documented_codes() -> set[str]:
    """The error codes of the table in PROTOCOL.md's section 2."""
    section = PROTOCOL.read_text().split("## 2. Errors", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if re.match(r"\| \d{3} \|", line)]
    return {code for row in rows for code in re.findall(r"`([a-z_]+)`", row.split("|")[2])}


@dataclass
class Tally:
    """Requests made and what came back, over the whole run."""

    requests: int = 0
    server_errors: int = 0
    statuses: dict[int, int] = field(default_factory=dict)

    def count(self, status: int) -> None:
        self.requests += 1
        self.server_errors += status >= 500
        self.statuses[status] = self.statuses.get(status, 0) + 1


TALLY = Tally()


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    statuses = ", ".join(f"{s}: {n}" for s, n in sorted(TALLY.statuses.items()))
    print(f"\n{TALLY.requests} requests fuzzed, {TALLY.server_errors} 5xx ({statuses})")


def log_length(store: redis.Redis) -> int:
    return sum(store.xlen(log_stream(p)) for p in range(PARTITIONS))


def header(response: schemathesis.Response, name: str) -> str:
    values = [v for k, vs in response.headers.items() if k.lower() == name for v in vs]
    return values[0] if values else ""


def check_error_shape(response: schemathesis.Response, codes: set[str]) -> None:
    assert header(response, "content-type").startswith("application/json"), response.text
    body = response.json()
    assert isinstance(body, dict), body
    assert isinstance(body.get("code"), str) and isinstance(body.get("message"), str), body
    assert body["message"], body
    assert body["code"] in codes, f"{body['code']!r} is not a code of docs/PROTOCOL.md"
    assert set(body) <= {"code", "message", "index", "field"}, body


def fuzz(gw: ServedGateway, store: redis.Redis, headers: dict[str, str]) -> None:
    codes = documented_codes()
    schema = schemathesis.openapi.from_url(gw.url + "/openapi.json")
    schema.config.max_stream_events = MAX_STREAM_EVENTS
    session = requests.Session()
    for result in schema.get_all_operations():
        operation = result.ok()
        strategy = st.one_of(
            operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
            operation.as_strategy(generation_mode=GenerationMode.NEGATIVE),
        )
        publish = (operation.method.upper(), operation.path) == ("POST", "/v1/events")
        if publish and headers:
            strategy = st.tuples(strategy, st.booleans()).map(lambda c: as_signed_in(*c))
        with appending(gw) if operation.path == "/v1/log/live" else contextlib.nullcontext():
            run_operation(strategy, functools.partial(
                exercise, gw=gw, store=store, headers=headers, codes=codes, publish=publish,
                session=session))  # fmt: skip
    session.close()


def as_signed_in(case: Case, rewrite: bool) -> Case:
    """Half the valid generated batches claim to be by the token's subject, so some are
    accepted. A batch generated to be invalid stays as generated: its invalid part may be the
    very user or tweet id the rewrite would replace with a valid one, and the gateway would
    then rightly accept it."""
    if case.meta is not None and case.meta.generation.mode is GenerationMode.NEGATIVE:
        return case
    events = case.body if isinstance(case.body, list) else [case.body]
    if isinstance(case.body, dict) and isinstance(case.body.get("events"), list):
        events = case.body["events"]
    for event in events if rewrite else []:
        payload = event.get("payload") if isinstance(event, dict) else None
        if isinstance(payload, dict) and isinstance(payload.get("user"), str):
            payload["user"] = SUBJECT
            if isinstance(payload.get("tweet"), str):
                payload["tweet"] = SUBJECT + ":" + payload["tweet"].partition(":")[2]
    return case


@contextlib.contextmanager
def appending(gw: ServedGateway) -> Iterator[None]:
    """Appends an event every 50 ms, so that every log feed stream has a frame to read at once."""
    stop = threading.Event()

    def append() -> None:
        with requests.Session() as s:
            while not stop.wait(0.05):
                s.post(gw.url + "/v1/events", json=PROFILE, headers=gw.headers(SUBJECT))

    thread = threading.Thread(target=append, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def run_operation(strategy: st.SearchStrategy[Case], body: Callable[[Case], None]) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=False,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def test(case: Case) -> None:
        body(case)

    test()


def exercise(
    case: Case,
    gw: ServedGateway,
    store: redis.Redis,
    headers: dict[str, str],
    codes: set[str],
    publish: bool,
    session: requests.Session,
) -> None:
    before = log_length(store) if publish else 0
    response = case.call(base_url=gw.url, headers=headers, session=session,
                         timeout=STREAM_SECONDS)  # fmt: skip
    TALLY.count(response.status_code)
    checks = list(CHECKS)
    if case.meta is not None and case.meta.generation.mode is GenerationMode.NEGATIVE:
        checks.append(negative_data_rejection)
    case.validate_response(response, checks=checks, headers=headers)
    if 400 <= response.status_code < 500 and response.status_code != 304:
        check_error_shape(response, codes)
    if publish and response.status_code != 202:
        assert log_length(store) == before, "a refused publish wrote to the log"


def test_fuzz_without_a_token(gateway: ServedGateway, store: redis.Redis) -> None:
    fuzz(gateway, store, {})


def test_fuzz_with_a_valid_token(gateway: ServedGateway, store: redis.Redis) -> None:
    fuzz(gateway, store, gateway.headers(SUBJECT))


# Regressions of what the fuzzing found, each as a plain request.


def test_a_dev_token_without_any_right_is_refused(gateway: ServedGateway) -> None:
    """The dev token endpoint issued a token with an empty scope; it now answers invalid_scope."""
    for scope in ["", " ", "read\x1cpublish", "write", "read,publish"]:
        resp = requests.post(gateway.url + "/v1/dev/token", json={"user": "a", "scope": scope})
        assert (resp.status_code, resp.json()["code"]) == (400, "invalid_scope"), scope
    for scope in ["read", "publish", "read publish", "publish read"]:
        resp = requests.post(gateway.url + "/v1/dev/token", json={"user": "a", "scope": scope})
        assert (resp.status_code, resp.json()["scope"]) == (200, scope)


def test_an_empty_recent_on_the_log_feed_is_refused(gateway: ServedGateway) -> None:
    """``?recent=`` was read as the default, though the document asks for a whole number."""
    url = gateway.url + "/v1/log/live?recent="
    with requests.get(url, headers=gateway.headers(SUBJECT), stream=True, timeout=5) as resp:
        assert resp.status_code == 400
        assert resp.json()["code"] == "invalid_parameter"


def test_the_document_describes_the_views_and_each_event_type(gateway: ServedGateway) -> None:
    """Views and payloads were plain strings and objects; a fuzzer never got past unknown_view."""
    doc = requests.get(gateway.url + "/openapi.json").json()
    params = doc["paths"]["/v1/views/{view}/{key}"]["get"]["parameters"]
    view = next(p for p in params if p["name"] == "view")
    assert set(view["schema"]["enum"]) == set(gateway.gateway.app.views)
    events = doc["components"]["schemas"]["Event"]["oneOf"]
    assert {e["properties"]["type"]["const"] for e in events} == set(
        gateway.gateway.app.event_types
    )
    # As documented, a null time means the time of the append.
    event = {"type": "profile_set", "payload": {"user": SUBJECT, "name": "A"}, "time": None}
    resp = requests.post(gateway.url + "/v1/events", json=event, headers=gateway.headers(SUBJECT))
    assert resp.status_code == 202, resp.text


@pytest.mark.parametrize(
    "event_id",
    ["e.18446744073709551616-0", "e.0-99999999999999999999", "e.18446744073709551615-18446744073709551615",
     "e.\u0661-0"],
)  # fmt: skip
def test_a_last_event_id_outside_the_stores_ids_is_refused(
    gateway: ServedGateway, store: redis.Redis, event_id: str
) -> None:
    """Such an id reached the store, whose refusal answered 503 store_unavailable (or, for
    another script's digits, was read as an ASCII number); now it answers 400."""
    url = gateway.url + "/v1/views/profiles/alice/live"
    params = {"last_event_id": event_id}
    with requests.get(url, params=params, headers=gateway.headers(), stream=True, timeout=5) as r:
        assert (r.status_code, r.json()["code"]) == (400, "invalid_last_event_id")


def test_a_malformed_query_id_is_refused_even_where_the_header_wins(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    url = gateway.url + "/v1/views/profiles/alice/live?last_event_id=nil"
    headers = {**gateway.headers(), "Last-Event-ID": "e.1-0"}
    with requests.get(url, headers=headers, stream=True, timeout=5) as r:
        assert (r.status_code, r.json()["code"]) == (400, "invalid_last_event_id")


@pytest.mark.parametrize(
    "query", ["recent=true&recent=0", "recent=0&recent=0", "last_event_id=x&last_event_id=e.1-0"]
)
def test_a_repeated_query_parameter_is_refused(
    gateway: ServedGateway, store: redis.Redis, query: str
) -> None:
    """The last of repeated values was taken, so a malformed first one passed unnoticed."""
    path = "/v1/log/live" if query.startswith("recent") else "/v1/views/profiles/alice/live"
    url = f"{gateway.url}{path}?{query}"
    with requests.get(url, headers=gateway.headers(SUBJECT), stream=True, timeout=5) as r:
        assert (r.status_code, r.json()["code"]) == (400, "invalid_parameter")
