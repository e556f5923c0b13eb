"""The storage contract every store implements (MemoryStore, SqlStore).

Stores are synchronous: they are called from the run loop between node
completions, and a transaction on an embedded database takes microseconds.
Every write goes through ``commit(batch)``, one transaction per batch, guarded by
the run's fencing token so that a process that lost its lease cannot write.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol, runtime_checkable

from ..core.jsonvalues import JSON
from ..core.records import (
    Batch,
    Checkpoint,
    CheckpointSummary,
    CompensationAsk,
    Interrupt,
    InterruptStatus,
    JournalEntry,
    NodeAttempt,
    PendingWrite,
    Run,
    RunKind,
    SentAnswer,
    TraceEvent,
)
from ..core.states import RunStatus

#: the highest sequence number (of a checkpoint or event) a store keeps: PostgreSQL's
#: seq columns are 32-bit. A read bounded beyond it selects what the end would
MAX_SEQ = 2**31 - 1


def connection_lost(error: BaseException) -> bool:
    """The errors any store raises when what it talks to cannot be reached: the OS's own."""
    return isinstance(error, (ConnectionError, TimeoutError))


@runtime_checkable
class CheckpointStore(Protocol):
    #: False for stores that lose everything with the process (MemoryStore)
    durable: bool

    def save_graph(self, description: Mapping[str, JSON]) -> None:
        """Keep a graph's structure under its version (idempotent)."""

    def graph_description(self, version: str) -> Mapping[str, JSON] | None: ...

    def create_run(self, batch: Batch) -> None:
        """Insert ``batch.run`` (a new id) and the rest of the batch in one transaction."""

    def create_runs(self, batches: Sequence[Batch]) -> None:
        """``create_run`` for several runs in one transaction: all are created, or none."""

    def commit(self, batch: Batch) -> None:
        """Write the batch in one transaction; ``LeaseLost`` if ``batch.fence`` is stale."""

    def get_run(self, run_id: str) -> Run:
        """The run, or ``NotFound``."""

    def list_runs(self, status: RunStatus | None = None, thread_id: str | None = None,
                  limit: int = 100, *, graph_name: str | None = None, kind: RunKind | None = None,
                  search: str | None = None, offset: int = 0, oldest_first: bool = False,
                  lease_expired_by: float | None = None) -> list[Run]:
        """Newest first (``oldest_first``: in the order they were created, as a queue is
        served); ``search``: runs whose id or thread id contains it; ``offset``: how many
        matching runs to skip (pages); ``lease_expired_by``: runs whose lease expired at or
        before that time, or that hold none (a worker's search for runs whose process is gone,
        however many others are being driven)."""

    def child_runs(self, run_id: str) -> list[Run]:
        """Runs whose parent is ``run_id``, oldest first."""

    def acquire_lease(self, run_id: str, owner: str, expires_at: float, expected_fence: int) -> Run:
        """Take the run's lease if its fence is still ``expected_fence``; bumps the fence.
        ``LeaseLost`` if someone else moved it on first."""

    def request_cancel(self, run_id: str, reason: str) -> None:
        """Ask the process that owns a running run to cancel it."""

    def cancel_request(self, run_id: str) -> str | None:
        """The pending cancel reason for a run, if any."""

    def send_answers(self, run_id: str, answers: Mapping[str, JSON], by: str | None, at: float) -> bool:
        """Leave checked answers to pending questions of a running run for the process that
        drives it. All or nothing: False, and nothing left, if one of them was answered, or
        had an answer left for it, first. ``NotFound`` for an unknown run."""

    def sent_answers(self, run_id: str) -> dict[str, SentAnswer]:
        """Answers left for the run's questions still pending, by interrupt id; one is gone
        once its question is answered (the answer recorded by a ``commit``)."""

    def ask_compensation(self, run_id: str, retry_in_doubt: bool, at: float) -> None:
        """Leave the ended run's compensation to a worker; a later ask replaces an earlier one.
        ``NotFound`` for an unknown run."""

    def compensation_asks(self, run_id: str | None = None, limit: int = 100) -> list[CompensationAsk]:
        """Compensations asked and not yet taken up, oldest first (only the run's, when given)."""

    def drop_compensation_ask(self, run_id: str, at: float) -> None:
        """A worker took up the ask made at ``at``: forget it, unless it was asked again since."""

    def checkpoints(self, run_id: str, first_seq: int = 0, limit: int | None = None) -> list[Checkpoint]:
        """The run's checkpoints with ``seq >= first_seq``, oldest first, at most ``limit`` of
        them, with full node states (``changed`` as in the whole history)."""

    def get_checkpoint(self, checkpoint_id: str) -> Checkpoint:
        """One checkpoint with full node states, or ``NotFound``."""

    def find_checkpoint(self, run_id: str, at_or_before: int | None = None, *,
                        with_snapshot: bool = False) -> Checkpoint | None:
        """The run's checkpoint with the highest seq ≤ ``at_or_before`` (any seq when None),
        only among those holding a full state snapshot when ``with_snapshot``; None if none.
        Reads one checkpoint, not the run's history."""

    def pending_writes(self, run_id: str, checkpoint_seq: int | None = None, *,
                       nodes: Collection[str] | None = None) -> list[PendingWrite]:
        """Every recorded node outcome of the run, in the order recorded (only those recorded
        against checkpoint ``checkpoint_seq``, when given; only those of the node instances
        ``nodes``, when given, at the cost of what those recorded, not of the run's length)."""

    def node_writes(self, run_ids: Sequence[str]) -> dict[str, JSON]:
        """The succeeded writes of each node, looked up in ``run_ids`` in order
        (first run that has the node wins): a run's lineage of inherited outcomes."""

    def node_attempts(self, run_id: str) -> list[NodeAttempt]: ...

    def journal(self, run_ids: Sequence[str]) -> list[JournalEntry]:
        """Effect journal entries of these runs, in the order recorded."""

    def interrupts(self, run_id: str | None = None,
                   status: InterruptStatus | None = None) -> list[Interrupt]: ...

    def interrupt(self, interrupt_id: str) -> Interrupt:
        """One interrupt by id (``NotFound`` if there is none), without reading the others."""

    def events(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[TraceEvent]:
        """Events after ``after_seq`` in order, at most ``limit`` of them."""

    def checkpoint_summaries(self, run_id: str, first_seq: int, last_seq: int) -> list[CheckpointSummary]:
        """The run's checkpoints with ``first_seq <= seq <= last_seq``, oldest first, without
        their node states (a page of a timeline)."""

    def unreachable(self, error: BaseException) -> bool:
        """Whether ``error`` (raised by this store) says it cannot be reached for now, so that
        a run keeps what it records and tries again (``engine/outage.py``) rather than fail."""

    def close(self) -> None: ...
