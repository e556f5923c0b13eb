"""Compensation: undo a run's live, succeeded effects, newest first.

Each compensation is journaled like an effect, on the effect's own identity:
COMPENSATING is forced to disk before the undo function is called, then
COMPENSATED or COMPENSATION_FAILED. So a compensation never runs twice: after a
crash, ``compensate`` skips what is COMPENSATED and treats a COMPENSATING entry
with no outcome as in doubt (stops, unless told to retry it with the same key).
Mocked effects never touched the outside world and are never compensated.

Compensating takes the run's lease, so two callers cannot compensate one run at once.

A cancelled caller (its task cancelled, a timeout) still records an undo that finished,
then the cancel goes on. An async undo is interrupted by the cancel: unless it returned,
it stays in doubt. A sync undo's thread cannot be stopped: the lease is kept until the
thread ends and its outcome is recorded then, unless the lease was taken over meanwhile
(it had expired) or the event loop closed first; it then stays in doubt.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..core.errors import InvalidRequest, LeaseLost, NodeError
from ..core.jsonvalues import JSON, to_json
from ..core.records import (
    COMPENSATION_STATUSES,
    LOCAL_UNDO,
    Batch,
    CompensationAsk,
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
from ..store.base import CheckpointStore
from .deps import EngineDeps
from .effects import EffectInfo, call_effect_fn
from .leases import lease_expired

log = logging.getLogger(__name__)


class CompensationBusy(InvalidRequest):
    """Another caller is compensating the run right now."""


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
    #: left to a worker (``compensate(queue=True)``): nothing was undone here, so no steps yet;
    #: the journal records each undo as the worker makes it
    queued: bool = False

    @property
    def complete(self) -> bool:
        """Every compensable effect is compensated (now or before)."""
        return not self.queued and not self.not_done

    @property
    def not_done(self) -> list[CompensationStep]:
        """The steps whose effect is not undone (failed, in doubt, or not runnable here)."""
        return [s for s in self.steps if s.status not in _DONE]

    def to_json(self) -> dict[str, JSON]:
        return {"run_id": self.run_id, "complete": self.complete, "queued": self.queued,
                "steps": [s.to_json() for s in self.steps]}


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


def undoable_here(store: CheckpointStore, run: Run) -> list[JournalEntry]:
    """The journal of the run's line, oldest first, but for runs whose effects happened in the
    store they were imported from (a continuation made here undoes its own, not theirs)."""
    line = list(reversed(continued_chain(store, run)))
    elsewhere = {r for r in line if (store.get_run(r) if r != run.id else run).effects_elsewhere}
    return [e for e in store.journal(line) if e.run_id not in elsewhere]


def left_to_undo(store: CheckpointStore, run: Run) -> list[JournalEntry]:
    """The run's live effects with an undo that is not recorded as done, oldest first."""
    effects, undo = compensable(undoable_here(store, run))
    return [e for e in effects if (u := undo.get((e.node, e.name, e.occurrence))) is None
            or u.status != EffectStatus.COMPENSATED]


def compensable_run(store: CheckpointStore, run_id: str) -> Run:
    """The run, if it may be compensated at all; else why not (``InvalidRequest``)."""
    run = store.get_run(run_id)
    if run.status not in (RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.SUCCEEDED):
        raise InvalidRequest(f"run {run_id} is {run.status.value}; only an ended run is compensated "
                             f"(cancel it first)")
    if run.effects_elsewhere:
        raise InvalidRequest(f"run {run_id} was imported with its effects mocked: they happened in the store it "
                             f"was exported from; compensate it there (or import it with effects 'live')")
    continued = [c.id for c in continuations(store, run.id)]
    if continued:
        raise InvalidRequest(f"run {run_id} was continued by {continued[-1]}, which relies on its effects; "
                             f"compensate the last run of the chain")
    return run


def ask_worker(deps: EngineDeps, run_id: str, retry_in_doubt: bool = False) -> CompensationReport:
    """Leave the run's compensation to a worker (``harness worker``), which can import its undo
    functions; refused, with nothing asked, when the run may not be compensated, or when an
    undo left to make is one no worker can import. Nothing to undo asks nothing: the report is
    complete at once."""
    run = compensable_run(deps.store, run_id)
    left = left_to_undo(deps.store, run)
    if not left:
        return CompensationReport(run_id)
    local, here = local_undos(deps, left)
    if local:   # the ask would wait for ever
        e = local[-1]
        raise InvalidRequest(
            f"run {run_id}: the undo of effect {e.name!r} of node {e.node!r} is a lambda, closure, bound "
            f"method or partial, which no worker can import; " +
            ("compensate it here, without queue" if here else
             "only the process that ran it holds it: compensate it there, without queue (or undo it by "
             "hand if that process has ended)") +
            "; define compensations as module-level functions")
    deps.store.ask_compensation(run_id, retry_in_doubt, deps.env.now())
    return CompensationReport(run_id, queued=True)


