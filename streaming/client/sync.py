"""The client for scripts and notebooks: the same ``Client``, run on an event loop in a thread
of its own, with blocking calls.

    from liveviews.client import sync

    with sync.connect("http://127.0.0.1:8000", token=token) as client:
        sub = client.subscribe("profiles", "alice").ready()
        print(sub.rows)
        for change in sub.changes(timeout=5):  # until 5 s pass without a change
            print(change)

Everything a subscription holds is read on the client's thread and handed over as a copy, so a
value read here never changes under the reader. A plain (not async) ``token_provider`` is
called on the client's thread too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from liveviews.client.client import Client
from liveviews.client.errors import ClientStateError
from liveviews.client.query import Cursor, parse_query
from liveviews.client.shapes import PrefixSubscription, Ranked, WindowSubscription
from liveviews.client.subscription import Change, Subscription, SubscriptionState
from liveviews.client.transport import ClientState, TransportName
from liveviews.client.types import Frontier, Json
from liveviews.log.events import Offset

if TYPE_CHECKING:
    import pandas

T = TypeVar("T")


def connect(url: str, **options: Any) -> SyncClient:
    """A connected ``SyncClient``; ``options`` are ``Client``'s (``token=`` or
    ``token_provider=``, ...). Close it, or use it as ``with sync.connect(...) as client:``."""
    return SyncClient(url, **options)


class SyncClient:
    def __init__(self, url: str, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name="liveviews-client"
        )
        self._thread.start()
        self._closed = False
        try:
            self._client = self.call(self._open(url, options))
        except BaseException:
            self._stop_loop()
            raise

    @staticmethod
    async def _open(url: str, options: dict[str, Any]) -> Client:
        return await Client(url, **options).__aenter__()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the client's loop and wait for it; after ``timeout`` seconds it is
        cancelled and TimeoutError raised."""
        if self._closed:
            coro.close()
            raise ClientStateError("this client is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout} s") from None

    def read(self, fn: Callable[[], T]) -> T:
        """``fn()`` run on the client's loop, between two of its callbacks."""

        async def run() -> T:
            return fn()

        return self.call(run())

    @property
    def state(self) -> ClientState:
        return self._client.state

    @property
    def transport(self) -> TransportName:
        """As ``Client.transport``: ``"websocket"`` or ``"sse"``."""
        return self._client.transport

    def subscribe(
        self,
        view: str,
        key: str | None = None,
        *,
        prefix: str | None = None,
        limit: int | None = None,
        after: Cursor | tuple[float, str] | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> SyncSubscription:
        """As ``Client.subscribe``."""

        def subscribe() -> Subscription:
            # Client.subscribe's overloads say which arguments make which shape; the query
            # here may be of any shape, checked by the same parse_query.
            query = parse_query(view, key, prefix=prefix, limit=limit, after=after, filter=filter)
            return self._client._follow(query)

        return SyncSubscription(self, self.read(subscribe))

    def publish(
        self,
        events: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        timeout: float | None = 30.0,
    ) -> list[Offset]:
        """As ``Client.publish``."""
        return self.call(self._client.publish(events, idempotency_key=idempotency_key), timeout)

    def close(self) -> None:
        if self._closed:
            return
        self.call(self._client.close())
        self._closed = True
        self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncSubscription:
    """A subscription seen from another thread: its contents as copies, its changes by blocking
    calls. ``next(timeout)`` raises TimeoutError when none came in time, StopIteration once the
    subscription closed, and its error if it failed."""

    def __init__(self, client: SyncClient, sub: Subscription) -> None:
        self._client = client
        self._sub = sub

    @property
    def subscription(self) -> Subscription:
        """The asynchronous subscription, to be touched on the client's loop only."""
        return self._sub

    @property
    def state(self) -> SubscriptionState:
        return self._sub.state

    @property
    def rows(self) -> dict[str, Json]:
        return self._client.read(lambda: dict(self._sub.rows))

    @property
    def keys(self) -> dict[str, dict[str, Json]]:
        sub = self._sub
        if not isinstance(sub, PrefixSubscription):
            raise AttributeError("only a prefix subscription has keys")
        return self._client.read(lambda: {k: dict(r) for k, r in sub.keys.items()})

    @property
    def ranked(self) -> list[Ranked]:
        sub = self._sub
        if not isinstance(sub, WindowSubscription):
            raise AttributeError("only a window subscription is ranked")
        return self._client.read(lambda: list(sub.ranked))

    @property
    def frontier(self) -> Frontier:
        return self._client.read(lambda: dict(self._sub.frontier))

    @property
    def lag_ms(self) -> int | None:
        return self._sub.lag_ms

    @property
    def last_event_id(self) -> str | None:
        return self._sub.last_event_id

    def ready(self, timeout: float | None = 10.0) -> SyncSubscription:
        """Once the first snapshot is in."""
        self._client.call(self._sub.ready(), timeout)
        return self

    def next(self, timeout: float | None = None) -> Change:
        try:
            return self._client.call(self._sub.__anext__(), timeout)
        except StopAsyncIteration:
            raise StopIteration from None

    def __iter__(self) -> Iterator[Change]:
        return self.changes()

    def changes(self, timeout: float | None = None) -> Iterator[Change]:
        """Each change until the subscription closes, or until ``timeout`` seconds pass
        without one."""
        while True:
            try:
                yield self.next(timeout)
            except (StopIteration, TimeoutError):
                return

    def reflects(
        self, offsets: Offset | str | Iterable[Offset | str], timeout: float | None = 30.0
    ) -> None:
        self._client.call(self._sub.reflects(offsets), timeout)

    def unsubscribe(self) -> None:
        self._client.read(self._sub.unsubscribe)

    def to_pandas(self) -> pandas.DataFrame:
        return self._client.read(self._sub.to_pandas)
