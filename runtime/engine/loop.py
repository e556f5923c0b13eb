"""Drives one run in this process: the ready queue, attempts, outcomes, checkpoints.

Every status change goes through ``_node``/``_run_event`` (the transition tables)
and emits a trace event into the current batch; the batch commits in one
transaction, so trace and checkpoints never disagree. Batches commit before any
new attempt starts running (group commit), before every effect (forced to disk),
and when the run pauses or ends (forced to disk).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import BaseModel, ValidationError
from pydantic_core import from_json, to_json

from . import scheduler
from .context import AttemptScope, NodeContext
from ..core.errors import (
    ErrorClass,
    InvalidWrites,
    LeaseLost,
    LimitExceeded,
    NodeError,
    NodeInterrupt,
    WriteConflict,
    classify,
)
from .executor import Outcome, OutcomeKind, execute_attempt
from ..graph.spec import ExecutableGraph
from ..core.records import (
    COMPENSATION_STATUSES,
    Batch,
    Checkpoint,
    EffectStatus,
    Interrupt,
    InterruptKind,
    InterruptStatus,
    JournalEntry,
    NodeAttempt,
    PendingWrite,
    Run,
    TraceEvent,
    WriteKind,
)
from ..graph.reducers import fold
from ..core.states import (
    NodeEvent,
    NodeStatus,
    RunEvent,
    RunStatus,
    next_node_status,
    next_run_status,
)
from ..core.jsonvalues import JSON

if TYPE_CHECKING:
    from ..runtime import Runtime


N = NodeStatus
SNAPSHOT_EVERY = 200
SNAPSHOT_MIN_BYTES = 4096
#: statuses that a checkpoint must capture (the node's outcome is known)
_SETTLED = frozenset({N.SUCCEEDED, N.FAILED, N.SKIPPED, N.INTERRUPTED, N.CANCELLED})


class RunLoop:
    def __init__(self, runtime: Runtime, graph: ExecutableGraph, run: Run, *,
                 head: Checkpoint, statuses: Mapping[str, NodeStatus], writes: dict[str, JSON],
                 failures: Mapping[str, int],
                 lineage: list[str], key_scope: str,
                 journal: list[JournalEntry], interrupts: list[Interrupt],
                 attempts: Mapping[str, int], source_journal: Sequence[JournalEntry] = ()):
        self.runtime = runtime
        self.store = runtime.store
        self.graph = graph
        self.run = run
        self.head = head
        self._parent = head
        self.lineage = lineage
        self.key_scope = key_scope
        self.statuses: dict[str, NodeStatus] = dict(statuses)
        self._changed = {n for n, st in self.statuses.items() if head.node_states.get(n) != st}
        self.writes = {n: w for n, w in writes.items() if self.statuses.get(n) == N.SUCCEEDED}
        self._journal: dict[tuple[str, str, int], JournalEntry] = {}
        for e in journal:  # lineage order is oldest run first, so our own entries win
            if e.status not in COMPENSATION_STATUSES:
                self._journal[(e.node, e.name, e.occurrence)] = e
        self.effects_mode = run.effects_mode
        # a replay compares: it serves an identity's record even when the request changed
        self.serve_changed = bool(run.options.get("compare"))
        self._mocks: Mapping[str, JSON] = run.options.get("mocks") or {}
        #: mocked runs: the source lineage's served records per identity, nearest run first
        self._source: dict[tuple[str, str, int], list[JournalEntry]] = {}
        latest: dict[tuple[str, str, str, int], JournalEntry] = {}
        for e in source_journal:  # nearest run first, each run's entries in the order recorded
            if e.status in (EffectStatus.SUCCEEDED, EffectStatus.MOCKED):
                latest[(e.run_id, e.node, e.name, e.occurrence)] = e
        for (_, node, name, occ), e in latest.items():
            self._source.setdefault((node, name, occ), []).append(e)
        self._interrupts: dict[tuple[str, str, str], Interrupt] = {}
        for i in interrupts:
            if i.run_id == run.id or i.status == InterruptStatus.ANSWERED:
                self._interrupts[(i.node, i.slot, i.kind)] = i
        self._attempt_no: dict[str, int] = dict(attempts)
        self._failures: dict[str, int] = dict(failures)
        self._retry_at: dict[str, float] = {}
        self._in_flight: dict[asyncio.Future[Outcome], AttemptScope] = {}
        self._candidates: set[str] = set(graph.order)
        self._batch = Batch(run_id=run.id, fence=run.fence)
        self._folded_since_cp: list[str] = []
        self._dirty = False
        self._since_snapshot = 0
        self._stop: tuple[str, Mapping[str, JSON]] | None = None   # ("fail"|"cancel"|"interrupt", error)
        self._wake: asyncio.Future[None] | None = None
        self._next_poll = 0.0
        self._done: list[asyncio.Future[Outcome]] = []   # finished attempts not yet collected
        self._timer: asyncio.TimerHandle | None = None
        self._seq = run.event_seq
        self._last_flush = runtime.clock.time()
        self._starved = False
        self._usage = {"tokens": int(run.usage.get("tokens", 0)), "cost": float(run.usage.get("cost", 0.0)),
                       "steps": int(run.usage.get("steps", 0))}
        self._usage_lock = threading.Lock()
        self._bytes_since_snapshot = 0
        self._snapshot_bytes = 0
        self._over_budget: str | None = None
        self._state_cache: dict[str, JSON] = {}
        self._state_mask = -1     # which succeeded nodes the cache folds (-1: none cached)
        self._done_mask = 0
        #: per last-value field, the completed nodes that wrote it (a bitmask over canonical positions)
        self._field_writers: dict[str, int] = {}
        for n, w in self.writes.items():
            self._done_mask |= 1 << graph.index[n]
            self._note_writer(n, w)

    # ------------------------------------------------------------------ driving

    async def drive(self) -> Run:
        self.runtime._attach(self)
        try:
            while True:
                self._poll_limits()
                self._schedule()
                # a stopping run does not wait out retry backoffs: those nodes end with it
                if not self._in_flight and not self._starved and (not self._retry_at or self._stop is not None):
                    self._finish()
                    self._flush(durable=True)
                    return self.run
                self._maybe_flush()
                await self._wait()
                self._collect()
                self._checkpoint_if_dirty()
        except LeaseLost:
            for task in self._in_flight:  # another process owns the run now: write nothing
                task.cancel()
            raise
        except asyncio.CancelledError:
            self._abort("cancel", {"class": ErrorClass.CANCELLED.value,
                                   "message": "the caller stopped waiting for the run"})
            raise
        except BaseException as e:
            self._abort("fail", {"class": ErrorClass.INTERNAL.value, "message": f"{type(e).__name__}: {e}"})
            raise
        finally:
            if self._timer is not None:
                self._timer.cancel()
            self.runtime._detach(self)

    def _abort(self, kind: str, error: Mapping[str, JSON]) -> None:
        """The driver itself is stopping (its caller was cancelled, or an unexpected
        error): end the run here rather than leave it RUNNING until its lease expires."""
        try:
            for task, scope in list(self._in_flight.items()):
                scope.abandoned = True
                task.cancel()
                self.runtime._release(self)
                self._attempt(scope, N.CANCELLED if kind == "cancel" else N.FAILED,
                              ErrorClass(error["class"]), error["message"], "abandoned with the run")
                self._node(scope.node, NodeEvent.CANCEL if kind == "cancel" else NodeEvent.FAIL)
            self._in_flight.clear()
            self._stop = (kind, error)
            self._finish()
            self._flush(durable=True)
        except Exception:  # recording failed too: the lease will expire and resume recovers
            pass

    def begin(self, event: RunEvent, answered: Mapping[str, JSON]) -> None:
        """Record why this process took the run over: claim, resume with answers, recovery."""
        if event == RunEvent.RECOVER:
            self._lose_in_flight()
        by_id = {i.id: key for key, i in self._interrupts.items()}
        for interrupt_id, value in answered.items():
            key = by_id[interrupt_id]
            done = replace(self._interrupts[key], status=InterruptStatus.ANSWERED, answer=value,
                           answered_at=self.now())
            self._interrupts[key] = done
            self._batch.interrupts.append(done)
            self._emit("interrupt.answered", done.node, interrupt_id=interrupt_id)
            if self.statuses[done.node] == N.INTERRUPTED:
                self._node(done.node, NodeEvent.RESUME, interrupt_id=interrupt_id)
        self._run_event(event, owner=self.runtime.owner)
        self._candidates = set(self.graph.order)
        self._checkpoint_if_dirty()
        self._flush(durable=True)

    def begin_cancel(self, reason: str) -> None:
        """Cancel a run no process is executing (queued, paused, or orphaned by a crash)."""
        if self.run.status == RunStatus.RUNNING:
            self._lose_in_flight()
            self._run_event(RunEvent.RECOVER, owner=self.runtime.owner)
        self._stop = ("cancel", {"class": ErrorClass.CANCELLED.value, "message": reason})

    def _lose_in_flight(self) -> None:
        # RETRYING nodes were waiting, not running: they keep their backoff (see restore)
        for node in self.graph.order:
            if self.statuses[node] == N.RUNNING:
                self._node(node, NodeEvent.LOST, reason="the process running it stopped")

    def restore(self, retry_at: Mapping[str, float], stopping: tuple[str, Mapping[str, JSON]] | None) -> None:
        """What a run taken over mid-way was doing: backoffs in progress, and whether it
        had already begun to stop (a failure or cancel waiting for siblings)."""
        self._retry_at.update(retry_at)
        if stopping is not None:
            self._stop = stopping
        limits, usage = self.run.limits, self._usage
        over = [f"{k} {usage[k]:g} > max_{k} {limits['max_' + k]:g}" for k in ("tokens", "cost")
                if limits.get("max_" + k) is not None and usage[k] > limits["max_" + k]]
        if over:
            self._over_budget = "run budget exceeded: " + "; ".join(over)

    def request_cancel(self, reason: str) -> None:
        if self._stop is None or self._stop[0] != "cancel":
            self._stop = ("cancel", {"class": ErrorClass.CANCELLED.value, "message": reason})
            self._stop_in_flight()
            self.wake()

    def _stop_in_flight(self) -> None:
        """Cancel every running attempt; their outcomes arrive through ``_collect``."""
        for task, scope in self._in_flight.items():
            scope.abandoned = True
            task.cancel()

    def wake(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _schedule(self) -> None:
        self._starved = False
        if self._stop is not None:
            return
        now = self.runtime.clock.time()
        while True:
            front = scheduler.frontier(self.graph, self.statuses, self._candidates)
            # examined: a waiting node comes back when one of its dependencies settles
            self._candidates = set()
            skipped = False
            for node in front.skip:
                self._node(node, NodeEvent.SKIP, reason="every dependency was skipped")
                skipped = True
            ready: list[str] = []
            for node in front.ready:
                due = self._retry_at.get(node)
                if due is not None and due > now:
                    self._candidates.add(node)
                    continue
                spec = self.graph.nodes[node]
                if spec.when is not None and self.statuses[node] == N.PENDING:
                    try:
                        go = bool(spec.when(self._input_model(node)))
                    except Exception as e:
                        self._fail_before_start(node, e)
                        return
                    if not go:
                        self._node(node, NodeEvent.SKIP, reason="when() is false")
                        skipped = True
                        continue
                ready.append(node)
            launch = scheduler.admit(ready, 0, self.runtime._room(self))
            if len(launch) < len(ready):  # the rest wait in the queue for a free slot
                self._candidates.update(ready[len(launch):])
                # a run with nothing in flight waits for other runs of this Runtime to free one
                self._starved = not self._in_flight and not launch
            for node in launch:
                if not self._launch(node):
                    return
            if not skipped:
                return

    def _launch(self, node: str) -> bool:
        limits = self.run.limits
        max_steps = limits.get("max_steps")
        if max_steps is not None and self._usage["steps"] >= max_steps:
            self._stop_with("fail", ErrorClass.LIMIT_EXCEEDED,
                            f"run reached max_steps={max_steps} before node {node!r} could start")
            return False
        spec = self.graph.nodes[node]
        now = self.runtime.clock.time()
        deadline = limits.get("deadline_at")
        if spec.timeout is not None:
            deadline = min(deadline or float("inf"), now + spec.timeout)
        try:
            state = self._input_model(node)
        except ValidationError as e:
            self._fail_before_start(node, InvalidWrites(f"state for {node!r} does not validate: {e}"))
            return False
        attempt = self._attempt_no.get(node, 0) + 1
        self._attempt_no[node] = attempt
        self._usage["steps"] += 1
        self._retry_at.pop(node, None)
        scope = AttemptScope(run_id=self.run.id, node=node, attempt=attempt, deadline=deadline,
                             clock=self.runtime.clock.time, started_at=now)
        self._node(node, NodeEvent.START, attempt=attempt)
        loop = asyncio.get_running_loop()
        ctx = NodeContext(self, scope, loop)
        task = asyncio.ensure_future(execute_attempt(spec, state, ctx, scope, self.runtime._pool))
        task.add_done_callback(self._on_done)
        self._in_flight[task] = scope
        self.runtime._acquire(self)
        return True

    async def _wait(self) -> None:
        """Sleep until an attempt finishes, a wake-up is requested, or the next timed
        duty: heartbeat, group-commit deadline, retry backoff, run deadline."""
        if self._done:
            return
        now = self.runtime.clock.time()
        timeouts = [self.runtime.heartbeat]
        if not self._batch.empty():
            timeouts.append(self._last_flush + self.runtime.group_commit - now)
        if self._retry_at:
            timeouts.append(min(self._retry_at.values()) - now)
        deadline = self.run.limits.get("deadline_at")
        if deadline is not None:
            timeouts.append(deadline - now)
        loop = asyncio.get_running_loop()
        due = loop.time() + max(0.0, min(timeouts))
        # one timer serves many waits: only move it when the next duty comes sooner
        if self._timer is None or self._timer.when() > due + 1e-4:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(due, self._on_timer)
        self._wake = loop.create_future()
        try:
            await self._wake
        finally:
            self._wake = None

    def _on_timer(self) -> None:
        self._timer = None
        self.wake()

    def _poll_limits(self) -> None:
        if self._stop is not None and self._stop[0] == "cancel":
            return
        now = self.runtime.clock.time()
        reason = None
        if self.store.durable and now >= self._next_poll:
            # another process may have asked to cancel; poll at heartbeat pace, not every step
            self._next_poll = now + self.runtime.heartbeat
            reason = self.store.cancel_request(self.run.id)
        if reason is not None:
            self.request_cancel(reason)
            return
        if self._over_budget is not None and (self._stop is None or self._stop[0] == "interrupt"):
            self._stop_with("fail", ErrorClass.LIMIT_EXCEEDED, self._over_budget)
        deadline = self.run.limits.get("deadline_at")
        if deadline is not None and self.runtime.clock.time() >= deadline and self._stop is None:
            self._stop_with("fail", ErrorClass.DEADLINE, "run deadline exceeded")
            self._stop_in_flight()

    # ------------------------------------------------------------------ outcomes

    def _on_done(self, task: asyncio.Future[Outcome]) -> None:
        self._done.append(task)
        self.wake()

    def _collect(self) -> None:
        done, self._done = self._done, []
        done.sort(key=lambda t: self.graph.index[self._in_flight[t].node])
        for task in done:
            scope = self._in_flight.pop(task)
            self.runtime._release(self)
            if task.cancelled():
                if self._stop is not None and self._stop[0] == "fail":
                    # stopped by the run's deadline or a limit, not by a person
                    self._record_failure(scope, _StopError(self._stop[1]))
                else:
                    self._record_cancelled(scope)
                continue
            outcome = task.result()
            if outcome.kind == OutcomeKind.SUCCEEDED:
                self._record_success(scope, outcome)
            elif outcome.kind == OutcomeKind.INTERRUPTED:
                self._record_interrupt(scope, outcome)
            else:
                self._record_failure(scope, outcome.error or NodeError("unknown failure"))

    def _record_success(self, scope: AttemptScope, outcome: Outcome) -> None:
        node = scope.node
        try:
            writes = self._check_writes(node, outcome.value)
        except NodeError as e:
            self._record_failure(scope, e)
            return
        self._pending(scope, WriteKind.WRITES, writes)
        self._attempt(scope, N.SUCCEEDED)
        self.writes[node] = writes
        self._note_writer(node, writes)
        self._done_mask |= 1 << self.graph.index[node]
        self._folded_since_cp.append(node)
        self._node(node, NodeEvent.SUCCEED, attempt=scope.attempt)

    def _record_interrupt(self, scope: AttemptScope, outcome: Outcome) -> None:
        self._pending(scope, WriteKind.INTERRUPT, {"interrupt_id": outcome.interrupt_id})
        self._attempt(scope, N.INTERRUPTED, decision="paused for an answer")
        self._node(scope.node, NodeEvent.INTERRUPT, attempt=scope.attempt, interrupt_id=outcome.interrupt_id)
        if self._stop is None:
            self._stop = ("interrupt", {})

    def _record_cancelled(self, scope: AttemptScope) -> None:
        reason = self._stop[1]["message"] if self._stop else "cancelled"
        self._attempt(scope, N.CANCELLED, error_class=ErrorClass.CANCELLED, error=reason, decision="cancelled")
        self._node(scope.node, NodeEvent.CANCEL, attempt=scope.attempt, reason=reason)

    def _record_failure(self, scope: AttemptScope, error: BaseException) -> None:
        node, spec = scope.node, self.graph.nodes[scope.node]
        cls = classify(error)
        message = f"{type(error).__name__}: {error}"
        failures = self._failures.get(node, 0) + 1
        self._failures[node] = failures
        policy = spec.retry
        deadline = self.run.limits.get("deadline_at")
        now = self.runtime.clock.time()
        if self._stop is not None and self._stop[0] == "cancel" and cls == ErrorClass.DEADLINE:
            self._record_cancelled(scope)
            return
        retry = (self._stop is None and cls in policy.retry_on and failures < policy.max_attempts
                 and (deadline is None or now < deadline))
        if retry:
            delay = policy.delay(failures)
            self._retry_at[node] = now + delay
            self._candidates.add(node)
            decision = f"retry in {delay:g}s (failure {failures} of at most {policy.max_attempts})"
            self._attempt(scope, N.FAILED, error_class=cls, error=message, decision=decision)
            self._node(node, NodeEvent.RETRY, attempt=scope.attempt, error_class=cls.value,
                       error=message, retry_in=delay)
            return
        if cls in policy.retry_on and failures >= policy.max_attempts:
            decision = f"fail: {failures} failure(s), max_attempts={policy.max_attempts}"
        elif self._stop is not None:
            decision = "fail: the run is already stopping"
        else:
            decision = f"fail: {cls.value} errors are not retried by this node's policy"
        self._pending(scope, WriteKind.ERROR, {"class": cls.value, "message": message})
        self._attempt(scope, N.FAILED, error_class=cls, error=message, decision=decision)
        self._node(node, NodeEvent.FAIL, attempt=scope.attempt, error_class=cls.value, error=message)
        if self._stop is None or self._stop[0] == "interrupt":
            self._stop = ("fail", {"class": cls.value, "message": message, "node": node})

    def _fail_before_start(self, node: str, error: BaseException) -> None:
        """A failure found while preparing a node (its ``when`` raised, bad state)."""
        attempt = self._attempt_no.get(node, 0) + 1
        self._attempt_no[node] = attempt
        scope = AttemptScope(run_id=self.run.id, node=node, attempt=attempt, deadline=None,
                             clock=self.runtime.clock.time, started_at=self.runtime.clock.time())
        self._node(node, NodeEvent.START, attempt=attempt)
        self._failures[node] = self.graph.nodes[node].retry.max_attempts  # never retried
        self._record_failure(scope, error)

    def _check_writes(self, node: str, value: Any) -> dict[str, JSON]:
        if value is None:
            return {}
        model = self.graph.state_model
        if isinstance(value, model):
            raise InvalidWrites(f"node {node!r} returned the whole state; return a dict of only the "
                                f"fields it writes (reducers would apply every field again)")
        if isinstance(value, BaseModel):
            value = value.model_dump(exclude_unset=True)
        if not isinstance(value, Mapping):
            raise InvalidWrites(f"node {node!r} returned {type(value).__name__}; a node returns a "
                                f"dict of state fields to write, or None")
        extra_ok = model.model_config.get("extra") == "allow"
        unknown = sorted(k for k in value if k not in model.model_fields)
        if unknown and not extra_ok:
            raise InvalidWrites(f"node {node!r} wrote unknown state field(s) {', '.join(map(repr, unknown))}; "
                                f"fields are: {', '.join(model.model_fields)}")
        # a JSON round trip: the stored writes share nothing with objects the node keeps
        raw = _to_json_bytes(dict(value), node)
        self._bytes_since_snapshot += len(raw)
        writes: dict[str, JSON] = from_json(raw)
        for field in writes:
            prev = self._last_writer(field, node)
            if prev is not None:
                raise WriteConflict(field, prev, node)
        base = self._input_state(node)
        try:
            folded = fold(base, [(node, writes)], self.graph.reducers)
        except Exception:
            self._name_reducer_failure(node, base, writes)
            raise
        try:
            checked = model.model_validate(folded)
        except ValidationError as e:
            err = e.errors()[0]
            field = ".".join(map(str, err["loc"]))
            raise InvalidWrites(f"node {node!r} wrote an invalid value for field {field!r}: {err['msg']}") from None
        dumped = checked.model_dump(mode="json")
        for field in writes:  # store last-value writes as the model coerced them ("3" -> 3)
            if self.graph.reducer(field).conflicts and field in dumped:
                writes[field] = dumped[field]
        return writes

    def _name_reducer_failure(self, node: str, base: Mapping[str, JSON], writes: Mapping[str, JSON]) -> None:
        """Raise ``InvalidWrites`` naming the field whose reducer could not fold the write."""
        for field, value in writes.items():
            try:
                fold(base, [(node, {field: value})], self.graph.reducers)
            except Exception as e:
                raise InvalidWrites(f"node {node!r} field {field!r}: reducer {self.graph.reducer(field).name!r} "
                                    f"failed: {type(e).__name__}: {e}") from None

    def _note_writer(self, node: str, writes: Mapping[str, JSON]) -> None:
        bit = 1 << self.graph.index[node]
        for field in writes:
            if self.graph.reducer(field).conflicts:
                self._field_writers[field] = self._field_writers.get(field, 0) | bit

    def _last_writer(self, field: str, node: str) -> str | None:
        """A completed node that wrote ``field`` (last-value) and is not ordered before ``node``."""
        writers = self._field_writers.get(field, 0)
        # bit arithmetic: constant work per write however many nodes wrote the field before
        unordered = writers & ~self.graph.ancestor_mask(node) & ~(1 << self.graph.index[node])
        if not unordered:
            return None
        low = unordered & -unordered
        return self.graph.order[low.bit_length() - 1]

    # ------------------------------------------------------------------ state

    def _input_state(self, node: str) -> dict[str, JSON]:
        """Run input folded with the node's succeeded ancestors' writes, canonical order."""
        return self._fold_mask(self.graph.ancestor_mask(node) & self._done_mask)

    def _input_model(self, node: str) -> BaseModel:
        # built from JSON, so nothing a node changes in place reaches other nodes or the store
        return self.graph.state_model.model_validate_json(to_json(self._input_state(node)))

    def head_state(self) -> dict[str, JSON]:
        return self._fold_mask(self._done_mask)

    def _fold_mask(self, mask: int) -> dict[str, JSON]:
        if mask == self._state_mask:
            return self._state_cache
        base, start = dict(self.run.input), 0
        cached = self._state_mask
        # Reuse the cache when the new set extends it with nodes later in canonical order.
        if cached >= 0 and mask & cached == cached and (mask ^ cached) >> cached.bit_length() << cached.bit_length() == mask ^ cached:
            base, start = self._state_cache, cached.bit_length()
        order, items = self.graph.order, []
        rest = mask >> start << start
        while rest:  # visit set bits only, lowest (earliest in canonical order) first
            low = rest & -rest
            name = order[low.bit_length() - 1]
            items.append((name, self.writes[name]))
            rest ^= low
        state = fold(base, items, self.graph.reducers)
        self._state_cache, self._state_mask = state, mask
        return state

    # ------------------------------------------------------------------ recording

    def _emit(self, type_: str, node: str | None = None, attempt: int | None = None, **data: Any) -> None:
        self._seq += 1  # copied into the run row when the batch commits
        self._batch.events.append(TraceEvent(self.run.id, self._seq, self.runtime.clock.time(), type_,
                                             node, attempt, data))

    def _node(self, node: str, event: NodeEvent, attempt: int | None = None, **data: Any) -> None:
        status = next_node_status(self.statuses[node], event)
        self.statuses[node] = status
        self._changed.add(node)
        self._emit(f"node.{event.value}", node, attempt, **data)  # the status follows from the table
        if status in _SETTLED:
            self._dirty = True
            self._candidates.update(self.graph.children(node))

    def _run_event(self, event: RunEvent, **data: Any) -> None:
        status = next_run_status(self.run.status, event)
        self.run = self.run.evolve(status=status, updated_at=self.runtime.clock.time())
        self._emit(f"run.{event.value}", status=status.value, **data)

    def _pending(self, scope: AttemptScope, kind: WriteKind, value: JSON) -> None:
        self._batch.writes.append(PendingWrite(self.run.id, self.head.seq, scope.node, scope.attempt,
                                               kind, value, self.runtime.clock.time()))

    def _attempt(self, scope: AttemptScope, status: NodeStatus, error_class: ErrorClass | None = None,
                 error: str | None = None, decision: str | None = None) -> None:
        self._batch.attempts.append(NodeAttempt(
            self.run.id, scope.node, scope.attempt, status, scope.started_at, self.runtime.clock.time(),
            error_class.value if error_class else None, error, decision))
        if scope.tokens or scope.cost:
            self._emit("usage", scope.node, scope.attempt, tokens=scope.tokens, cost=scope.cost)

    def _take_changed(self, parent: Checkpoint) -> tuple[str, ...]:
        """Nodes whose status differs from the parent checkpoint's, canonical order."""
        before = parent.node_states
        changed = [n for n in self._changed if before.get(n) != self.statuses[n]]
        self._changed = set()
        return tuple(self.graph.canonical(changed))

    def _checkpoint_if_dirty(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        self._since_snapshot += 1
        snapshot = None
        # A full snapshot once the writes since the last one outweigh it (or after
        # SNAPSHOT_EVERY steps): snapshots then cost at most about as much as the
        # writes themselves, so storage stays linear even when the state keeps growing.
        if (self._since_snapshot >= SNAPSHOT_EVERY or self.run.status != RunStatus.RUNNING
                or self._bytes_since_snapshot >= max(self._snapshot_bytes, SNAPSHOT_MIN_BYTES)):
            snapshot = self.head_state()
            self._since_snapshot = self._bytes_since_snapshot = 0
            self._snapshot_bytes = len(to_json(snapshot))
        cp = Checkpoint(
            id=self.runtime.ids.new("cp"), run_id=self.run.id, seq=self.head.seq + 1,
            parent_id=self.head.id, nodes=tuple(self.graph.canonical(self._folded_since_cp)),
            node_states=dict(self.statuses), event_seq=self._seq,
            created_at=self.runtime.clock.time(), source="step", snapshot=snapshot,
            changed=self._take_changed(self.head),
        )
        self._folded_since_cp = []
        self._parent, self.head = self.head, cp
        self._batch.checkpoints.append(cp)

    def _maybe_flush(self) -> None:
        """Group commit: pure outcomes may wait up to ``Runtime.group_commit`` seconds to
        share a transaction. Nothing outside the process can have seen them yet, and a
        crash before the commit just runs those pure nodes again."""
        now = self.runtime.clock.time()
        lease = self.run.lease_expires_at
        if lease is not None and lease - now < self.runtime.lease_ttl / 2:
            self._flush()  # heartbeat: renew the lease even when nothing else happened
        elif not self._batch.empty() and now - self._last_flush >= self.runtime.group_commit:
            self._flush()

    def _flush(self, durable: bool = False) -> None:
        batch = self._batch
        now = self.runtime.clock.time()
        self._last_flush = now
        lease = self.run.lease_expires_at
        if lease is not None and self.run.status == RunStatus.RUNNING and lease - now < self.runtime.lease_ttl / 2:
            self.run = self.run.evolve(lease_expires_at=now + self.runtime.lease_ttl)
        self.run = self.run.evolve(usage=dict(self._usage), event_seq=self._seq, head_seq=self.head.seq)
        batch.run = self.run
        batch.durable = durable
        self.store.commit(batch)
        self._batch = Batch(run_id=self.run.id, fence=self.run.fence)

    def _stop_with(self, kind: str, cls: ErrorClass, message: str) -> None:
        if self._stop is None or self._stop[0] == "interrupt":
            self._stop = (kind, {"class": cls.value, "message": message})

    def _finish(self) -> None:
        if (self._stop is None or self._stop[0] == "interrupt") and self.store.durable:
            reason = self.store.cancel_request(self.run.id)
            if reason is not None and N.INTERRUPTED in self.statuses.values():
                # asked to cancel while it was running: do not leave it paused instead
                self._stop = ("cancel", {"class": ErrorClass.CANCELLED.value, "message": reason})
        stop = self._stop
        kind = stop[0] if stop else None
        if kind == "cancel" or kind == "fail":
            event = NodeEvent.CANCEL if kind == "cancel" else NodeEvent.FAIL
            for node in self.graph.order:
                if self.statuses[node] == N.RETRYING:
                    self._node(node, event)
                elif self.statuses[node] == N.INTERRUPTED and kind == "cancel":
                    self._node(node, NodeEvent.CANCEL)
        pausing = kind == "interrupt" or (kind is None and N.INTERRUPTED in self.statuses.values())
        if not pausing:  # an ending run leaves no question open
            for key, intr in list(self._interrupts.items()):
                if intr.run_id == self.run.id and intr.status == InterruptStatus.PENDING:
                    closed = replace(intr, status=InterruptStatus.CANCELLED)
                    self._interrupts[key] = closed
                    self._batch.interrupts.append(closed)
        self._checkpoint_if_dirty()
        error = dict(stop[1]) if stop and kind in ("cancel", "fail") else None
        if kind == "cancel":
            self._run_event(RunEvent.CANCEL, reason=error["message"] if error else "")
        elif kind == "fail":
            self._run_event(RunEvent.FAIL, **(error or {}))
        elif kind == "interrupt" or N.INTERRUPTED in self.statuses.values():
            self._run_event(RunEvent.INTERRUPT)
        elif all(s in (N.SUCCEEDED, N.SKIPPED) for s in self.statuses.values()):
            self._run_event(RunEvent.SUCCEED)
        else:
            stuck = [n for n, s in self.statuses.items() if s not in (N.SUCCEEDED, N.SKIPPED)]
            error = {"class": ErrorClass.INTERNAL.value, "message": f"nodes can never run: {stuck}"}
            self._run_event(RunEvent.FAIL, **error)
        self._dirty = True
        self._force_final_checkpoint()
        self.run = self.run.evolve(error=error, lease_owner=None, lease_expires_at=None)

    def _force_final_checkpoint(self) -> None:
        """The last checkpoint of a pause or end carries a full snapshot."""
        self._since_snapshot = SNAPSHOT_EVERY
        if self._batch.checkpoints:
            last = self._batch.checkpoints.pop()
            self._changed |= set(last.changed or ())
            self.head = replace(last, node_states=dict(self.statuses), event_seq=self._seq,
                                snapshot=self.head_state(), changed=self._take_changed(self._parent))
            self._batch.checkpoints.append(self.head)
            self._dirty = False
            return
        self._checkpoint_if_dirty()

    # ------------------------------------------------------------------ host API (NodeContext, effects)

    def now(self) -> float:
        return self.runtime.clock.time()

    def journal_latest(self, node: str, name: str, occurrence: int) -> JournalEntry | None:
        return self._journal.get((node, name, occurrence))

    def source_entry(self, node: str, name: str, occurrence: int, request: JSON) -> JournalEntry | None:
        found = self._source.get((node, name, occurrence))
        if not found:
            return None
        return next((e for e in found if e.request == request), found[0])

    def mock_result(self, name: str) -> tuple[bool, JSON]:
        return (name in self._mocks, self._mocks.get(name))

    def compensation_ref(self, key: str, fn: Any) -> str | None:
        if fn is None:
            return None
        self.runtime._compensations[key] = fn  # this process can always run it
        qualname = getattr(fn, "__qualname__", "")
        module = getattr(fn, "__module__", None)
        # a lambda, closure, bound method or partial: another process cannot import it as is
        if not inspect.isfunction(fn) or not module or "<" in qualname:
            return "<local>"
        return f"{module}:{qualname}"

    def record_effect(self, entry: JournalEntry, durable: bool) -> None:
        self._journal[(entry.node, entry.name, entry.occurrence)] = entry
        self._batch.effects.append(entry)
        extra = {"source": entry.source} if entry.source else {}
        self._emit(f"effect.{entry.status.value}", entry.node, entry.attempt, name=entry.name,
                   occurrence=entry.occurrence, key=entry.key, **extra)
        if entry.status == EffectStatus.MOCKED:
            return  # nothing outside was touched: it may share the next group commit
        # STARTED is forced to disk before the call; outcomes are committed at once
        # (a process crash keeps them) so that recovery never repeats the effect.
        self._flush(durable=durable)

    def find_interrupt(self, node: str, slot: str, kind: InterruptKind) -> Interrupt | None:
        found = self._interrupts.get((node, slot, kind.value))
        if found is not None and kind != InterruptKind.USER and found.run_id != self.run.id:
            return None  # a continuation asks again: whoever continues the run decides afresh
        if found is not None and found.run_id != self.run.id and found.answer is not None:
            # an answer recorded by an earlier run (a continued run, or the run a replay re-executes)
            self._emit("interrupt.reused", node, interrupt_id=found.id, source_run_id=found.run_id, slot=slot)
        return found

    def raise_interrupt(self, scope: AttemptScope, kind: InterruptKind, payload: JSON, *, slot: str,
                        response_schema: JSON = None, response_ref: str | None = None) -> NoReturn:
        key = (scope.node, slot, kind.value)
        existing = self._interrupts.get(key)
        if existing is None or existing.run_id != self.run.id or existing.status != InterruptStatus.PENDING:
            existing = Interrupt(
                id=self.runtime.ids.new("int"), run_id=self.run.id, node=scope.node, slot=slot, kind=kind,
                payload={"value": payload, "response_ref": response_ref}, status=InterruptStatus.PENDING,
                created_at=self.now(), response_schema=response_schema,
            )
            self._interrupts[key] = existing
            self._batch.interrupts.append(existing)
            self._emit("interrupt.created", scope.node, scope.attempt, interrupt_id=existing.id,
                       kind=kind.value, slot=slot)
        scope.interrupt_id = existing.id
        raise NodeInterrupt(existing.id)

    def add_usage(self, scope: AttemptScope, tokens: int, cost: float) -> None:
        with self._usage_lock:  # sync nodes report from worker threads
            scope.tokens += tokens
            scope.cost += cost
            self._usage["tokens"] += tokens
            self._usage["cost"] += cost
        limits = self.run.limits
        over = []
        if limits.get("max_tokens") is not None and self._usage["tokens"] > limits["max_tokens"]:
            over.append(f"tokens {self._usage['tokens']} > max_tokens {limits['max_tokens']}")
        if limits.get("max_cost") is not None and self._usage["cost"] > limits["max_cost"]:
            over.append(f"cost {self._usage['cost']:g} > max_cost {limits['max_cost']:g}")
        if over:
            # the run ends even if node code catches this
            self._over_budget = "run budget exceeded: " + "; ".join(over)
            raise LimitExceeded(self._over_budget)




class _StopError(NodeError):
    """Why an in-flight attempt was stopped when its run failed (deadline, limits)."""

    def __init__(self, error: Mapping[str, JSON]):
        self.error_class = ErrorClass(error.get("class", ErrorClass.INTERNAL.value))
        super().__init__(error.get("message", "run stopped"))


def _to_json_bytes(value: Any, node: str) -> bytes:
    try:
        return to_json(value)
    except Exception as e:
        raise InvalidWrites(f"writes of node {node!r} are not JSON-serialisable: {e}") from None