def local_undos(deps: EngineDeps, left: list[JournalEntry]) -> tuple[list[JournalEntry], bool]:
    """(the effects of ``left`` whose undo no other process can import, whether this one holds
    every one of them)."""
    local = [e for e in left if e.compensate == LOCAL_UNDO]
    return local, all(e.key in deps.compensations.functions for e in local)


async def compensate(deps: EngineDeps, run_id: str, retry_in_doubt: bool = False) -> CompensationReport:
    report = await _compensate(deps, run_id, retry_in_doubt)
    assert report is not None   # only an ask is ever found made already
    return report


async def make_asked(deps: EngineDeps, ask: CompensationAsk) -> CompensationReport | None:
    """A compensation a process left to workers, made only if this very ask is still there
    once the run's lease is held (None otherwise: another worker made it, or it was asked
    again since, and that newer ask is found at the next look), and forgotten before the
    lease is let go, unless an undo cannot be imported here (left for a worker that can)."""
    return await _compensate(deps, ask.run_id, ask.retry_in_doubt, ask)


async def _compensate(deps: EngineDeps, run_id: str, retry_in_doubt: bool,
                      ask: CompensationAsk | None = None) -> CompensationReport | None:
    """Undo the run's effects under its lease (renewed while an undo runs)."""
    store, env, busy_runs = deps.store, deps.env, deps.compensations.busy
    run = compensable_run(store, run_id)
    busy = f"run {run_id} is being compensated by another caller"
    # an unexpired lease of a live holder means someone is compensating it now
    driven = deps.slots.driving(run.id) is not None
    if run.id in busy_runs or (run.lease_owner is not None and not lease_expired(run, env, driven_here=driven)):
        raise CompensationBusy(busy)
    busy_runs.add(run.id)
    writer: _Recorder | None = None
    try:
        try:
            run = store.acquire_lease(run.id, env.owner, env.now() + env.lease_ttl, run.fence)
        except LeaseLost:
            raise CompensationBusy(busy) from None
        writer = _Recorder(deps, run, on_release=lambda: busy_runs.discard(run.id))
        if ask is not None and ask not in store.compensation_asks(run_id):
            return None   # made by another worker while this one waited (or asked anew since)
        # read after taking the lease: what an earlier caller recorded is all there
        effects, undo = compensable(undoable_here(store, run))
        steps: list[CompensationStep] = []
        for e in reversed(effects):  # newest first: later effects may depend on earlier ones
            step = await _one(deps, writer, e, undo.get((e.node, e.name, e.occurrence)), retry_in_doubt)
            steps.append(step)
            if step.status not in _DONE:
                break  # keep the order: nothing older is undone while a newer one is not
        if ask is not None and not any(s.status == StepStatus.NOT_RUNNABLE for s in steps):
            store.drop_compensation_ask(run_id, ask.at)   # under the lease: no other worker makes it again
    finally:
        if writer is None:
            busy_runs.discard(run.id)
        else:
            writer.release()  # deferred while an undo's thread outlives a cancel
    return CompensationReport(run_id, steps)


def _step(e: JournalEntry, status: StepStatus, error: str | None = None) -> CompensationStep:
    return CompensationStep(e.run_id, e.node, e.name, e.occurrence, e.key, status, error)


async def _one(deps: EngineDeps, w: _Recorder, e: JournalEntry, last: JournalEntry | None,
               retry_in_doubt: bool) -> CompensationStep:
    if last is not None and last.status == EffectStatus.COMPENSATED:
        return _step(e, StepStatus.ALREADY)
    if last is not None and last.status == EffectStatus.COMPENSATING and not retry_in_doubt:
        return _step(e, StepStatus.IN_DOUBT, "its compensation started and its outcome was never recorded; "
                     "check it, then compensate again with retry_in_doubt=True")
    fn = deps.compensations.functions.get(e.key)
    if fn is None and e.compensate and e.compensate != LOCAL_UNDO:
        try:
            fn = resolve_callable(e.compensate)
        except InvalidRequest as err:
            return _step(e, StepStatus.NOT_RUNNABLE, str(err))
    if fn is None:
        return _step(e, StepStatus.NOT_RUNNABLE, "its compensation was a lambda, closure, bound method or partial "
                     "of a process that has ended; define compensations as module-level functions")
    w.record(e, EffectStatus.COMPENSATING)
    info = EffectInfo(key=e.key + ":undo", name=e.name, request=e.request, deadline=None,
                      attempt=e.attempt, result=e.result)
    if inspect.iscoroutinefunction(fn):
        # awaited here, so a cancel interrupts it; nothing runs between its return and the record
        try:
            result = await call_effect_fn(fn, info, None)
        except Exception as err:
            return _failed(w, e, err)
        return _compensated(w, e, result)
    # a thread: its result must not be lost when the caller is cancelled as it finishes
    undo = asyncio.ensure_future(call_effect_fn(fn, info, None))
    try:
        await asyncio.wait({undo})
    except asyncio.CancelledError:
        if undo.done():
            w.settle(e, undo)  # it finished: record that, then let the cancel go on
        else:
            w.outlive(e, undo)
        raise
    return _settled(w, e, undo)


