"""Concurrency slots shared by every run a Runtime drives.

A run may start an attempt only when it has room under its own bound and the
Runtime has room under its bound; a run that frees a slot wakes the others, so a
run starved by its siblings starts as soon as one finishes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from ..core.left import ANY, REQUEST
from .waiting import Waiter

#: a store's ``subscribe`` (PostgreSQL's): tells of messages other processes leave for runs
Subscribe = Callable[[Callable[[str, str], None]], Callable[[], None]]


class Driven(Protocol):
    """A run loop, as the slots see it."""

    @property
    def run_id(self) -> str: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def own_bound(self) -> int: ...
    @property
    def waiter(self) -> Waiter: ...
    def wake(self) -> None: ...
    def request_cancel(self, reason: str) -> None: ...


class Slots:
    def __init__(self, bound: int, subscribe: Subscribe | None = None):
        self.bound = bound
        self.in_flight = 0
        self._active: dict[str, Driven] = {}
        # what the store hears is looked up here from its thread
        self._lock = threading.Lock()
        self._subscribe = subscribe

    def attach(self, loop: Driven) -> None:
        with self._lock:
            self._active[loop.run_id] = loop
        if self._subscribe is not None:
            # once this Runtime first drives a run: a process that only reads listens to nothing.
            # Neither the store's method nor the call that unsubscribes is kept: what the store's
            # thread holds (``heard``) must not hold the store, nor make a cycle with it (closing
            # the store stops its listener)
            subscribe, self._subscribe = self._subscribe, None
            subscribe(self.heard)

    def detach(self, loop: Driven) -> None:
        with self._lock:
            if self._active.get(loop.run_id) is loop:
                del self._active[loop.run_id]

    def heard(self, kind: str, run_id: str) -> None:
        """Another process left a message for a run driven here (called from any thread)."""
        if kind not in (REQUEST, ANY):
            return
        with self._lock:
            told = list(self._active.values()) if run_id == ANY else [self._active.get(run_id)]
        for loop in told:
            if loop is not None:
                loop.waiter.tell()

    def driving(self, run_id: str) -> Driven | None:
        """The loop driving ``run_id`` in this process, if any."""
        return self._active.get(run_id)

    def room(self, loop: Driven) -> int:
        return min(loop.own_bound - loop.in_flight, self.bound - self.in_flight)

    def acquire(self) -> None:
        self.in_flight += 1

    def release(self, loop: Driven, count: int = 1) -> None:
        """``count`` attempts of ``loop`` ended: the other runs may start theirs."""
        self.in_flight -= count
        if count and len(self._active) > 1:   # (a lone run has no one to wake)
            for other in list(self._active.values()):
                if other is not loop:
                    other.wake()
