"""How a run loop sleeps: until an attempt finishes, someone wakes it, or its next
timed duty (heartbeat, group-commit window, retry backoff, run deadline) is due.

One timer serves many waits: it only moves when the next duty comes sooner. A wake
that comes while the loop is not waiting yet (it gives the event loop a turn before it
waits, and a sibling run may free a slot then) is kept for the next wait, which then
returns at once: the loop looks again rather than sleep until its heartbeat. Each look
(``looked``) drops the wakes that came before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class Waiter:
    def __init__(self) -> None:
        self._wake: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        #: woken since the loop last looked, while it was not waiting
        self._woken = False
        #: another process left the run a message (``tell``, from any thread) not yet read;
        #: the loop clears it as it reads the store
        self.told = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def tell(self) -> None:
        """Another process left the run a message (a cancel, answers): wake the loop from
        any thread, so it reads the store now rather than at its next heartbeat."""
        self.told = True
        loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self.wake)
            except RuntimeError:
                pass   # its event loop has closed: the run is no longer driven here

    def wake(self) -> None:
        if self._wake is None:
            self._woken = True
        elif not self._wake.done():
            self._wake.set_result(None)

    def looked(self) -> None:
        """The loop is about to look at everything that could have woken it."""
        self._woken = False
        # known from the first look on: a ``tell`` between a run's first look and its first
        # wait must wake that wait, not leave it to the heartbeat
        self._loop = asyncio.get_running_loop()

    async def wait(self, timeouts: Iterable[float]) -> None:
        """Sleep at most ``min(timeouts)`` seconds (or until woken, or at once when woken
        since the loop last looked)."""
        if self._woken:
            self._woken = False
            return
        loop = asyncio.get_running_loop()
        self._loop = loop
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
