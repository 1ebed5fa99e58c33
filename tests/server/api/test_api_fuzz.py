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
its streams has a frame at once too; while groups are fuzzed, every pipeline ends an empty batch
at each cut the gateway appends (through the real sink, as in test_gateway_groups), so a group's
first frame comes at once rather than at the read's timeout.

Generated values rarely hit what careless parsers get wrong, so every query parameter, header
and path parameter the document declares (and the token's query parameter and header) gets, in
a second pass, valid cases with values of its family put in (``mutated``), and a sweep sends
each value of each family alone in an otherwise valid request (``test_every_parameter_...``):
other scripts' digits ("²", "٣", "１"), signs, spaces, huge numbers, empty values, repetitions,
NUL and bytes that are not UTF-8 (``tests/support/params.py``). Whatever is served must be what
the documents accept; in the sweep, whatever they accept must be served too. And the document
must declare every query parameter the gateway's code reads, or none of this would reach it.

    LV_FUZZ_EXAMPLES=2000 .venv/bin/pytest tests/server/api/test_api_fuzz.py -q -s
"""

from __future__ import annotations

import ast
import contextlib
import functools
import http.client
import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
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

from liveviews.changes.cuts import CUTS_STREAM
from liveviews.log.events import log_stream
from tests.support import params
from tests.support.gateway import ServedGateway, Writer
from tests.support.gateway_settings import PARTITIONS, SHARDS

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


@dataclass
class Fuzzed:
    """A generated request, and the values of its targets replaced after generation."""

    case: Case
    changes: dict[params.Target, params.Sent] = field(default_factory=dict)


def fuzz(gw: ServedGateway, store: redis.Redis, headers: dict[str, str]) -> None:
    """Each operation twice: schemathesis's cases, then valid ones with some of their
    parameters' values replaced by values of the sweep's families (``mutated``)."""
    codes = documented_codes()
    schema = schemathesis.openapi.from_url(gw.url + "/openapi.json")
    schema.config.max_stream_events = MAX_STREAM_EVENTS
    doc = requests.get(gw.url + "/openapi.json", timeout=5).json()
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
        passes = [strategy.map(Fuzzed)]
        if (replaced := mutated(operation, doc)) is not None:
            passes.append(replaced)
        streaming = {"/v1/log/live": appending, "/v1/groups/live": cutting}.get(operation.path)
        with streaming(gw, store) if streaming else contextlib.nullcontext():
            for fuzzed in passes:
                run_operation(fuzzed, functools.partial(
                    exercise, gw=gw, store=store, headers=headers, codes=codes,
                    publish=publish, session=session,
                    views=set(gw.gateway.app.views)))  # fmt: skip
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
def beside(work: Callable[[threading.Event], None]) -> Iterator[None]:
    """``work(stop)`` in a thread while the block runs; it returns once ``stop`` is set."""
    stop = threading.Event()
    thread = threading.Thread(target=work, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def appending(gw: ServedGateway, store: redis.Redis) -> contextlib.AbstractContextManager[None]:
    """Appends an event every 50 ms, so that every log feed stream has a frame to read at once."""

    def append(stop: threading.Event) -> None:
        with requests.Session() as s:
            while not stop.wait(0.05):
                s.post(gw.url + "/v1/events", json=PROFILE, headers=gw.headers(SUBJECT))

    return beside(append)


def cutting(gw: ServedGateway, store: redis.Redis) -> contextlib.AbstractContextManager[None]:
    """Every pipeline ends an empty batch at each cut the gateway appends, so that each group
    stream has its first frame at once: the pipelines of a log with nothing new to read."""
    writer = Writer(store, gw.gateway.app, SHARDS)

    def follow(stop: threading.Event) -> None:
        last = store.xrevrange(CUTS_STREAM, count=1)
        seen = last[0][0].decode() if last else "0-0"
        while not stop.is_set():
            read = store.xread({CUTS_STREAM: seen}, block=50)
            for entry_id, fields in read[0][1] if read else []:
                seen = entry_id.decode()
                heads = {int(k): v.decode() for k, v in fields.items() if k != b"pipelines"}
                writer.write([], heads)

    return beside(follow)


def run_operation(strategy: st.SearchStrategy[Fuzzed], body: Callable[[Fuzzed], None]) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=False,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(fuzzed=strategy)
    def test(fuzzed: Fuzzed) -> None:
        body(fuzzed)

    test()


def exercise(
    fuzzed: Fuzzed,
    gw: ServedGateway,
    store: redis.Redis,
    headers: dict[str, str],
    codes: set[str],
    publish: bool,
    session: requests.Session,
    views: set[str],
) -> None:
    case = fuzzed.case
    before = log_length(store) if publish else 0
    query = {t.name: list(v) for t, v in fuzzed.changes.items() if t.where == "query"}
    sent_headers = {
        **headers,
        **{
            t.name: v[0] if isinstance(v[0], bytes) else v[0].encode()
            for t, v in fuzzed.changes.items()
            if t.where == "header"
        },
    }
    response = case.call(base_url=gw.url, headers=sent_headers, params=query or None,
                         session=session, timeout=STREAM_SECONDS)  # fmt: skip
    TALLY.count(response.status_code)
    checks = list(CHECKS)
    if case.meta is not None and case.meta.generation.mode is GenerationMode.NEGATIVE:
        checks.append(negative_data_rejection)
    case.validate_response(response, checks=checks, headers=headers)
    if 400 <= response.status_code < 500 and response.status_code != 304:
        check_error_shape(response, codes)
    if publish and response.status_code != 202:
        assert log_length(store) == before, "a refused publish wrote to the log"
    if response.status_code < 400:
        # Served: then every replaced value is one the documents accept. The token's query
        # parameter is not read where its header, which wins, is sent.
        token = headers.get("Authorization", "").removeprefix("Bearer ")
        view = gw.gateway.app.views.get(str((case.path_parameters or {}).get("view")))
        for target, sent in fuzzed.changes.items():
            if target.name in params.WINDOW_PARAMETERS and view is not None and view.limit:
                # A window of a ranked view (the case's, not the sweep's profiles): whether a
                # value is served depends on the request's other window parameters.
                continue
            if not (target.name == "access_token" and token):
                assert params.documented(target, sent, token, views), (target, sent)


def test_fuzz_without_a_token(gateway: ServedGateway, store: redis.Redis) -> None:
    fuzz(gateway, store, {})


def test_fuzz_with_a_valid_token(gateway: ServedGateway, store: redis.Redis) -> None:
    fuzz(gateway, store, gateway.headers(SUBJECT))


# Every parameter and header the document declares, with values a careless reader gets wrong.


def send(
    gw: ServedGateway, target: params.Target, sent: params.Sent, token: str
) -> tuple[int, str, bytes]:
    """One request of ``target``'s operation, valid but for ``sent`` as ``target``, with
    exactly the bytes given: http.client neither re-encodes nor folds them."""
    segments = {"view": "profiles", "key": "alice", "stream": "tab"}
    query: list[tuple[str, params.Raw]] = []
    headers: list[tuple[str, params.Raw]] = []
    if target.name not in ("access_token", "Authorization"):
        headers.append(("Authorization", f"Bearer {token}"))
    if target.path == "/v1/live" and target.name != "view":
        query.append(("view", "profiles"))
    if target.path == "/v1/groups/live":  # one member, but for what is swept
        query += [(n, v) for n, v in (("view", "profiles"), ("key", "alice")) if n != target.name]
    for raw in sent:
        if target.where == "path":
            segments[target.name] = str(raw)
        elif target.where == "query":
            query.append((target.name, raw))
        else:
            headers.append((target.name, raw))
    path = target.path.format(**segments)
    if query:
        path += "?" + "&".join(f"{n}={quote(r, safe='')}" for n, r in query)
    body = None
    if target.method == "POST" and target.path.endswith("/wait"):
        body = orjson.dumps({"offsets": [{"partition": 0, "id": "1-0"}]})
        headers += [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    elif target.method == "POST":
        body = orjson.dumps({**PROFILE, "payload": {"user": SWEEPER, "name": "P"}})
        headers += [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    conn = http.client.HTTPConnection("127.0.0.1", gw.settings.port, timeout=10)
    try:
        conn.putrequest(target.method, path, skip_accept_encoding=True)
        for name, raw in headers:
            conn.putheader(name, raw if isinstance(raw, bytes) else raw.encode())
        conn.endheaders(body)
        resp = conn.getresponse()
        ctype = resp.getheader("content-type", "")
        # An accepted stream is not read: its head says enough.
        return resp.status, ctype, b"" if ctype.startswith("text/event-stream") else resp.read()
    finally:
        conn.close()


SWEEPER = "sweeper"
SERVED = {"GET": 200, "POST": 202}


def misanswered(target: params.Target, sent: params.Sent, answer: tuple[int, str, bytes],
                accepted: bool, codes: set[str]) -> str | None:  # fmt: skip
    """What is wrong with ``answer``, if anything: a 5xx, a refusal not in the one documented
    shape, a refusal of what the documents accept, or a value served that they do not."""
    status, ctype, body = answer
    if status >= 500:
        return f"answered {status}: {body[:200]!r}"
    code = None
    if 400 <= status < 500:
        error = orjson.loads(body) if ctype.startswith("application/json") else None
        if not (isinstance(error, dict) and isinstance(error.get("message"), str)
                and error.get("code") in codes):  # fmt: skip
            return f"{status} is not a documented {{code, message}}: {body[:200]!r}"
        code = error["code"]
    if accepted and code is not None:
        return f"refused what the documents accept ({status} {code})"
    if not accepted and code not in params.refusals(target):
        return f"answered {status} {code}, not one of {sorted(params.refusals(target))}"
    return None


def test_every_parameter_and_header_with_every_value_of_its_family(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    """Each query parameter, header and path parameter the document declares, alone in an
    otherwise valid request, with other scripts' digits, signs, spaces, huge numbers, empty
    values, repetitions, NUL and bytes that are not UTF-8: served exactly when the protocol
    documents say so, and otherwise refused with one of the parameter's documented codes."""
    doc = requests.get(gateway.url + "/openapi.json", timeout=5).json()
    views, codes, token = set(gateway.gateway.app.views), documented_codes(), gateway.token(SWEEPER)
    etag = requests.get(gateway.url + "/v1/views/profiles/alice", timeout=5,
                        headers=gateway.headers()).headers["ETag"]  # fmt: skip
    wrong, swept = [], Counter[str]()
    for target in params.targets(doc):
        for sent in params.family(target, token):
            sent = tuple(r.replace(params.ETAG, etag) if isinstance(r, str) else r for r in sent)
            if target.where == "header" and not all(map(params.sendable_in_a_header, sent)):
                continue
            answer = send(gateway, target, sent, token)
            TALLY.count(answer[0])
            swept[target.name] += 1
            accepted = params.documented(target, sent, token, views)
            problem = misanswered(target, sent, answer, accepted, codes)
            if target.name == "If-None-Match" and problem is None:
                tags = [t.strip() for s in sent for t in str(s).split(",")]
                match = any(t == "*" or t.removeprefix("W/") == etag.removeprefix("W/")
                            for t in tags)  # fmt: skip
                if answer[0] != (304 if match else 200):
                    problem = f"answered {answer[0]}; the tags {'' if match else 'do not '}match"
            if problem is not None:
                wrong.append(f"{target.method} {target.path} {target.name}="
                             f"{repr(sent)[:100]}: {problem}")  # fmt: skip
    assert not wrong, "\n".join(wrong[:40])
    assert set(swept) == set(params.REFUSALS) | {"If-None-Match"}, swept


SERVER = Path(__file__).resolve().parents[3] / "server"
READERS = {"get", "getlist", "single"}
"""``query_params.get(name)``, ``query_params.getlist(name)`` and ``liveviews.gateway.api.params.single``."""


def query_parameters_read() -> dict[str, str]:
    """Each query parameter name the gateway's code reads, and where: the name is a string
    literal or a module's string constant, or a parameter of a helper whose callers name it."""
    found = {}
    for path in SERVER.rglob("*.py"):
        tree = ast.parse(path.read_text())
        constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                     and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                     for t in n.targets if isinstance(t, ast.Name)}  # fmt: skip
        for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            forwarded = {a.arg for a in function.args.args}
            for node in ast.walk(function):
                arg = _named(node)
                if arg is None or (isinstance(arg, ast.Name) and arg.id in forwarded):
                    continue
                name = arg.value if isinstance(arg, ast.Constant) else constants.get(
                    getattr(arg, "id", ""))  # fmt: skip
                assert isinstance(name, str), f"{path}:{node.lineno}: name it by a constant"
                found[name] = f"{path.relative_to(SERVER.parent)}:{node.lineno}"
    return found


