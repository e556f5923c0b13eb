"""Compensation: undo a run's live, succeeded effects, newest first.

Each compensation is journaled like an effect, on the effect's own identity:
COMPENSATING is forced to disk before the undo function is called, then
COMPENSATED or COMPENSATION_FAILED. So a compensation never runs twice: after a
crash, ``compensate`` skips what is COMPENSATED and treats a COMPENSATING entry
with no outcome as in doubt (stops, unless told to retry it with the same key).
Mocked effects never touched the outside world and are never compensated.

Compensating takes the run's lease, so two callers cannot compensate one run at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.jsonvalues import to_json
from .effects import EffectInfo, call_effect_fn
from ..core.errors import InvalidRequest, LeaseLost
from ..graph.refs import resolve_callable
from ..core.records import (
    COMPENSATION_STATUSES,
    Batch,
    EffectStatus,
    JournalEntry,
    Run,
    RunKind,
    TraceEvent,
)
from ..core.states import RunStatus
from ..core.jsonvalues import JSON

if TYPE_CHECKING:
    from ..runtime import Runtime


_DONE = "compensated"


@dataclass(frozen=True, slots=True)
class CompensationStep:
    run_id: str          # the run whose effect it undoes
    node: str
    name: str
    occurrence: int
    key: str
    status: str          # compensated | failed | in_doubt | already | not_runnable
    error: str | None = None

    def to_json(self) -> dict[str, JSON]:
        return {"run_id": self.run_id, "node": self.node, "name": self.name, "occurrence": self.occurrence,
                "key": self.key, "status": self.status, "error": self.error}


@dataclass(frozen=True, slots=True)
class CompensationReport:
    run_id: str
    steps: list[CompensationStep] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every compensable effect is compensated (now or before)."""
        return all(s.status in (_DONE, "already") for s in self.steps)

    def to_json(self) -> dict[str, JSON]:
        return {"run_id": self.run_id, "complete": self.complete, "steps": [s.to_json() for s in self.steps]}


def compensable(entries: list[JournalEntry]) -> tuple[list[JournalEntry], dict[tuple[str, str, int], JournalEntry]]:
    """(succeeded live effects with an undo, oldest first; latest compensation entry per identity)."""
    done: dict[tuple[str, str, int], JournalEntry] = {}
    undo: dict[tuple[str, str, int], JournalEntry] = {}
    for e in entries:
        ident = (e.node, e.name, e.occurrence)
        if e.status == EffectStatus.SUCCEEDED and e.compensate:
            done[ident] = e
        elif e.status in COMPENSATION_STATUSES:
            undo[ident] = e
        elif e.status == EffectStatus.MOCKED:
            done.pop(ident, None)
    ordered = sorted(done.values(), key=lambda e: e.at)
    return ordered, undo


async def compensate(rt: Runtime, run_id: str, retry_in_doubt: bool = False) -> CompensationReport:
    run = rt.store.get_run(run_id)
    if run.status not in (RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.SUCCEEDED):
        raise InvalidRequest(f"run {run_id} is {run.status.value}; only an ended run is compensated "
                             f"(cancel it first)")
    continued = [c.id for c in rt.store.child_runs(run.id) if c.kind == RunKind.CONTINUATION]
    if continued:
        raise InvalidRequest(f"run {run_id} was continued by {continued[-1]}, which relies on its effects; "
                             f"compensate the last run of the chain")
    busy = f"run {run_id} is being compensated by another caller"
    # an unexpired lease of a live holder means someone is compensating it now
    if run.id in rt._compensating or (run.lease_owner is not None and not rt._lease_expired(run)):
        raise InvalidRequest(busy)
    rt._compensating.add(run.id)
    try:
        try:
            run = rt.store.acquire_lease(run.id, rt.owner, rt.clock.time() + rt.lease_ttl, run.fence)
        except LeaseLost:
            raise InvalidRequest(busy) from None
        # read after taking the lease: what an earlier caller recorded is all there
        effects, undo = compensable(rt.store.journal(list(reversed(rt._lineage(run)))))
        steps: list[CompensationStep] = []
        writer = _Recorder(rt, run)
        try:
            for e in reversed(effects):  # newest first: later effects may depend on earlier ones
                step = await _one(rt, writer, e, undo.get((e.node, e.name, e.occurrence)), retry_in_doubt)
                steps.append(step)
                if step.status not in (_DONE, "already"):
                    break  # keep the order: nothing older is undone while a newer one is not
        finally:
            writer.release()
    finally:
        rt._compensating.discard(run.id)
    return CompensationReport(run_id, steps)


async def _one(rt: Runtime, w: _Recorder, e: JournalEntry, last: JournalEntry | None,
               retry_in_doubt: bool) -> CompensationStep:
    def step(status: str, error: str | None = None) -> CompensationStep:
        return CompensationStep(e.run_id, e.node, e.name, e.occurrence, e.key, status, error)

    if last is not None and last.status == EffectStatus.COMPENSATED:
        return step("already")
    if last is not None and last.status == EffectStatus.COMPENSATING and not retry_in_doubt:
        return step("in_doubt", "its compensation started and its outcome was never recorded; "
                                "check it, then compensate again with retry_in_doubt=True")
    fn = rt._compensations.get(e.key)
    if fn is None and e.compensate and e.compensate != "<local>":
        try:
            fn = resolve_callable(e.compensate)
        except InvalidRequest as err:
            return step("not_runnable", str(err))
    if fn is None:
        return step("not_runnable", "its compensation was a lambda, closure, bound method or partial of a "
                                    "process that has ended; define compensations as module-level functions")
    w.record(e, EffectStatus.COMPENSATING)
    info = EffectInfo(key=e.key + ":undo", name=e.name, request=e.request, deadline=None,
                      attempt=e.attempt, result=e.result)
    try:
        result = await call_effect_fn(fn, info, None)
    except Exception as err:
        message = f"{type(err).__name__}: {err}"
        w.record(e, EffectStatus.COMPENSATION_FAILED, error=message)
        return step("failed", message)
    w.record(e, EffectStatus.COMPENSATED, result=to_json(result, "compensation result"))
    return step(_DONE)


class _Recorder:
    """Journal entries and trace events on the compensated run, each forced to disk."""

    def __init__(self, rt: Runtime, run: Run):
        self.rt, self.run = rt, run

    def record(self, e: JournalEntry, status: EffectStatus, *, result: JSON = None,
               error: str | None = None) -> None:
        now = self.rt.clock.time()
        entry = JournalEntry(run_id=e.run_id, node=e.node, name=e.name, occurrence=e.occurrence,
                             attempt=e.attempt, key=e.key, status=status, request=e.request,
                             result=result, error=error, at=now, compensate=e.compensate)
        seq = self.run.event_seq + 1
        data = {"name": e.name, "occurrence": e.occurrence, "key": e.key, "effect_run_id": e.run_id}
        if error:
            data["error"] = error
        self.run = self.run.evolve(event_seq=seq, updated_at=now)
        event = TraceEvent(self.run.id, seq, now, f"effect.{status.value}", e.node, e.attempt, data)
        batch = Batch(run_id=self.run.id, fence=self.run.fence, run=self.run, effects=[entry],
                      events=[event], durable=True)
        self.rt.store.commit(batch)

    def release(self) -> None:
        self.run = self.run.evolve(lease_owner=None, lease_expires_at=None)
        self.rt.store.commit(Batch(run_id=self.run.id, fence=self.run.fence, run=self.run, durable=True))
