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
from enum import StrEnum

from ..core.errors import InvalidRequest, LeaseLost
from ..core.jsonvalues import JSON, to_json
from ..core.records import (
    COMPENSATION_STATUSES,
    Batch,
    EffectStatus,
    EventType,
    JournalEntry,
    Run,
    TraceEvent,
)
from ..core.states import RunStatus
from ..core.streams import publish
from ..graph.locate import resolve_callable
from ..history.lineage import continuations, continued_chain
from .deps import EngineDeps
from .effects import EffectInfo, call_effect_fn
from .leases import lease_expired


class StepStatus(StrEnum):
    """What compensating one effect came to."""

    COMPENSATED = "compensated"     # undone now
    ALREADY = "already"             # undone before
    FAILED = "failed"               # the undo function raised; recorded, may be tried again
    IN_DOUBT = "in_doubt"           # an undo started and its outcome was never recorded
    NOT_RUNNABLE = "not_runnable"   # the undo function cannot be found in this process


#: steps after which older effects may be undone too
_DONE = frozenset({StepStatus.COMPENSATED, StepStatus.ALREADY})


@dataclass(frozen=True, slots=True)
class CompensationStep:
    run_id: str          # the run whose effect it undoes
    node: str
    name: str
    occurrence: int
    key: str
    status: StepStatus
    error: str | None = None

    def to_json(self) -> dict[str, JSON]:
        return {"run_id": self.run_id, "node": self.node, "name": self.name, "occurrence": self.occurrence,
                "key": self.key, "status": self.status.value, "error": self.error}


@dataclass(frozen=True, slots=True)
class CompensationReport:
    run_id: str
    steps: list[CompensationStep] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every compensable effect is compensated (now or before)."""
        return all(s.status in _DONE for s in self.steps)

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


async def compensate(deps: EngineDeps, run_id: str, retry_in_doubt: bool = False) -> CompensationReport:
    store, env, busy_runs = deps.store, deps.env, deps.compensations.busy
    run = store.get_run(run_id)
    if run.status not in (RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.SUCCEEDED):
        raise InvalidRequest(f"run {run_id} is {run.status.value}; only an ended run is compensated "
                             f"(cancel it first)")
    continued = [c.id for c in continuations(store, run.id)]
    if continued:
        raise InvalidRequest(f"run {run_id} was continued by {continued[-1]}, which relies on its effects; "
                             f"compensate the last run of the chain")
    busy = f"run {run_id} is being compensated by another caller"
    # an unexpired lease of a live holder means someone is compensating it now
    driven = deps.slots.driving(run.id) is not None
    if run.id in busy_runs or (run.lease_owner is not None and not lease_expired(run, env, driven_here=driven)):
        raise InvalidRequest(busy)
    busy_runs.add(run.id)
    try:
        try:
            run = store.acquire_lease(run.id, env.owner, env.now() + env.lease_ttl, run.fence)
        except LeaseLost:
            raise InvalidRequest(busy) from None
        # read after taking the lease: what an earlier caller recorded is all there
        effects, undo = compensable(store.journal(list(reversed(continued_chain(store, run)))))
        steps: list[CompensationStep] = []
        writer = _Recorder(deps, run)
        try:
            for e in reversed(effects):  # newest first: later effects may depend on earlier ones
                step = await _one(deps, writer, e, undo.get((e.node, e.name, e.occurrence)), retry_in_doubt)
                steps.append(step)
                if step.status not in _DONE:
                    break  # keep the order: nothing older is undone while a newer one is not
        finally:
            writer.release()
    finally:
        busy_runs.discard(run.id)
    return CompensationReport(run_id, steps)


async def _one(deps: EngineDeps, w: _Recorder, e: JournalEntry, last: JournalEntry | None,
               retry_in_doubt: bool) -> CompensationStep:
    def step(status: StepStatus, error: str | None = None) -> CompensationStep:
        return CompensationStep(e.run_id, e.node, e.name, e.occurrence, e.key, status, error)

    if last is not None and last.status == EffectStatus.COMPENSATED:
        return step(StepStatus.ALREADY)
    if last is not None and last.status == EffectStatus.COMPENSATING and not retry_in_doubt:
        return step(StepStatus.IN_DOUBT, "its compensation started and its outcome was never recorded; "
                                "check it, then compensate again with retry_in_doubt=True")
    fn = deps.compensations.functions.get(e.key)
    if fn is None and e.compensate and e.compensate != "<local>":
        try:
            fn = resolve_callable(e.compensate)
        except InvalidRequest as err:
            return step(StepStatus.NOT_RUNNABLE, str(err))
    if fn is None:
        return step(StepStatus.NOT_RUNNABLE, "its compensation was a lambda, closure, bound method or partial of a "
                                    "process that has ended; define compensations as module-level functions")
    w.record(e, EffectStatus.COMPENSATING)
    info = EffectInfo(key=e.key + ":undo", name=e.name, request=e.request, deadline=None,
                      attempt=e.attempt, result=e.result)
    try:
        result = await call_effect_fn(fn, info, None)
    except Exception as err:
        message = f"{type(err).__name__}: {err}"
        w.record(e, EffectStatus.COMPENSATION_FAILED, error=message)
        return step(StepStatus.FAILED, message)
    w.record(e, EffectStatus.COMPENSATED, result=to_json(result, "compensation result"))
    return step(StepStatus.COMPENSATED)


class _Recorder:
    """Journal entries and trace events on the compensated run, each forced to disk."""

    def __init__(self, deps: EngineDeps, run: Run):
        self.store, self.env, self.run = deps.store, deps.env, run

    def record(self, e: JournalEntry, status: EffectStatus, *, result: JSON = None,
               error: str | None = None) -> None:
        now = self.env.now()
        entry = JournalEntry(run_id=e.run_id, node=e.node, name=e.name, occurrence=e.occurrence,
                             attempt=e.attempt, key=e.key, status=status, request=e.request,
                             result=result, error=error, at=now, compensate=e.compensate)
        seq = self.run.event_seq + 1
        data = {"name": e.name, "occurrence": e.occurrence, "key": e.key, "effect_run_id": e.run_id}
        if error:
            data["error"] = error
        self.run = self.run.evolve(event_seq=seq, updated_at=now)
        event = TraceEvent(self.run.id, seq, now, EventType.of_effect(status), e.node, e.attempt, data)
        batch = Batch(run_id=self.run.id, fence=self.run.fence, run=self.run, effects=[entry],
                      events=[event], durable=True)
        self.store.commit(batch)
        publish(self.run.id, [event])

    def release(self) -> None:
        self.run = self.run.evolve(lease_owner=None, lease_expires_at=None)
        self.store.commit(Batch(run_id=self.run.id, fence=self.run.fence, run=self.run, durable=True))
