"""In-process store: fast, and gone with the process (``durable = False``)."""

from __future__ import annotations

import copy
import threading
from dataclasses import replace
from collections.abc import Collection, Iterable, Mapping, Sequence

from ..core.errors import InvalidRequest, LeaseLost, NotFound
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
    WriteKind,
    event_type,
)
from ..core.states import RunStatus
from .base import connection_lost


class MemoryStore:
    durable = False

    @staticmethod
    def unreachable(error: BaseException) -> bool:
        return connection_lost(error)   # nothing to reach; a wrapper of it may raise these

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._graphs: dict[str, Mapping[str, JSON]] = {}
        self._runs: dict[str, Run] = {}
        self._order: list[str] = []
        self._checkpoints: dict[str, list[Checkpoint]] = {}
        self._cp_by_id: dict[str, Checkpoint] = {}
        self._writes: dict[str, list[PendingWrite]] = {}
        self._attempts: dict[str, list[NodeAttempt]] = {}
        self._journal: dict[str, list[JournalEntry]] = {}
        self._interrupts: dict[str, Interrupt] = {}
        self._events: dict[str, list[TraceEvent]] = {}
        self._cancels: dict[str, str] = {}
        self._sent: dict[str, SentAnswer] = {}
        self._asks: dict[str, CompensationAsk] = {}   # by run id, in the order asked

    def save_graph(self, description: Mapping[str, JSON]) -> None:
        with self._lock:
            if description["version"] not in self._graphs or description.get("ref"):
                self._graphs[description["version"]] = copy.deepcopy(dict(description))

    def graph_description(self, version: str) -> Mapping[str, JSON] | None:
        return self._graphs.get(version)

    def create_run(self, batch: Batch) -> None:
        self.create_runs([batch])

    def create_runs(self, batches: Sequence[Batch]) -> None:
        with self._lock:
            runs: list[Run] = []
            for batch in batches:  # check them all before changing anything
                run = batch.run
                if run is None:
                    raise InvalidRequest("create_run needs batch.run")
                if run.id in self._runs or any(r.id == run.id for r in runs):
                    raise InvalidRequest(f"run {run.id} already exists")
                _check_single_continuation(run, [*self._runs.values(), *runs])
                runs.append(run)
            ids = [c.id for b in batches for c in b.checkpoints]
            if len(set(ids)) != len(ids) or any(i in self._cp_by_id for i in ids):
                raise InvalidRequest("checkpoint ids must be unique; some repeat or exist already")
            for run, batch in zip(runs, batches):
                self._runs[run.id] = run
                self._order.append(run.id)
                for table in (self._checkpoints, self._writes, self._attempts, self._journal, self._events):
                    table[run.id] = []
                self._apply(batch)

    def commit(self, batch: Batch) -> None:
        with self._lock:
            current = self._get(batch.run_id)
            if batch.fence is not None and current.fence != batch.fence:
                raise LeaseLost(f"run {batch.run_id}: fence {batch.fence} is stale (now {current.fence})")
            self._apply(batch)

    def _apply(self, b: Batch) -> None:
        if b.run is not None:
            self._runs[b.run.id] = b.run
        for cp in b.checkpoints:
            self._checkpoints[cp.run_id].append(cp)
            self._cp_by_id[cp.id] = cp
        for w in b.writes:
            self._writes[w.run_id].append(w)
        for a in b.attempts:
            self._attempts[a.run_id].append(a)
        for e in b.effects:
            self._journal[e.run_id].append(e)
        for i in b.interrupts:
            self._interrupts[i.id] = i
            if i.status != InterruptStatus.PENDING:
                self._sent.pop(i.id, None)
        for ev in b.events:
            if type(ev.type) is str:   # given as text: kept as the SQL store reads it back
                ev = replace(ev, type=event_type(ev.type))
            self._events[ev.run_id].append(ev)
        if b.run is not None and b.run.status != RunStatus.RUNNING:
            self._cancels.pop(b.run.id, None)

    def _get(self, run_id: str) -> Run:
        try:
            return self._runs[run_id]
        except KeyError:
            raise NotFound(f"no run with id {run_id!r}") from None

    def get_run(self, run_id: str) -> Run:
        with self._lock:
            return self._get(run_id)

    def list_runs(self, status: RunStatus | None = None, thread_id: str | None = None,
                  limit: int = 100, *, graph_name: str | None = None, kind: RunKind | None = None,
                  search: str | None = None, offset: int = 0, oldest_first: bool = False,
                  lease_expired_by: float | None = None) -> list[Run]:
        with self._lock:
            runs = [self._runs[i] for i in (self._order if oldest_first else reversed(self._order))]
        return [r for r in runs if (status is None or r.status == status)
                and (thread_id is None or r.thread_id == thread_id)
                and (graph_name is None or r.graph_name == graph_name) and (kind is None or r.kind == kind)
                and (not search or search in r.id or search in r.thread_id)
                and (lease_expired_by is None or r.lease_expires_at is None
                     or r.lease_expires_at <= lease_expired_by)][offset:offset + limit]

    def child_runs(self, run_id: str) -> list[Run]:
        with self._lock:
            return [self._runs[i] for i in self._order if self._runs[i].parent_run_id == run_id]

    def acquire_lease(self, run_id: str, owner: str, expires_at: float, expected_fence: int) -> Run:
        with self._lock:
            run = self._get(run_id)
            if run.fence != expected_fence:
                raise LeaseLost(f"run {run_id}: lease taken by {run.lease_owner} first")
            run = run.evolve(lease_owner=owner, lease_expires_at=expires_at, fence=run.fence + 1)
            self._runs[run_id] = run
            return run

    def request_cancel(self, run_id: str, reason: str) -> None:
        with self._lock:
            self._get(run_id)
            self._cancels[run_id] = reason

    def cancel_request(self, run_id: str) -> str | None:
        return self._cancels.get(run_id)

    def send_answers(self, run_id: str, answers: Mapping[str, JSON], by: str | None, at: float) -> bool:
        with self._lock:
            self._get(run_id)
            for iid in answers:
                i = self._interrupts.get(iid)
                if i is None or i.run_id != run_id or i.status != InterruptStatus.PENDING or iid in self._sent:
                    return False
            for iid, value in answers.items():
                self._sent[iid] = SentAnswer(iid, value, by, at)
            return True

    def sent_answers(self, run_id: str) -> dict[str, SentAnswer]:
        with self._lock:
            return {iid: s for iid, s in self._sent.items() if self._interrupts[iid].run_id == run_id}

    def ask_compensation(self, run_id: str, retry_in_doubt: bool, at: float) -> None:
        with self._lock:
            self._get(run_id)
            self._asks.pop(run_id, None)   # asked again: served after the asks made before it
            self._asks[run_id] = CompensationAsk(run_id, bool(retry_in_doubt), at)

    def compensation_asks(self, run_id: str | None = None, limit: int = 100) -> list[CompensationAsk]:
        with self._lock:
            found = [a for a in self._asks.values() if run_id is None or a.run_id == run_id]
        return sorted(found, key=lambda a: a.at)[:limit]

    def drop_compensation_ask(self, run_id: str, at: float) -> None:
        with self._lock:
            if (ask := self._asks.get(run_id)) is not None and ask.at == at:
                del self._asks[run_id]

    def checkpoints(self, run_id: str, first_seq: int = 0, limit: int | None = None) -> list[Checkpoint]:
        with self._lock:
            self._get(run_id)
            found = [c for c in self._checkpoints[run_id] if c.seq >= first_seq]
        return found if limit is None else found[:limit]

    def get_checkpoint(self, checkpoint_id: str) -> Checkpoint:
        try:
            return self._cp_by_id[checkpoint_id]
        except KeyError:
            raise NotFound(f"no checkpoint with id {checkpoint_id!r}") from None

    def find_checkpoint(self, run_id: str, at_or_before: int | None = None, *,
                        with_snapshot: bool = False) -> Checkpoint | None:
        with self._lock:
            self._get(run_id)
            for c in reversed(self._checkpoints[run_id]):
                if (at_or_before is None or c.seq <= at_or_before) and (not with_snapshot or c.snapshot is not None):
                    return c
        return None

    def pending_writes(self, run_id: str, checkpoint_seq: int | None = None, *,
                       nodes: Collection[str] | None = None) -> list[PendingWrite]:
        wanted = None if nodes is None else set(nodes)
        with self._lock:
            self._get(run_id)
            return [w for w in self._writes[run_id] if (checkpoint_seq is None or w.checkpoint_seq == checkpoint_seq)
                    and (wanted is None or w.node in wanted)]

    def node_writes(self, run_ids: Sequence[str]) -> dict[str, JSON]:
        out: dict[str, JSON] = {}
        with self._lock:
            for rid in run_ids:
                self._get(rid)
                for w in self._writes[rid]:
                    if w.kind == WriteKind.WRITES:
                        out.setdefault(w.node, w.value)
        return out

    def node_attempts(self, run_id: str) -> list[NodeAttempt]:
        with self._lock:
            self._get(run_id)
            return list(self._attempts[run_id])

    def journal(self, run_ids: Sequence[str]) -> list[JournalEntry]:
        with self._lock:
            for rid in run_ids:
                self._get(rid)
            return [e for rid in run_ids for e in self._journal[rid]]

    def interrupts(self, run_id: str | None = None,
                   status: InterruptStatus | None = None) -> list[Interrupt]:
        with self._lock:
            items = sorted(self._interrupts.values(), key=lambda i: (i.created_at, i.id))
        return [i for i in items if (run_id is None or i.run_id == run_id)
                and (status is None or i.status == status)]

    def interrupt(self, interrupt_id: str) -> Interrupt:
        with self._lock:
            found = self._interrupts.get(interrupt_id)
        if found is None:
            raise NotFound(f"no interrupt {interrupt_id!r}")
        return found

    def events(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[TraceEvent]:
        with self._lock:
            self._get(run_id)
            found = [e for e in self._events[run_id] if e.seq > after_seq]
        return found if limit is None else found[:limit]

    def checkpoint_summaries(self, run_id: str, first_seq: int, last_seq: int) -> list[CheckpointSummary]:
        with self._lock:
            self._get(run_id)
            return [CheckpointSummary(c.id, c.run_id, c.seq, c.nodes, c.source, c.created_at, c.event_seq)
                    for c in self._checkpoints[run_id] if first_seq <= c.seq <= last_seq]

    def close(self) -> None:
        pass


def _check_single_continuation(run: Run, existing: Iterable[Run]) -> None:
    """One continuation per run, one next turn per run of a conversation, and one first
    turn per named thread."""
    if run.parent_run_id is None and run.kind == RunKind.MAIN and run.thread_id != run.id:
        for other in existing:
            if other.thread_id == run.thread_id:
                raise InvalidRequest(f"thread {run.thread_id} already has run {other.id}; start the turn "
                                     f"again to follow the thread's latest run")
    if run.parent_run_id is None or run.kind not in (RunKind.CONTINUATION, RunKind.MAIN):
        return
    for other in existing:
        if other.parent_run_id != run.parent_run_id or other.kind != run.kind:
            continue
        if run.kind == RunKind.CONTINUATION:
            raise InvalidRequest(f"run {run.parent_run_id} was already continued by {other.id}; "
                                 f"resume that run instead")
        raise InvalidRequest(f"run {run.parent_run_id} of thread {run.thread_id} was already followed "
                             f"by turn {other.id}; start the turn again to follow the thread's latest run")
