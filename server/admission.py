"""Who may hold a connection of this process: the connection budgets, and each connection's slot.

Three rules, checked when a connection asks to be served:

- a signed-in connection (an SSE stream, or a WebSocket once its token checked) takes one of
  ``LV_MAX_CONNECTIONS`` slots, of which one subject holds at most
  ``LV_MAX_CONNECTIONS_PER_SUBJECT``;
- a WebSocket that has not signed in yet waits in a budget of its own,
  ``LV_MAX_UNAUTHENTICATED``, for at most ``LV_WS_AUTH_TIMEOUT_SECONDS``: handshakes without a
  token, however many, never take a slot a signed-in reader needs;
- one client address holds at most ``LV_MAX_CONNECTIONS_PER_ADDRESS`` connections of either
  kind. The address is the ASGI ``client``: the peer's, or the one a trusted proxy names
  (uvicorn's ``proxy_headers``, trusted from ``FORWARDED_ALLOW_IPS``), so many users behind one
  NAT or one untrusted proxy share it; the default leaves room for that.

A refusal is a ``GatewayError`` with its own code; a slot is given back once, by ``release``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from liveviews.gateway.errors import GatewayError, Unavailable
from liveviews.gateway.metrics import Metrics
from liveviews.gateway.settings import GatewaySettings

Transport = Literal["sse", "ws"]


class ConnectionLimit(GatewayError):
    """A client holds as many connections as it may: it must close one first."""

    status = 429
    code = "too_many_connections_per_subject"


class Slot:
    """One admitted connection's place in the budgets, held until ``release``."""

    __slots__ = ("transport", "subject", "address", "released")

    def __init__(self, transport: Transport, subject: str | None, address: str | None) -> None:
        self.transport = transport
        self.subject = subject
        """Who signed in on it; None while a WebSocket has not."""
        self.address = address
        self.released = False


class Admission:
    """The connection budgets of one process (see the module's docstring)."""

    def __init__(self, settings: GatewaySettings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self.per_subject: dict[str, int] = {}
        self.per_address: dict[str, int] = {}

    def admit(self, transport: Transport, subject: str | None, address: str | None) -> Slot:
        """A slot for a connection of ``subject`` from ``address``; ``subject`` None is a
        WebSocket not signed in yet. Raises the refusal if a budget is spent."""
        if subject is None:
            self._check_unauthenticated()
        else:
            self._check_signed_in(subject)
        self._check_address(address)
        slot = Slot(transport, subject, address)
        if address is not None:
            self.per_address[address] = self.per_address.get(address, 0) + 1
        if subject is None:
            self.metrics.ws_unauthenticated += 1
        else:
            self._count(slot, subject)
        return slot

    def sign_in(self, slot: Slot, subject: str) -> None:
        """A WebSocket of ``slot`` signed in as ``subject``: it moves from the budget of those
        not signed in to a connection slot, or is refused and stays where it was."""
        if slot.released or slot.subject is not None:
            return
        self._check_signed_in(subject)
        self.metrics.ws_unauthenticated -= 1
        self._count(slot, subject)

    def release(self, slot: Slot) -> None:
        """Give ``slot``'s places back; once, however often it is called."""
        if slot.released:
            return
        slot.released = True
        if slot.address is not None:
            _down(self.per_address, slot.address)
        if slot.subject is None:
            self.metrics.ws_unauthenticated -= 1
            return
        _down(self.per_subject, slot.subject)
        if slot.transport == "sse":
            self.metrics.sse_connections -= 1
        else:
            self.metrics.ws_connections -= 1

    def _count(self, slot: Slot, subject: str) -> None:
        slot.subject = subject
        self.per_subject[subject] = self.per_subject.get(subject, 0) + 1
        if slot.transport == "sse":
            self.metrics.sse_connections += 1
        else:
            self.metrics.ws_connections += 1

    def _check_signed_in(self, subject: str) -> None:
        s, metrics = self.settings, self.metrics
        if metrics.connections >= s.max_connections:
            metrics.connections_refused["process"] += 1
            raise Unavailable(
                "this gateway is at its connection limit; retry later or on another gateway.",
                code="too_many_connections",
            )
        limit = s.max_connections_per_subject
        if limit and self.per_subject.get(subject, 0) >= limit:
            metrics.connections_refused["subject"] += 1
            raise ConnectionLimit(
                f"{subject!r} holds {limit} connections to this gateway, as many as one user "
                "may; close one (one WebSocket carries many subscriptions) and retry.",
                code="too_many_connections_per_subject",
            )

    def _check_unauthenticated(self) -> None:
        if self.metrics.ws_unauthenticated >= self.settings.max_unauthenticated:
            self.metrics.connections_refused["unauthenticated"] += 1
            raise Unavailable(
                "this gateway has as many WebSockets waiting to sign in as it takes; retry "
                "shortly, with the token in the handshake to sign in at once.",
                code="too_many_unauthenticated",
            )

    def _check_address(self, address: str | None) -> None:
        limit = self.settings.max_connections_per_address
        if address is not None and limit and self.per_address.get(address, 0) >= limit:
            self.metrics.connections_refused["address"] += 1
            raise ConnectionLimit(
                f"this address holds {limit} connections to this gateway, as many as one "
                "address may; close one and retry.",
                code="too_many_connections_per_address",
            )


def client_address(scope: Mapping[str, Any]) -> str | None:
    """The client's address, as the server (and a proxy it trusts) gave it; None if unknown."""
    client = scope.get("client")
    return str(client[0]) if client else None


def _down(counts: dict[str, int], key: str) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]  # a subject or address with nothing open costs nothing
