"""Drives one run in this process: the ready queue, attempts, outcomes, the end.

The loop admits ready nodes through the pure scheduler within its concurrency
room, collects finished attempts in canonical order (so recording never depends
on completion timing), decides retries (``decisions``), and ends the run when
nothing is in flight. State folding lives in ``folding``, recording and commits
in ``recorder``, what nodes and effects call in ``host``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from pydantic import ValidationError

from ..core.errors import ConditionFailed, EndNotRecorded, ErrorClass, InvalidWrites, LeaseLost, NodeError
from ..core.jsonvalues import JSON
from ..core.records import Checkpoint, Interrupt, JournalEntry, Run
from ..core.states import (
    NodeEvent,
    NodeStatus,
    RunStatus,
    StopKind,
    supersedes,
)
from ..graph import ExecutableGraph
from ..graph.instances import parse_instance
from . import decisions, scheduler
from .context import NodeContext
from .effects import CANCEL_GRACE
from .deps import EngineDeps
from .ending import commit_end
from .executor import InFlight, OutcomeKind
from .folding import StateFold, view_of
from .growth import Growth
from .outcomes import Outcomes
from .host import RunHost
from .instances import Instances
from .recorder import Recorder
from .scope import AttemptScope
from .stopping import Stop, StopError, finish_run, stop
from .takeover import TakeOver
from .waiting import Waiter

log = logging.getLogger(__name__)
N = NodeStatus

#: the longest a run holds the event loop between turns it gives to other tasks (seconds)
HOLD_LOOP = 0.002

#: why a run ends whose caller stopped awaiting it (a stream's reader left, a timeout)
STOPPED_WAITING = "the caller stopped waiting for the run"


class RunLoop(Outcomes, Growth, TakeOver):
    def __init__(self, deps: EngineDeps, graph: ExecutableGraph, run: Run, *,
                 base: Mapping[str, JSON], head: Checkpoint, statuses: Mapping[str, NodeStatus],
                 writes: Mapping[str, JSON],
                 failures: Mapping[str, int], key_scope: str, journal: Sequence[JournalEntry],
                 interrupts: Sequence[Interrupt], attempts: Mapping[str, int],
                 source_journal: Sequence[JournalEntry] = (), created_here: bool = False):
        self.deps, self.env, self.graph = deps, deps.env, graph
        self.inst = Instances(graph, statuses)
        succeeded = {n: w for n, w in writes.items() if statuses.get(n) == N.SUCCEEDED}
        self.state = StateFold(self.inst, base, succeeded)
        self.rec = Recorder(deps.store, deps.env, self.inst, run, head, statuses, self.state)
        self.host = RunHost(self.rec, deps.graphs, deps.compensations, key_scope=key_scope, journal=journal,
                            interrupts=interrupts, source_journal=source_journal)
        self._attempt_no: dict[str, int] = dict(attempts)
        self._failures: dict[str, int] = dict(failures)
        self._retry_at: dict[str, float] = {}
        self.waiter = Waiter()
        # the waiter's own method, not the loop's: no reference cycle back to the loop, so a
        # finished run's structures are freed at once rather than by the cyclic collector
        self._in_flight = InFlight(deps.env.pool, self.waiter.wake)
        self._candidates: set[str] = set(self.inst.order)
        #: due and checked (dependencies, when=), waiting for a free slot: not examined again
        self._queued = scheduler.ReadyQueue()
        self._stop: Stop | None = None
        # a run this process has just created: a cancel asked through the store since then is
        # noticed a heartbeat from now, as one asked at any later moment is (a read saved per run)
        self._next_poll = deps.env.now() + deps.env.heartbeat if created_here else 0.0
        self.host.wake = self.waiter.wake
        self._starved = False
        self._turn_at = 0.0   # when this loop last gave the event loop a turn for certain (``_wait``)
        #: whether what the inherited statuses imply was created (``_regrow``)
        self._grown = not self.inst.dynamic
        self.stopped = asyncio.Event()   # set once this process stops driving the run

    # what the Runtime's slots see
    @property
    def run(self) -> Run:
        return self.rec.run

    @property
    def run_id(self) -> str:
        return self.rec.run.id

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def own_bound(self) -> int:
        return self.rec.run.max_concurrency

    @property
    def statuses(self) -> Mapping[str, NodeStatus]:
        return self.rec.statuses

    def wake(self) -> None:
        self.waiter.wake()

    def request_cancel(self, reason: str) -> None:
        if supersedes(StopKind.CANCEL, self._stop.kind if self._stop else None):
            self._stop = stop(StopKind.CANCEL, ErrorClass.CANCELLED, reason)
            self.host.cancel_requested = True   # a sync effect's thread gets a moment to finish
            self._stop_in_flight()
            self.wake()

    def _stop_with(self, kind: StopKind, cls: ErrorClass, message: str) -> None:
        if supersedes(kind, self._stop.kind if self._stop else None):
            self._stop = stop(kind, cls, message)

    # ------------------------------------------------------------------ driving

    def _grow_inherited(self) -> None:
        """Create what the statuses this loop began with imply, once: a run taken over may
        lack what a crash kept from being recorded, and a run branching off another (a
        continuation, a fork) inherits settled instances whose growth its source stopped
        short of, like a loop's next iteration past its bound, which fails it again."""
        if not self._grown:
            self._grown = True
            self._regrow()

    async def drive(self) -> Run:
        self.deps.slots.attach(self)
        try:
            self._grow_inherited()
            try:
                ended = await self._steps()
                assert ended is not None   # without ``until`` it runs to the end
                return ended
            except asyncio.CancelledError:
                # The caller stopped waiting: the run is cancelled as ``cancel`` does it, so that a
                # sync effect's thread that finishes within the grace is recorded, not left in
                # doubt. Then the caller's cancel goes on; a second one, or node code that outlasts
                # the grace, has the run abandoned at once (below).
                self.request_cancel(STOPPED_WAITING)
                await self._steps(until=self.rec.now() + CANCEL_GRACE + 1.0)
                raise
        except LeaseLost:
            log.warning("run %s: lease lost to another owner; this process stops writing", self.run_id)
            self._stop_in_flight()  # another process owns the run now: write nothing
            raise
        except EndNotRecorded:
            raise   # its end is computed, not stored: resume records it
        except asyncio.CancelledError:
            if self.run.status == RunStatus.RUNNING:   # not ended above
                await self._abort(stop(StopKind.CANCEL, ErrorClass.CANCELLED, STOPPED_WAITING))
            raise
        except BaseException as e:
            unrecorded = await self._abort(stop(StopKind.FAIL, ErrorClass.INTERNAL, f"{type(e).__name__}: {e}"))
            if unrecorded is not None and isinstance(e, Exception):
                raise unrecorded from e
            raise
        finally:
            self.rec.close()
            self.waiter.close()
            self.deps.slots.detach(self)
            self.stopped.set()

    async def _steps(self, until: float | None = None) -> Run | None:
        """Run the loop until the run ends or pauses (None: ``until`` came first)."""
        while True:
            self.waiter.looked()
            self._poll_limits()
            self._schedule()
            # a stopping run does not wait out retry backoffs: those nodes end with it
            if not self._in_flight.tasks and not self._starved and (not self._retry_at or self._stop is not None):
                if self.take_sent():   # it would pause: answers another process left meanwhile go on
                    continue
                finish_run(self.rec, self.host, self.deps.store, self._stop)
                await commit_end(self.rec)
                return self.run
            if until is not None and self.rec.now() >= until:
                return None
            self.rec.maybe_flush()
            await self._wait(until)
            self._collect()
            self.rec.checkpoint_if_dirty()

    async def _abort(self, why: Stop) -> EndNotRecorded | None:
        """The driver itself is stopping (its caller was cancelled, or an unexpected error): end
        the run here rather than leave it RUNNING; an end the store would not record is returned."""
        cancel = why.kind == StopKind.CANCEL
        try:
            for scope in self._in_flight.abandon_all():
                self.deps.slots.release(self)
                self.rec.attempt(scope, N.CANCELLED if cancel else N.FAILED, ErrorClass(why.error["class"]),
                                 why.error["message"], "abandoned with the run")
                self._node(scope.node, NodeEvent.CANCEL if cancel else NodeEvent.FAIL)
            self._stop = why
            finish_run(self.rec, self.host, self.deps.store, self._stop)
            await commit_end(self.rec)
        except EndNotRecorded as e:
            return e
        except Exception:  # recording failed too: the lease will expire and resume recovers
            log.exception("run %s: could not record its end (%s); it will be recovered once its "
                          "lease expires", self.run_id, why.error.get("message"))
        return None

    def _stop_in_flight(self) -> None:
        """Cancel every running attempt; their outcomes arrive through ``_collect``."""
        self._in_flight.cancel_all()

    def _node(self, node: str, event: NodeEvent, attempt: int | None = None, **data: JSON) -> None:
        # settled: its children may be ready (a map's item has none: its map may settle)
        if self.rec.node(node, event, attempt, **data) and not (self.inst.dynamic and self._grow(node)):
            self._candidates.update(self.inst.children(node))

    def _halting(self) -> bool:
        """The run stops for good (a failure, a cancel, a limit): nothing more may start. A
        run pausing for a question goes on with whatever does not wait for an answer, and
        pauses once nothing can run: the questions it pauses with, and the work done before,
        depend neither on ``max_concurrency`` nor on which node finished first (ADR 0011).
        A retry waits for the resume (its backoff would race the siblings still running), and
        so does what the run's deadline or ``max_steps`` leaves no room for: a run that asks
        pauses, and the answer can come with new limits."""
        return self._stop is not None and self._stop.kind != StopKind.INTERRUPT

    def _schedule(self) -> None:
        self._starved = False
        now = self.rec.now()
        pausing = self._stop is not None
        if pausing:
            if self._halting():
                return
            deadline = self.run.limits.get("deadline_at")
            if deadline is not None and now >= deadline:
                return
        while True:
            front = (scheduler.frontier(self.inst, self.rec.statuses, self._candidates) if self._candidates
                     else scheduler.NOTHING_DUE)   # nothing to examine (a map item settled)
            # examined: a waiting node comes back when one of its dependencies settles
            self._candidates = set()
            skipped = False
            for node in front.skip:
                self._node(node, NodeEvent.SKIP, reason="every dependency was skipped")
                skipped = True
            ready: list[str] = []
            for node in front.ready:
                due = self._retry_at.get(node)
                if due is not None and (due > now or pausing):
                    self._candidates.add(node)
                    continue
                spec = self.inst.spec(node)
                when, spawns = scheduler.gates(spec, node, self.rec.statuses[node])
                if when is not None:
                    try:
                        go = bool(when(view_of(self.state.input_model(node), spec.view)))
                    except Exception as e:
                        self._fail_before_start(node, ConditionFailed(node, e))
                        return
                    if not go:
                        self._node(node, NodeEvent.SKIP, reason="when() is false")
                        skipped = True
                        continue
                if spawns:
                    items = self._spawn(node)
                    if items is None:
                        return
                    # its new items are ready, and come next in canonical order: no frontier
                    # to pass through; what else it settled is examined on the next round
                    ready += items
                    skipped = skipped or bool(self._candidates)
                    continue
                ready.append(node)
            if self._halting():   # what settled above met a limit (a loop's bound)
                return
            # (positions move as instances are made: asked for now)
            launch = self._queued.admit(ready, self.inst.index.__getitem__, self.deps.slots.room(self))
            if self._queued:  # the rest wait for a free slot; with nothing in flight, for other runs to free one
                self._starved = not self._in_flight and not launch
            for node in launch:
                # a node started eagerly (``executor.EAGER``) may have stopped the run: start no more
                if self._halting() or not self._launch(node):
                    return
            if not skipped:
                return

    def _launch(self, node: str) -> bool:
        limits, usage = self.run.limits, self.rec.usage
        max_steps = limits.get("max_steps")
        if max_steps is not None and usage["steps"] >= max_steps:
            if self._stop is None:   # a pausing run pauses: resume may raise the limit
                self._stop_with(StopKind.FAIL, ErrorClass.LIMIT_EXCEEDED,
                                f"{decisions.MAX_STEPS_REACHED}{max_steps} before node {node!r} could start")
            return False
        spec = self.inst.spec(node)
        now = self.rec.now()
        deadline = limits.get("deadline_at")
        if spec.timeout is not None:
            deadline = min(deadline or float("inf"), now + spec.timeout)
        try:
            state = self.state.input_model(node)
        except ValidationError as e:
            self._fail_before_start(node, InvalidWrites(f"state for {node!r} does not validate: {e}"))
            return False
        extra: dict[str, object] | None = None
        if spec.map_over is not None:
            index = parse_instance(node).item
            values = getattr(state, spec.map_over, None)
            if index is None or not isinstance(values, list) or index >= len(values):
                self._fail_before_start(node, InvalidWrites(f"map item {node!r}: its list changed under it"))
                return False
            if spec.wants_item:
                extra = {"item": values[index]}
        state = view_of(state, spec.view) if spec.view is not None else state
        attempt = self._attempt_no.get(node, 0) + 1
        self._attempt_no[node] = attempt
        usage["steps"] += 1
        self._retry_at.pop(node, None)
        scope = AttemptScope(self.rec.run.id, node, attempt, deadline, self.env.clock.time, now)
        self._node(node, NodeEvent.START, attempt=attempt)
        ctx = NodeContext(self.host, scope, asyncio.get_running_loop())
        self.deps.slots.acquire()   # first: the attempt may run at once (``executor.EAGER``)
        self._in_flight.launch(spec, state, ctx, scope, extra)
        return True

    async def _wait(self, until: float | None = None) -> None:
        now = self.rec.now()
        if not 0 <= now - self._turn_at < HOLD_LOOP:   # (a clock set back counts as a long hold)
            # attempts started eagerly may all end without waiting: the event loop's other
            # tasks (other runs, a server's requests) get a turn at least this often
            self._turn_at = now
            await asyncio.sleep(0)
        if await self._in_flight.settle():
            return
        now = self.rec.now()
        timeouts = [self.env.heartbeat] if until is None else [self.env.heartbeat, until - now]
        if not self.rec.batch.empty():
            timeouts.append(self.rec.last_flush + self.env.group_commit - now)
        if self._retry_at:
            timeouts.append(min(self._retry_at.values()) - now)
        deadline = self.run.limits.get("deadline_at")
        if deadline is not None:
            timeouts.append(deadline - now)
        await self.waiter.wait(timeouts)

    def _poll_limits(self) -> None:
        if self._stop is not None and self._stop.kind == StopKind.CANCEL:
            return
        now = self.rec.now()
        reason = None
        if self.deps.store.durable and (now >= self._next_poll or self.waiter.told):
            # another process may have asked to cancel; poll at heartbeat pace (or when told), not every step
            self._next_poll, self.waiter.told = now + self.env.heartbeat, False
            reason = self.deps.store.cancel_request(self.run_id)
            if reason is None:
                self.take_sent()
        if reason is not None:
            self.request_cancel(reason)
            return
        budget = self.host.budget_error() if self.host.over_budget is not None else None
        if budget is not None and supersedes(StopKind.FAIL, self._stop.kind if self._stop else None):
            self._stop = Stop(StopKind.FAIL, budget)
        deadline = self.rec.run.limits.get("deadline_at")
        # a pausing run is not failed by its deadline: resuming it checks the deadline again
        if deadline is not None and now >= deadline and self._stop is None:
            self._stop_with(StopKind.FAIL, ErrorClass.DEADLINE, "run deadline exceeded")
            self._stop_in_flight()

    # ------------------------------------------------------------------ outcomes

    def _collect(self) -> None:
        done = self._in_flight.take_done(self.inst.index.__getitem__)
        if done:   # (a release wakes the Runtime's other runs: only when a slot was freed)
            self.deps.slots.release(self, len(done))
        for scope, outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome
            if outcome is None:
                if self._stop is not None and self._stop.kind == StopKind.FAIL:
                    # stopped by the run's deadline or a limit, not by a person
                    self._record_failure(scope, StopError(self._stop.error))
                else:
                    self._record_cancelled(scope)
                continue
            if outcome.kind == OutcomeKind.SUCCEEDED:
                self._record_success(scope, outcome)
            elif outcome.kind == OutcomeKind.INTERRUPTED:
                self._record_interrupt(scope, outcome)
            else:
                self._record_failure(scope, outcome.error or NodeError("unknown failure"))
