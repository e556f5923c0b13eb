"""One node attempt's identity, deadline and counters."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class AttemptScope:
    """Per-attempt counters: effect occurrences and interrupt slots restart at 0 on
    every attempt, so a re-execution meets the same identities in the same order."""

    run_id: str
    node: str
    attempt: int
    deadline: float | None
    clock: Callable[[], float]
    started_at: float = 0.0
    abandoned: bool = False
    #: set when the attempt raised an interrupt, even if node code caught the signal
    interrupt_id: str | None = None
    occurrences: dict[str, int] = field(default_factory=dict)
    interrupts: int = 0
    tokens: int = 0
    cost: float = 0.0
    #: effects a ``def`` node's thread handed to the event loop and is waiting for (made
    #: when first needed: most attempts never call an effect from a thread)
    effects_in_thread: list[Future[Any]] | None = None

    def next_occurrence(self, name: str) -> int:
        n = self.occurrences.get(name, 0)
        self.occurrences[name] = n + 1
        return n

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - self.clock()
