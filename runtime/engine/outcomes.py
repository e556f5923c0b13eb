"""Recording how a node attempt ended: its writes, a pause, a cancel, or a failure
and what the retry policy decides about it.

Mixed into ``RunLoop`` (see ``growth`` for the same arrangement).
"""

from __future__ import annotations

from ..core.errors import ErrorClass, NodeError, classify
from ..core.records import WriteKind
from ..core.states import NodeEvent, NodeStatus, StopKind, supersedes
from .decisions import on_failure
from .executor import Outcome
from .scope import AttemptScope
from .parts import LoopPart
from .stopping import Stop

N = NodeStatus


class Outcomes(LoopPart):
    _failures: dict[str, int]

    def _record_success(self, scope: AttemptScope, outcome: Outcome) -> None:
        node = scope.node
        if scope.calls is not None and (never := scope.never_awaited()):
            # its effect never ran, or its question was never asked: not a success to record
            self._record_failure(scope, NodeError(
                f"node {node!r} returned without awaiting {', '.join(never)}: in an async def node, "
                f"write `await ctx.effect(...)` and `await ctx.interrupt(...)`"))
            return
        try:
            writes, size = self.state.check_writes(node, outcome.value)
        except NodeError as e:
            self._record_failure(scope, e)
            return
        self.rec.pending(scope, WriteKind.WRITES, writes)
        self.rec.attempt(scope, N.SUCCEEDED)
        self.state.add(node, writes)
        self.rec.folded(node, size)
        self._node(node, NodeEvent.SUCCEED, attempt=scope.attempt)

    def _record_interrupt(self, scope: AttemptScope, outcome: Outcome) -> None:
        self.rec.pending(scope, WriteKind.INTERRUPT, {"interrupt_id": outcome.interrupt_id})
        self.rec.attempt(scope, N.INTERRUPTED, decision="paused for an answer")
        self._node(scope.node, NodeEvent.INTERRUPT, attempt=scope.attempt, interrupt_id=outcome.interrupt_id)
        if self.host.answered(outcome.interrupt_id):
            # answered while the attempt was still ending (``TakeOver.deliver``): it goes on at once
            self._node(scope.node, NodeEvent.RESUME, interrupt_id=outcome.interrupt_id)
            self._candidates.add(scope.node)
        elif supersedes(StopKind.INTERRUPT, self._stop.kind if self._stop else None):
            self._stop = Stop(StopKind.INTERRUPT, {})

    def _record_cancelled(self, scope: AttemptScope) -> None:
        reason = self._stop.error["message"] if self._stop else "cancelled"
        self.rec.attempt(scope, N.CANCELLED, error_class=ErrorClass.CANCELLED, error=reason, decision="cancelled")
        self._node(scope.node, NodeEvent.CANCEL, attempt=scope.attempt, reason=reason)

    def _record_failure(self, scope: AttemptScope, error: BaseException) -> None:
        node = scope.node
        cls = classify(error)
        message = f"{type(error).__name__}: {error}"
        failures = self._failures.get(node, 0) + 1
        self._failures[node] = failures
        stopping = self._stop.kind if self._stop else None
        if stopping == StopKind.CANCEL and cls == ErrorClass.DEADLINE:
            self._record_cancelled(scope)
            return
        decision = on_failure(self.inst.spec(node).retry, cls, failures, stopping=stopping,
                              deadline=self.run.limits.get("deadline_at"), now=self.env.now())
        if decision.retry:
            self._retry_at[node] = self.env.now() + decision.delay
            self._candidates.add(node)
            self.rec.attempt(scope, N.FAILED, error_class=cls, error=message, decision=decision.reason)
            self._node(node, NodeEvent.RETRY, attempt=scope.attempt, error_class=cls.value,
                       error=message, retry_in=decision.delay)
            return
        self.rec.pending(scope, WriteKind.ERROR, {"class": cls.value, "message": message})
        self.rec.attempt(scope, N.FAILED, error_class=cls, error=message, decision=decision.reason)
        self._node(node, NodeEvent.FAIL, attempt=scope.attempt, error_class=cls.value, error=message)
        if supersedes(StopKind.FAIL, stopping):
            budget = self.host.budget_error() if cls == ErrorClass.LIMIT_EXCEEDED else None
            self._stop = Stop(StopKind.FAIL, budget or {"class": cls.value, "message": message, "node": node})

    def _fail_before_start(self, node: str, error: BaseException) -> None:
        """A failure found while preparing a node (its ``when`` raised, bad state)."""
        attempt = self._attempt_no.get(node, 0) + 1
        self._attempt_no[node] = attempt
        scope = AttemptScope(run_id=self.run_id, node=node, attempt=attempt, deadline=None,
                             clock=self.env.clock.time, started_at=self.env.now())
        self._node(node, NodeEvent.START, attempt=attempt)
        self._failures[node] = self.inst.spec(node).retry.max_attempts  # never retried
        self._record_failure(scope, error)
