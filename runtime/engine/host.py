"""What a running run offers its nodes' contexts and the effect journal protocol.

Holds the run's view of the journal (its own lineage's entries, the source
lineage's served records for a mocked branch) and of its interrupts, and records
what the protocol decides through the run's ``Recorder``. Called on the run's
event-loop thread, except ``add_usage``/``count_usage`` (sync nodes and effects
report usage from worker threads).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, NoReturn

from pydantic import BaseModel

from ..core.errors import ErrorClass, HarnessError, LimitExceeded, NodeInterrupt, StoreUnreachable
from ..core.jsonvalues import JSON
from ..core.records import (
    COMPENSATION_STATUSES,
    LOCAL_UNDO,
    SERVED_STATUSES,
    EffectStatus,
    EventType,
    Interrupt,
    InterruptKind,
    InterruptStatus,
    JournalEntry,
)
from ..core.streams import CUSTOM, StreamEvent
from ..history.registry import GraphRegistry
from .decisions import budget_exceeded
from .recorder import Recorder
from .scope import AttemptScope

log = logging.getLogger(__name__)
#: decimals a run's cost is kept to: far below any currency's unit, above floating-point noise
COST_DIGITS = 12


class CompensationRegistry:
    """Compensation functions of effects run here, by effect key (lambdas and closures
    can only be compensated by the process that ran them), and the runs being
    compensated by this process right now."""

    def __init__(self) -> None:
        self.functions: dict[str, Callable[..., Any]] = {}
        self.busy: set[str] = set()


class RunHost:
    def __init__(self, rec: Recorder, graphs: GraphRegistry, compensations: CompensationRegistry, *,
                 key_scope: str, journal: Sequence[JournalEntry], interrupts: Sequence[Interrupt],
                 source_journal: Sequence[JournalEntry]):
        self.rec = rec
        self.graphs = graphs
        self.compensations = compensations
        run = rec.run
        self.key_scope = key_scope
        self.thread_id = run.thread_id
        self.effects_mode = run.effects_mode
        # a replay compares: it serves an identity's record even when the request changed
        self.serve_changed = bool(run.options.get("compare"))
        self._mocks: Mapping[str, JSON] = run.options.get("mocks") or {}
        self._journal: dict[tuple[str, str, int], JournalEntry] = {}
        self.running_effects: dict[tuple[str, str, int], asyncio.Future[Any]] = {}
        for e in journal:  # lineage order is oldest run first, so our own entries win
            if e.status not in COMPENSATION_STATUSES:
                self._journal[(e.node, e.name, e.occurrence)] = e
        #: mocked runs: the source lineage's served records per identity, nearest run first
        self._source: dict[tuple[str, str, int], list[JournalEntry]] = {}
        latest: dict[tuple[str, str, str, int], JournalEntry] = {}
        last: dict[tuple[str, str, str, int], JournalEntry] = {}
        for e in source_journal:  # nearest run first, each run's entries in the order recorded
            if e.status in SERVED_STATUSES:
                latest[(e.run_id, e.node, e.name, e.occurrence)] = e
            if e.status not in COMPENSATION_STATUSES:
                last[(e.run_id, e.node, e.name, e.occurrence)] = e
        for (_, node, name, occ), e in latest.items():
            self._source.setdefault((node, name, occ), []).append(e)
        #: identities the source lineage called with no result to serve (nearest run first):
        #: started with no recorded outcome, or failed. A person asked about such an effect
        #: must know it may have happened, or that it was called and failed
        self._source_unserved: dict[tuple[str, str, int], JournalEntry] = {}
        for (_, node, name, occ), e in last.items():
            if e.status in (EffectStatus.STARTED, EffectStatus.FAILED):
                self._source_unserved.setdefault((node, name, occ), e)
        self.interrupts: dict[tuple[str, str, str], Interrupt] = {}
        for i in interrupts:
            if i.run_id == run.id or i.status == InterruptStatus.ANSWERED:
                self.interrupts[(i.node, i.slot, i.kind)] = i
        #: why the run's token/cost budget is exhausted, once it is (the first reason given),
        #: and the node instance whose usage exhausted it
        self.over_budget: str | None = budget_exceeded(run.limits, rec.usage)
        self.over_budget_by: str | None = None
        #: wakes the run loop, so a recorded event does not wait for the next heartbeat
        self.wake: Callable[[], None] = lambda: None
        #: the run is stopping because it was cancelled (set by the run loop)
        self.cancel_requested = False

    @property
    def run_id(self) -> str:
        return self.rec.run.id

    def now(self) -> float:
        return self.rec.env.now()

    def recording(self) -> bool:
        return not self.rec.closed

    def cancelling(self) -> bool:
        return self.cancel_requested

    # ------------------------------------------------------------------ the journal

    def journal_latest(self, node: str, name: str, occurrence: int) -> JournalEntry | None:
        return self._journal.get((node, name, occurrence))

    def keep_running(self, ident: tuple[str, str, int], thread: asyncio.Future[Any]) -> None:
        """A sync effect's thread, known until it ends: an attempt stopped while it ran may
        leave it running, and the retry then waits for its outcome (``perform_effect``)."""
        self.running_effects[ident] = thread
        thread.add_done_callback(lambda _: self.running_effects.pop(ident, None)
                                 if self.running_effects.get(ident) is thread else None)

    def source_entry(self, node: str, name: str, occurrence: int, request: JSON) -> JournalEntry | None:
        found = self._source.get((node, name, occurrence))
        if not found:
            return None
        return next((e for e in found if e.request == request), found[0])

    def source_unserved(self, node: str, name: str, occurrence: int) -> JournalEntry | None:
        return self._source_unserved.get((node, name, occurrence))

    def mock_result(self, name: str) -> tuple[bool, JSON]:
        return (name in self._mocks, self._mocks.get(name))

    def compensation_ref(self, key: str, fn: Callable[..., Any] | None) -> str | None:
        if fn is None:
            return None
        self.compensations.functions[key] = fn  # this process can always run it
        qualname = getattr(fn, "__qualname__", "")
        module = getattr(fn, "__module__", None)
        # a lambda, closure, bound method or partial: another process cannot import it as is
        if not inspect.isfunction(fn) or not module or "<" in qualname:
            return LOCAL_UNDO
        return f"{module}:{qualname}"

    def record_effect(self, entry: JournalEntry, durable: bool) -> None:
        if self.rec.closed:
            # the run ended while a sync node's thread went on: the outcome goes into the
            # journal alone (nothing follows the run's end in its trace)
            self.rec.late_effect(entry)
            return
        self._journal[(entry.node, entry.name, entry.occurrence)] = entry
        self.rec.batch.effects.append(entry)
        extra = {"source": entry.source} if entry.source else {}
        self.rec.emit(EventType.of_effect(entry.status), entry.node, entry.attempt, name=entry.name,
                      occurrence=entry.occurrence, key=entry.key, **extra)
        if entry.status == EffectStatus.MOCKED:
            return  # nothing outside was touched: it may share the next group commit
        # STARTED is forced to disk before the call; outcomes are committed at once
        # (a process crash keeps them) so that recovery never repeats the effect.
        try:
            self.rec.flush_checked(durable=durable)
        except Exception as e:
            if entry.status != EffectStatus.STARTED:
                raise
            self._not_called(entry, e)
            if isinstance(e, HarnessError) or not self.rec.store.unreachable(e):
                raise
            # the store away for a moment (a restart, a blip): transient, so that the node's
            # retry policy tries the effect again once the store may be back
            raise StoreUnreachable(f"effect {entry.name!r} was not called: its start could not be recorded "
                                   f"({type(e).__name__}: {e})") from e

    def _not_called(self, started: JournalEntry, error: Exception) -> None:
        """A STARTED entry the store would not take: the effect is not called. The entry
        stays in the batch (the store may even hold it already, a commit reported refused
        that went in), so its outcome is journaled beside it: whatever commits the batch
        next (the node's failure) records the call as not made, and a resume makes it
        rather than ask a person whether it happened."""
        failed = replace(started, status=EffectStatus.FAILED, at=self.now(), result=None,
                         error=f"not called: its start could not be recorded ({type(error).__name__}: {error})")
        self._journal[(failed.node, failed.name, failed.occurrence)] = failed
        self.rec.batch.effects.append(failed)
        self.rec.emit(EventType.of_effect(failed.status), failed.node, failed.attempt, name=failed.name,
                      occurrence=failed.occurrence, key=failed.key)

    # ------------------------------------------------------------------ interrupts

    def find_interrupt(self, node: str, slot: str, kind: InterruptKind,
                       accepts: Callable[[JSON], bool] | None = None) -> Interrupt | None:
        found = self.interrupts.get((node, slot, kind.value))
        if found is not None and kind != InterruptKind.USER and found.run_id != self.run_id:
            return None  # a continuation asks again: whoever continues the run decides afresh
        if (found is not None and accepts is not None and found.status == InterruptStatus.ANSWERED
                and not accepts(found.answer)):
            # answered for code whose response model took it; this code's does not (a replay of
            # new code, a continuation after a deploy): the question is asked again
            return None
        if found is not None and found.run_id != self.run_id and found.status == InterruptStatus.ANSWERED:
            # an answer recorded by an earlier run (a continued run, or the run a replay re-executes)
            self.rec.emit(EventType.INTERRUPT_REUSED, node, interrupt_id=found.id,
                          source_run_id=found.run_id, slot=slot)
        return found

    def raise_interrupt(self, scope: AttemptScope, kind: InterruptKind, payload: JSON, *, slot: str,
                        response_schema: JSON = None, response_ref: str | None = None) -> NoReturn:
        key = (scope.node, slot, kind.value)
        existing = self.interrupts.get(key)
        if existing is None or existing.run_id != self.run_id or existing.status != InterruptStatus.PENDING:
            existing = Interrupt(
                id=self.rec.env.ids.new("int"), run_id=self.run_id, node=scope.node, slot=slot, kind=kind,
                payload={"value": payload, "response_ref": response_ref}, status=InterruptStatus.PENDING,
                created_at=self.now(), response_schema=response_schema,
            )
            self.interrupts[key] = existing
            self.rec.batch.interrupts.append(existing)
            self.rec.emit(EventType.INTERRUPT_CREATED, scope.node, scope.attempt, interrupt_id=existing.id,
                          kind=kind.value, slot=slot)
            if kind == InterruptKind.IN_DOUBT:
                log.warning("run %s node %s: effect %s is in doubt (started, outcome unknown); "
                            "waiting for a person (interrupt %s)", self.run_id, scope.node,
                            (payload or {}).get("effect"), existing.id)
        scope.interrupt_id = existing.id
        raise NodeInterrupt(existing.id)

    def answer(self, interrupt_id: str, value: JSON, by: str | None = None) -> Interrupt:
        """Record a validated answer (and who gave it, when known); returns the answered interrupt."""
        key = next(k for k, i in self.interrupts.items() if i.id == interrupt_id)
        done = replace(self.interrupts[key], status=InterruptStatus.ANSWERED, answer=value,
                       answered_at=self.now())
        self.interrupts[key] = done
        self.rec.batch.interrupts.append(done)
        data: dict[str, JSON] = {"interrupt_id": interrupt_id}
        if by:
            data["by"] = by
        self.rec.emit(EventType.INTERRUPT_ANSWERED, done.node, None, **data)
        return done

    def answered(self, interrupt_id: str | None) -> bool:
        return any(i.id == interrupt_id and i.status == InterruptStatus.ANSWERED for i in self.interrupts.values())

    def close_pending(self) -> None:
        """An ending run leaves no question open."""
        for key, intr in list(self.interrupts.items()):
            if intr.run_id == self.run_id and intr.status == InterruptStatus.PENDING:
                closed = replace(intr, status=InterruptStatus.CANCELLED)
                self.interrupts[key] = closed
                self.rec.batch.interrupts.append(closed)

    # ------------------------------------------------------------------ custom events

    def emit(self, scope: AttemptScope, payload: JSON, ephemeral: bool) -> None:
        """A node's custom event: recorded in the trace (and streamed once committed),
        or, ``ephemeral``, only delivered to whoever streams the run right now."""
        if scope.abandoned:
            return
        if ephemeral:
            self.rec.publish_now(StreamEvent(self.run_id, self.rec.seq, CUSTOM, scope.node, scope.attempt,
                                             {"payload": payload}, self.now(), ephemeral=True))
            return
        self.rec.emit(EventType.CUSTOM, scope.node, scope.attempt, payload=payload)
        self.wake()  # group commit: it is committed (and streamed) within the window

    # ------------------------------------------------------------------ usage and models

    def add_usage(self, scope: AttemptScope, tokens: int, cost: float) -> None:
        """``ctx.usage``: node-level usage, counted on every execution of the node."""
        over = self.count_usage(scope, tokens, cost)
        if over:
            raise LimitExceeded(over)

    def count_usage(self, scope: AttemptScope, tokens: int, cost: float) -> str | None:
        """Add usage to the attempt and the run (from any thread: sync nodes and effects
        report from worker threads); why the budget is now exhausted, or None."""
        usage = self.rec.usage
        with self.rec.usage_lock:
            scope.tokens += tokens
            # rounded to 12 decimals: ten costs of 0.01 add up to 0.1, not 0.09999999999999999
            scope.cost = round(scope.cost + cost, COST_DIGITS)
            usage["tokens"] += tokens
            usage["cost"] = round(usage["cost"] + cost, COST_DIGITS)
            over = budget_exceeded(self.rec.run.limits, usage)
            if over and self.over_budget is None:
                # the run ends even if node code catches the error
                self.over_budget, self.over_budget_by = over, scope.node
            late = self.rec.closed
        if late:   # a thread that outlived the run: no commit of the run will carry it
            self.rec.late_usage()
        return over

    def budget_error(self) -> dict[str, JSON] | None:
        """The run's error once its budget is exhausted. The same whoever notices first: the
        loop between steps, or the failure of the node whose usage exhausted it (which
        of the two comes first depends on timing)."""
        if self.over_budget is None:
            return None
        error: dict[str, JSON] = {"class": ErrorClass.LIMIT_EXCEEDED.value, "message": self.over_budget}
        if self.over_budget_by is not None:
            error["node"] = self.over_budget_by
        return error

    def remember_model(self, ref: str, model: type[BaseModel]) -> None:
        self.graphs.remember_model(ref, model)
