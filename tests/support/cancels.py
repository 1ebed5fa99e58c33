"""A store call that swallows its task's cancel, as redis-py's do on Python 3.11.

redis-py's asyncio client sends each command through ``asyncio.wait_for`` when it has a socket
timeout (every client since redis-py 8, and the gateway's own always). On Python 3.11 that
``wait_for`` returns the command's answer instead of raising when the cancel arrives as the
answer does (CPython gh-86296, fixed in 3.12).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


class SwallowOnce:
    """Wraps a real store call: the first cancel that arrives just after it answered is
    swallowed, and the call returns its answer as if nothing happened; later cancels go
    through, so that a failing test ends instead of hanging."""

    def __init__(self, call: Callable[..., Awaitable[Any]]) -> None:
        self.call = call
        self.calls = 0
        self.swallowed = 0
        self.answered = asyncio.Event()

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        answer = await self.call(*args, **kwargs)
        self.calls += 1
        self.answered.set()
        try:
            await asyncio.sleep(0.05)  # the answer is on its way back when the cancel comes
        except asyncio.CancelledError:
            if self.swallowed:
                raise
            self.swallowed += 1
        return answer

    async def cancel_after_answer(self, task: asyncio.Task[None]) -> None:
        """Cancel ``task`` once a call answered; it must have ended, cancelled, within 5 s."""
        async with asyncio.timeout(10):
            await self.answered.wait()
        task.cancel()
        await asyncio.wait({task}, timeout=5)
        assert self.swallowed == 1
        assert task.cancelled(), f"ran on after it was cancelled ({self.calls} calls)"
