"""What a query-shaped subscription asks for (docs/PROTOCOL.md, section 5.1), read from a
WebSocket ``subscribe`` message or an SSE request's parameters and checked against the
application: the one place those rules live, so both transports refuse the same things alike.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from liveviews.gateway.auth import Principal
from liveviews.gateway.errors import BadRequest, NotFound
from liveviews.gateway.fanout.filtered import FilteredPrefixSubscription
from liveviews.gateway.fanout.query import PrefixSubscription, WindowSubscription
from liveviews.gateway.feed.queries import Rank
from liveviews.gateway.gateway import Gateway
from liveviews.gateway.wire.eventid import PrefixId, WindowId
from liveviews.gateway.wire.filters import Filter

log = logging.getLogger("liveviews.gateway")

MAX_PREFIX = 256
"""As long as a key may be."""


def prefix_subscription(
    gw: Gateway,
    principal: Principal,
    view: str,
    prefix: str,
    resume: str | None,
    filter: Filter | None = None,
) -> PrefixSubscription:
    """A subscription to the keys of ``view`` that start with ``prefix`` ('' for all), and of
    their rows those that match ``filter``, if given."""
    v = gw.app.views.get(view)
    if v is None:
        raise NotFound(
            f"there is no view {view!r}; views: {', '.join(sorted(gw.app.views))}.",
            code="unknown_view",
        )
    if not v.listable:
        raise BadRequest(
            f"view {view!r} is not listable: subscribe to one of its keys, or declare it "
            "with app.view(..., listable=True) to subscribe to a prefix or the whole view.",
            code="not_listable",
        )
    if len(prefix) > MAX_PREFIX:
        raise BadRequest(
            f"a prefix is at most {MAX_PREFIX} characters long.", code="invalid_parameter"
        )
    subject = principal.subject
    parsed = PrefixId.parse(resume, gw.layout.shards) if resume else None
    if principal.service:
        log.info("service %r reads %s with prefix %r", subject, view, prefix)
    service = principal.service

    def readable(key: str) -> bool:
        return service or v.readable(subject, key)

    if filter is not None:
        return FilteredPrefixSubscription(
            gw.source, gw.reads, view, prefix, readable, parsed, filter
        )
    return PrefixSubscription(gw.source, gw.reads, view, prefix, readable, parsed)


def window_subscription(
    gw: Gateway,
    principal: Principal,
    view: str,
    key: str,
    limit: int,
    after: Rank | None,
    resume: str | None,
) -> WindowSubscription:
    """A subscription to the ``limit`` first rows of (``view``, ``key``), after ``after``."""
    v = gw.readable_view(principal, view, key)
    if v.limit is None:
        raise BadRequest(
            f"view {view!r} keeps its rows in no order, so it has no window: subscribe "
            "without a limit, or declare the view with a limit and give its rows a score.",
            code="not_ranked",
        )
    if not 1 <= limit <= v.limit:
        raise BadRequest(
            f"'limit' must be from 1 to {v.limit}, the rows {view!r} keeps per key.",
            code="invalid_parameter",
        )
    parsed = WindowId.parse(resume) if resume else None
    return WindowSubscription(
        gw.source, gw.reads, view, key, view_limit=v.limit, limit=limit, after=after,
        resume=parsed,
    )  # fmt: skip


def after_rank(score: Any, row: Any, code: str) -> Rank:
    """The row a page starts after: a finite number and a row id."""
    if (isinstance(score, bool) or not isinstance(score, int | float)
            or not math.isfinite(score) or not isinstance(row, str)):  # fmt: skip
        raise BadRequest(
            "'after' names the row a page starts after: its 'score' (a finite number) and its "
            "'row' (a string), as the last row of the page before.",
            code=code,
        )
    return float(score), row
