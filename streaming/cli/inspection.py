"""``liveviews inspect VIEW KEY``: a key's rows, its position in its shard, and its last deltas;
with ``--as-of``, its rows as they were when the view reflected a log offset."""

from __future__ import annotations

from typing import Any

import click

from liveviews.changes import asof
from liveviews.changes.topic import (
    Delta,
    changes_stream,
    decode_delta,
    read_snapshot,
    shard_for,
)
from liveviews.cli import render
from liveviews.cli.base import Env, Failure, emit, json_option, pass_env
from liveviews.errors import LiveviewsError
from liveviews.log.events import Offset
from liveviews.store.client import Client

PAGE = 500
MAX_SCANNED = 100_000
"""Shard entries read backwards at most to find a key's last deltas: a key that changed long
ago costs a bounded read, not the whole shard."""


def last_deltas(
    client: Client, shard: int, name: str, key: str, count: int, newest: str | None
) -> tuple[list[Delta], bool]:
    """The last ``count`` deltas of (``name``, ``key``) in ``shard``, newest first, read
    backwards from the key's latest delta ``newest``; and whether the bound stopped the read."""
    found: list[Delta] = []
    if count <= 0 or newest is None:
        return found, False
    cursor, scanned = newest, 0
    wanted = (name.encode(), key.encode())
    while scanned < MAX_SCANNED:
        entries: Any = client.xrevrange(changes_stream(shard), cursor, "-", count=PAGE)
        for entry_id, fields in entries:
            if (fields.get(b"view"), fields.get(b"key")) == wanted:
                found.append(decode_delta(entry_id, fields))
                if len(found) == count:
                    return found, False
        scanned += len(entries)
        if len(entries) < PAGE:
            return found, False
        cursor = f"({entries[-1][0].decode()}"
    return found, True


def current(env: Env, view: str, key: str, count: int) -> dict[str, Any]:
    """The key's rows in the serving version now, as ``--json`` prints them."""
    client, shards = env.client, env.settings.change_shards
    serving = asof.serving(client, asof.owner(env.app, view))
    snap = read_snapshot(client, view, key, shards, serving.namespace)
    shard = shard_for(view, key, shards)
    deltas, bounded = last_deltas(client, shard, view + serving.namespace, key, count,
                                  snap.last_change)  # fmt: skip
    return {
        "view": view,
        "key": key,
        "pipeline": serving.pipeline,
        "version": serving.version,
        "rows": snap.rows,
        "position": {"shard": shard, "head": snap.position, "last_change": snap.last_change},
        "deltas": [{"id": d.id, "batch": d.batch, "ops": d.ops} for d in deltas],
        "deltas_bounded": bounded,
    }


def _offset(ctx: click.Context, _: click.Parameter, value: str | None) -> Offset | None:
    if value is None:
        return None
    try:
        return asof.parse_offset(value, ctx.ensure_object(Env).settings.log_partitions)
    except LiveviewsError as exc:
        raise click.BadParameter(exc.message) from None


def _show(doc: dict[str, Any]) -> None:
    out = render.console()
    version = doc["version"] or "-"
    title = f"{doc['view']}/{doc['key']} in {doc['pipeline']} version {version}"
    if "as_of" in doc:
        a = doc["as_of"]
        title += f", as of {a['offset']} (batch {a['batch']})"
    rows = render.table("row", "value", free="value")
    for row_id, value in sorted(doc["rows"].items()):
        rows.add_row(row_id, render.json_text(value))
    render.section(out, title, rows if doc["rows"] else "no rows")
    pos = doc["position"]
    if "head" in pos:
        where = (f"shard {pos['shard']}: head {pos['head']}, the key's last delta "
                 f"{pos['last_change'] or 'none'}")  # fmt: skip
    else:
        where = f"the key's last delta by then: {pos['last_change'] or 'none'}"
    render.section(out, "Position", where)
    if doc["deltas"]:
        deltas = render.table("entry id", "batch", "ops", free="ops")
        for d in doc["deltas"]:
            deltas.add_row(d["id"], str(d["batch"]), render.json_text(d["ops"]))
        render.section(out, "Deltas, newest first", deltas)
    if doc.get("deltas_bounded"):
        out.print(f"(stopped after reading {MAX_SCANNED:,} entries of the shard)")


@click.command(name="inspect")
@click.argument("view")
@click.argument("key")
@click.option("--deltas", "count", type=click.IntRange(min=0), default=10, show_default=True,
              help="How many of the key's last deltas to show.")  # fmt: skip
@click.option("--as-of", "offset", metavar="OFFSET", callback=_offset,
              help="<partition>:<entry id>, as POST /v1/events answers it: the rows as they "
                   "were when the view reflected that event.")  # fmt: skip
@json_option
@pass_env
def inspect_key(
    env: Env, view: str, key: str, count: int, offset: Offset | None, as_json: bool
) -> None:
    """The rows of KEY in VIEW, its position and its last deltas, in the version that serves
    readers. Exit 1 when the view does not exist or history that old is gone."""
    try:
        if offset is None:
            doc = current(env, view, key, count)
        else:
            found = asof.rows_as_of(env.client, env.app, env.settings.change_shards, view, key,
                                    offset)  # fmt: skip
            doc = found.to_dict(count)
    except LiveviewsError as exc:
        raise Failure(exc.message, code=exc.code) from None
    if as_json:
        emit(doc)
    else:
        _show(doc)
