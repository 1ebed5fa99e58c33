"""The names a program imports from ``liveviews.client``: pinned, each real."""

from __future__ import annotations

import liveviews.client

PUBLIC = [
    "Change",
    "Client",
    "ClientState",
    "ClientStateError",
    "ConnectionLost",
    "Cursor",
    "GatewayError",
    "Group",
    "LiveviewsClientError",
    "Member",
    "Offset",
    "PrefixSubscription",
    "ProtocolError",
    "Ranked",
    "Subscription",
    "SubscriptionState",
    "WindowSubscription",
]  # fmt: skip


def test_the_public_names_are_pinned() -> None:
    # A name added or taken away is a change of the client's API: say so here and in
    # docs/CLIENT-PYTHON.md.
    assert sorted(liveviews.client.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(liveviews.client, name) is not None, name


def test_every_error_is_one_family_under_the_packages_root() -> None:
    from liveviews import LiveviewsError

    errors = [liveviews.client.GatewayError, liveviews.client.ConnectionLost,
              liveviews.client.ProtocolError, liveviews.client.ClientStateError]  # fmt: skip
    assert all(issubclass(e, liveviews.client.LiveviewsClientError) for e in errors)
    assert issubclass(liveviews.client.LiveviewsClientError, LiveviewsError)
    assert {e.code for e in errors[1:]} == {"connection_lost", "protocol_error", "invalid_state"}