def _settled(w: _Recorder, e: JournalEntry, undo: asyncio.Future[Any]) -> CompensationStep:
    """Record how a finished undo ended (a cancelled one raises: it stays in doubt)."""
    try:
        result = undo.result()
    except Exception as err:
        return _failed(w, e, err)
    return _compensated(w, e, result)


def _failed(w: _Recorder, e: JournalEntry, err: Exception) -> CompensationStep:
    message = f"{type(err).__name__}: {err}"
    w.record(e, EffectStatus.COMPENSATION_FAILED, error=message)
    return _step(e, StepStatus.FAILED, message)


def _compensated(w: _Recorder, e: JournalEntry, result: Any) -> CompensationStep:
    try:
        stored = to_json(result, "its result")
    except NodeError as err:
        # the undo ran: recorded as made (nothing reads an undo's result back), never left
        # in doubt, where asking again would undo the effect a second time
        w.record(e, EffectStatus.COMPENSATED)
        return _step(e, StepStatus.COMPENSATED, f"{err}; it was not recorded")
    w.record(e, EffectStatus.COMPENSATED, result=stored)
    return _step(e, StepStatus.COMPENSATED)


class _Recorder:
    """Journal entries and trace events on the compensated run, each forced to disk."""

    def __init__(self, deps: EngineDeps, run: Run, on_release: Callable[[], None]):
        self.store, self.env, self.run = deps.store, deps.env, run
        self.on_release = on_release
        #: an undo's thread that went on after the caller was cancelled
        self.outliving: asyncio.Future[Any] | None = None
        # an undo may outlast the lease: renewed, no other caller takes the run and undoes it again
        self.renewing = asyncio.get_running_loop().create_task(self._keep_lease())

    async def _keep_lease(self) -> None:
        while True:
            await asyncio.sleep(self.env.heartbeat)
            now = self.env.now()
            if (self.run.lease_expires_at or 0) - now < self.env.lease_ttl / 2:
                try:
                    self.run = self.run.evolve(lease_expires_at=now + self.env.lease_ttl, updated_at=now)
                    self.store.commit(Batch(run_id=self.run.id, fence=self.run.fence, run=self.run))
                except Exception:   # taken over, or the store away: what is recorded next says so
                    log.warning("run %s: its compensation lease was not renewed", self.run.id, exc_info=True)
                    return

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

    def settle(self, e: JournalEntry, undo: asyncio.Future[Any]) -> None:
        """``_settled`` for an undo that ended after its caller was cancelled: what cannot be
        recorded (no JSON form, the lease taken over, the undo itself cancelled) stays in doubt."""
        try:
            _settled(self, e, undo)
        except LeaseLost:
            log.info("run %s: compensation of %s ended after another process took the run over; "
                     "left in doubt", self.run.id, e.name)
        except (Exception, asyncio.CancelledError):
            log.warning("run %s: the outcome of compensating %s was not recorded; left in doubt",
                        self.run.id, e.name, exc_info=True)

    def outlive(self, e: JournalEntry, undo: asyncio.Future[Any]) -> None:
        """Record the undo's outcome when its thread ends, keeping the lease until then so
        that no other caller starts that undo again meanwhile."""
        self.outliving = undo

        def ended(_: asyncio.Future[Any]) -> None:
            self.outliving = None
            self.settle(e, undo)
            try:
                self.release()
            except LeaseLost:
                pass  # taken over: the lease is the new holder's
            except Exception:
                log.warning("run %s: its compensation lease was not released", self.run.id, exc_info=True)

        undo.add_done_callback(ended)

    def release(self) -> None:
        if self.outliving is not None:
            return  # ``outlive`` releases once the undo ends
        self.renewing.cancel()
        try:
            self.run = self.run.evolve(lease_owner=None, lease_expires_at=None)
            self.store.commit(Batch(run_id=self.run.id, fence=self.run.fence, run=self.run, durable=True))
        finally:
            self.on_release()