def _named(node: ast.AST) -> ast.expr | None:
    """The name argument of a call that reads a query parameter, if ``node`` is one."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    if isinstance(func, ast.Name) and func.id == "single" and len(node.args) == 2:
        return node.args[1]
    if (
        isinstance(func, ast.Attribute)
        and func.attr in READERS
        and isinstance(func.value, ast.Attribute)
        and func.value.attr == "query_params"
    ):
        return node.args[0]  # fmt: skip
    return None


def test_the_document_declares_every_query_parameter_the_gateway_reads(
    gateway: ServedGateway,
) -> None:
    """A parameter the document does not declare is one schemathesis never generates."""
    doc = requests.get(gateway.url + "/openapi.json", timeout=5).json()
    declared = {t.name for t in params.targets(doc) if t.where == "query"}
    read = query_parameters_read()
    assert {"recent", "last_event_id", "access_token"} <= set(read)
    assert not {n: where for n, where in read.items() if n not in declared}


# The schemathesis cases again, with values of those families in some of their parameters.


def mutation(target: params.Target) -> st.SearchStrategy[params.Sent] | None:
    """Values of ``target`` to put in a generated request, or None for a target the sweep
    alone covers (the token's header, which the signed-in run sets itself)."""
    if target.name == "Authorization":
        return None
    if target.where == "path":
        return params.PATH_SEGMENTS.map(lambda s: (s,))
    if target.name == "If-None-Match" or target.where == "header":
        return params.HEADER_VALUES.map(lambda v: (v,))
    one = params.NUMBER_LIKE | params.EVENT_ID_LIKE | params.QUERY_VALUES
    return st.lists(one, min_size=1, max_size=3).map(tuple)


def mutated(operation: Any, doc: dict[str, Any]) -> st.SearchStrategy[Fuzzed] | None:
    """Positive cases of ``operation`` with one to three of its targets' values replaced."""
    mine = {t: s for t in params.targets(doc) if (t.method, t.path) == (operation.method.upper(),
            operation.path) and (s := mutation(t)) is not None}  # fmt: skip
    if not mine:
        return None
    changes = st.sets(st.sampled_from(sorted(mine, key=str)), min_size=1, max_size=3).flatmap(
        lambda ts: st.fixed_dictionaries({t: mine[t] for t in ts}))  # fmt: skip
    return st.builds(apply, operation.as_strategy(generation_mode=GenerationMode.POSITIVE), changes)


def apply(case: Case, changes: dict[params.Target, params.Sent]) -> Fuzzed:
    """Path parameters are replaced in the case; query parameters and headers, which may be
    bytes or repeated (which a case cannot hold), when it is sent (``exercise``)."""
    for target, sent in changes.items():
        if target.where == "path":
            case.path_parameters = {**(case.path_parameters or {}), target.name: sent[0]}
    return Fuzzed(case, changes)


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
