"""One node attempt's identity, deadline and counters."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from asyncio import Future
from typing import Any


class AttemptScope:
    """Per-attempt counters: effect occurrences and interrupt slots restart at 0 on
    every attempt, so a re-execution meets the same identities in the same order.

    A plain class whose counters start as class attributes: an attempt is made at every
    step, and most never change them (set on the instance when they do)."""

    #: set once the attempt no longer counts (cancelled, past its deadline, its run gone)
    abandoned: bool = False
    #: set once the attempt's node code has returned or raised: its ctx is done with
    ended: bool = False
    #: set when the attempt raised an interrupt, even if node code caught the signal
    interrupt_id: str | None = None
    interrupts: int = 0
    tokens: int = 0
    cost: float = 0.0
    #: effects a ``def`` node's thread handed to the event loop, running there (made
    #: when first needed: most attempts never call an effect from a thread)
    effects_in_thread: list[Future[Any]] | None = None
    #: effect name -> the occurrences this attempt's calls of it took (made at the first call)
    occurrences: dict[str, set[int]] | None = None
    #: what an ``async def`` node was handed to await (``ctx.effect``, ``ctx.interrupt``),
    #: said as the node wrote it (made at the first call)
    calls: list[tuple[str, Coroutine[Any, Any, Any]]] | None = None

    def __init__(self, run_id: str, node: str, attempt: int, deadline: float | None,
                 clock: Callable[[], float], started_at: float = 0.0):
        self.run_id = run_id
        self.node = node
        self.attempt = attempt
        self.deadline = deadline
        self.clock = clock
        self.started_at = started_at

    def __repr__(self) -> str:
        return f"AttemptScope(run_id={self.run_id!r}, node={self.node!r}, attempt={self.attempt})"

    def claimed(self, name: str) -> set[int]:
        """The occurrences of effect ``name`` this attempt's calls have taken so far."""
        seen = self.occurrences
        if seen is None:
            seen = self.occurrences = {}
        taken = seen.get(name)
        if taken is None:
            taken = seen[name] = set()
        return taken

    def handed(self, said: str, call: Coroutine[Any, Any, Any]) -> Coroutine[Any, Any, Any]:
        """Keep a call handed to an ``async def`` node, to tell later whether it awaited it."""
        calls = self.calls
        if calls is None:
            calls = self.calls = []
        calls.append((said, call))
        return call

    def never_awaited(self) -> list[str]:
        """The calls handed to the node that it never awaited, each closed: the effect never
        ran, the question was never asked (and Python's own warning would only say so later)."""
        never = []
        for said, call in self.calls or ():
            if inspect.getcoroutinestate(call) == inspect.CORO_CREATED:
                never.append(said)
                call.close()
        return never

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - self.clock()
