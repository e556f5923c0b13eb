"""Errors raised by Shadow Harness, and the classes that decide recovery.

Hierarchy (what a caller catches)::

    HarnessError                      every error the library raises on purpose
    ├── GraphError                    an invalid graph or plan; ``.problems`` lists all of them
    ├── IllegalTransition             a state-machine table has no entry for (status, event)
    ├── NotFound                      no run / checkpoint / interrupt with that id
    ├── InvalidRequest                a call that does not fit the run's current state
    │   └── InvalidAnswer             a resume answer that fails validation (run unchanged)
    ├── LeaseLost                     this process no longer owns the run (fencing token moved on)
    ├── EndNotRecorded                the store kept refusing to record a run's end or pause; resume it
    └── NodeError                     raised *by node code* to classify its own failure
        ├── TransientError            retry with backoff
        ├── InvalidInputError         fail fast
        ├── PermissionDeniedError     fail fast
        └── SemanticError             the node ran but its answer is wrong; fail fast

Control-flow signals (``NodeInterrupt``, ``AttemptCancelled``) are not errors: they
stop a node attempt and are never shown to users as failures.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "AttemptCancelled",
    "ConditionFailed",
    "DeadlineExceeded",
    "EndNotRecorded",
    "ErrorClass",
    "GraphError",
    "HarnessError",
    "IllegalTransition",
    "InvalidAnswer",
    "InvalidInputError",
    "InvalidRequest",
    "InvalidWrites",
    "LeaseLost",
    "LimitExceeded",
    "NodeError",
    "NodeInterrupt",
    "NotFound",
    "PermissionDeniedError",
    "Problem",
    "SemanticError",
    "TransientError",
    "WriteConflict",
    "classify",
]


class ErrorClass(StrEnum):
    """What kind of failure happened; the class decides the recovery."""

    TRANSIENT = "transient"
    INVALID_INPUT = "invalid_input"
    PERMISSION = "permission"
    SEMANTIC = "semantic"
    DEADLINE = "deadline"
    CANCELLED = "cancelled"
    LIMIT_EXCEEDED = "limit_exceeded"
    IN_DOUBT_EFFECT = "in_doubt_effect"
    UNRECORDED_EFFECT = "unrecorded_effect"
    INTERNAL = "internal"


class HarnessError(Exception):
    """Base of every error Shadow Harness raises on purpose."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a graph or plan, with where it is."""

    location: str
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.message}"


class GraphError(HarnessError):
    """An invalid graph or plan. Lists every problem found, not just the first."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid graph ({len(self.problems)} problem(s)):\n{lines}")


class IllegalTransition(HarnessError):
    def __init__(self, machine: str, status: str, event: str):
        self.machine, self.status, self.event = machine, status, event
        super().__init__(f"illegal {machine} transition: {event!r} from {status!r}")


class NotFound(HarnessError):
    pass


class GraphNotRegistered(NotFound):
    """A run's graph version whose code this process has neither registered nor can import.
    ``missing`` says which, without the advice for Python callers (the CLI and the debugger
    give their own)."""

    def __init__(self, graph_name: str, version: str):
        self.missing = f"graph {graph_name!r} version {version} is not registered with this Runtime"
        super().__init__(f"{self.missing}; pass it in Runtime(graphs=[...])")


class InvalidRequest(HarnessError):
    pass


class InvalidAnswer(InvalidRequest):
    """A resume answer that does not validate; the run stays as it was."""


class LeaseLost(HarnessError):
    """Another process took over the run; this one must stop writing."""


class EndNotRecorded(HarnessError):
    """The store kept refusing the commit that ends or pauses a run (the database locked
    or unreachable, the disk full). The store still shows the run RUNNING: ``resume``
    finishes recording it, serving what it already did (effects are not repeated).
    ``released``: whether its lease was given up, so that any process may resume it now
    rather than once the lease expires."""

    def __init__(self, run_id: str, cause: BaseException, released: bool):
        self.run_id, self.released = run_id, released
        # released: the store's row was read, RUNNING; otherwise the end may have gone in after all
        state = "it is still running in the store and can be resumed now" if released else \
            "it may still be running in the store, and can then be resumed once its lease expires"
        super().__init__(f"run {run_id}: the store refused to record its end ({type(cause).__name__}: {cause}); "
                         f"{state} "
                         f"(rt.resume({run_id!r}) or `harness resume {run_id}`), which ends it without "
                         f"repeating its effects")


class NodeError(HarnessError):
    """Raise a subclass from node code to say how the failure should be handled."""

    error_class: ErrorClass = ErrorClass.INTERNAL


class TransientError(NodeError):
    error_class = ErrorClass.TRANSIENT


class StoreUnreachable(TransientError):
    """The store could not record what must be on disk before a node goes on (an effect's start)."""


class ConditionFailed(NodeError):
    """A node's ``when=`` raised: the node fails before it starts, saying so, with the class
    of what the condition raised."""

    def __init__(self, node: str, error: BaseException):
        super().__init__(f"when= of node {node!r} raised {type(error).__name__}: {error}")
        self.error_class = classify(error)


class InvalidInputError(NodeError):
    error_class = ErrorClass.INVALID_INPUT


class PermissionDeniedError(NodeError):
    error_class = ErrorClass.PERMISSION


class SemanticError(NodeError):
    error_class = ErrorClass.SEMANTIC


class LimitExceeded(NodeError):
    error_class = ErrorClass.LIMIT_EXCEEDED


class DeadlineExceeded(NodeError):
    error_class = ErrorClass.DEADLINE


class WriteConflict(NodeError):
    """Two nodes with no order between them wrote the same last-value field."""

    error_class = ErrorClass.INVALID_INPUT

    def __init__(self, field: str, first: str, second: str):
        self.field, self.nodes = field, tuple(sorted((first, second)))
        super().__init__(
            f"nodes {self.nodes[0]!r} and {self.nodes[1]!r} both write last-value field "
            f"{field!r} with no order between them; order them with after= or give the "
            f"field a reducer"
        )


class InvalidWrites(NodeError):
    error_class = ErrorClass.INVALID_INPUT


class NodeInterrupt(BaseException):
    """Control-flow signal: the node asked a person (or the runtime) a question.

    A ``BaseException`` so that node code's ``except Exception`` does not swallow it."""

    def __init__(self, interrupt_id: str):
        self.interrupt_id = interrupt_id
        super().__init__(interrupt_id)


class AttemptCancelled(BaseException):
    """Control-flow signal: the attempt was abandoned (run cancelled, timed out)."""


def classify(exc: BaseException) -> ErrorClass:
    """Map an exception raised inside a node to its error class."""
    if isinstance(exc, NodeError):
        return exc.error_class
    if isinstance(exc, (asyncio.CancelledError, AttemptCancelled)):
        return ErrorClass.CANCELLED
    if isinstance(exc, TimeoutError):
        return ErrorClass.DEADLINE
    if isinstance(exc, PermissionError):
        return ErrorClass.PERMISSION
    if isinstance(exc, (ConnectionError, OSError)):
        return ErrorClass.TRANSIENT
    if isinstance(exc, (ValueError, KeyError, TypeError)):
        return ErrorClass.INVALID_INPUT
    return ErrorClass.INTERNAL
