"""Concurrency slots shared by every run a Runtime drives.

A run may start an attempt only when it has room under its own bound and the
Runtime has room under its bound; a run that frees a slot wakes the others, so a
run starved by its siblings starts as soon as one finishes.
"""

from __future__ import annotations

from typing import Protocol


class Driven(Protocol):
    """A run loop, as the slots see it."""

    @property
    def run_id(self) -> str: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def own_bound(self) -> int: ...
    def wake(self) -> None: ...
    def request_cancel(self, reason: str) -> None: ...


class Slots:
    def __init__(self, bound: int):
        self.bound = bound
        self.in_flight = 0
        self._active: dict[str, Driven] = {}

    def attach(self, loop: Driven) -> None:
        self._active[loop.run_id] = loop

    def detach(self, loop: Driven) -> None:
        if self._active.get(loop.run_id) is loop:
            del self._active[loop.run_id]

    def driving(self, run_id: str) -> Driven | None:
        """The loop driving ``run_id`` in this process, if any."""
        return self._active.get(run_id)

    def room(self, loop: Driven) -> int:
        return min(loop.own_bound - loop.in_flight, self.bound - self.in_flight)

    def acquire(self) -> None:
        self.in_flight += 1

    def release(self, loop: Driven) -> None:
        self.in_flight -= 1
        for other in list(self._active.values()):
            if other is not loop:
                other.wake()
