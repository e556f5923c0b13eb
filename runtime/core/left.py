"""What one process leaves in the store for another to act on: answers for the process
driving a run, compensations for a worker that can import the undo functions; and what a
store that can tell other processes at once (PostgreSQL) tells them it is about."""

from __future__ import annotations

from dataclasses import dataclass

from .jsonvalues import JSON


@dataclass(frozen=True, slots=True)
class SentAnswer:
    """An answer another process left in the store for a question of a running run: the
    process driving the run takes it as it polls for cancel requests (ADR 0011)."""

    interrupt_id: str
    answer: JSON
    by: str | None
    at: float


@dataclass(frozen=True, slots=True)
class CompensationAsk:
    """A compensation left to a worker (``compensate(queue=True)``), which can import the undos."""

    run_id: str
    retry_in_doubt: bool
    at: float


#: a cancel or answers were left for the process driving the run
REQUEST = "request"
#: a run was queued, or a compensation asked, for the workers
QUEUED = "queued"
#: (as kind and run id) some may have been missed: look at everything
ANY = ""
