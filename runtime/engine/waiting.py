"""How a run loop sleeps: until an attempt finishes, someone wakes it, or its next
timed duty (heartbeat, group-commit window, retry backoff, run deadline) is due.

One timer serves many waits: it only moves when the next duty comes sooner.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class Waiter:
    def __init__(self) -> None:
        self._wake: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def wake(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def wait(self, timeouts: Iterable[float]) -> None:
        """Sleep at most ``min(timeouts)`` seconds (or until woken)."""
        loop = asyncio.get_running_loop()
        due = loop.time() + max(0.0, min(timeouts))
        if self._timer is None or self._timer.when() > due + 1e-4:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(due, self._on_timer)
        self._wake = loop.create_future()
        try:
            await self._wake
        finally:
            self._wake = None

    def _on_timer(self) -> None:
        self._timer = None
        self.wake()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
