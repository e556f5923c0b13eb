"""Run and node state machines, and the rules that pick between them.

Everything that decides which status follows which lives in this module: the two
transition tables, the priority between reasons a run stops, and which path
``resume`` takes from each run status. A (status, event) pair missing from a
transition table is illegal and raises ``IllegalTransition``.
"""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType

from .errors import IllegalTransition


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    INTERRUPTED = "interrupted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class RunEvent(StrEnum):
    CLAIM = "claim"            # a queued run starts executing
    INTERRUPT = "interrupt"    # a node asked a question; the run pauses
    RESUME = "resume"          # answers given; the same run continues
    QUEUE = "queue"            # answers given; the same run waits for a worker to go on with it
    RECOVER = "recover"        # the owning process died; another takes the run over
    SUCCEED = "succeed"
    FAIL = "fail"
    CANCEL = "cancel"


class NodeStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    RETRYING = "retrying"      # failed an attempt, waiting for its backoff
    INTERRUPTED = "interrupted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


class NodeEvent(StrEnum):
    START = "start"
    SUCCEED = "succeed"
    FAIL = "fail"
    RETRY = "retry"            # attempt failed with a retryable class; back off
    INTERRUPT = "interrupt"
    RESUME = "resume"          # its interrupt was answered; it will run again
    SKIP = "skip"
    CANCEL = "cancel"
    LOST = "lost"              # its process died mid-attempt; it will run again


R, N = RunStatus, NodeStatus

RUN_TRANSITIONS: MappingProxyType[RunStatus, dict[RunEvent, RunStatus]] = MappingProxyType({
    R.QUEUED: {RunEvent.CLAIM: R.RUNNING, RunEvent.CANCEL: R.CANCELLED},
    R.RUNNING: {
        RunEvent.INTERRUPT: R.INTERRUPTED,
        RunEvent.SUCCEED: R.SUCCEEDED,
        RunEvent.FAIL: R.FAILED,
        RunEvent.CANCEL: R.CANCELLED,
        RunEvent.RECOVER: R.RUNNING,
    },
    R.INTERRUPTED: {RunEvent.RESUME: R.RUNNING, RunEvent.QUEUE: R.QUEUED, RunEvent.CANCEL: R.CANCELLED},
    # Terminal: no way out. Continuing work after these is a new run in the thread.
    R.SUCCEEDED: {},
    R.FAILED: {},
    R.CANCELLED: {},
})

NODE_TRANSITIONS: MappingProxyType[NodeStatus, dict[NodeEvent, NodeStatus]] = MappingProxyType({
    N.PENDING: {NodeEvent.START: N.RUNNING, NodeEvent.SKIP: N.SKIPPED},
    N.RUNNING: {
        NodeEvent.SUCCEED: N.SUCCEEDED,
        NodeEvent.FAIL: N.FAILED,
        NodeEvent.RETRY: N.RETRYING,
        NodeEvent.INTERRUPT: N.INTERRUPTED,
        NodeEvent.CANCEL: N.CANCELLED,
        NodeEvent.LOST: N.PENDING,
    },
    N.RETRYING: {
        NodeEvent.START: N.RUNNING,
        NodeEvent.CANCEL: N.CANCELLED,
        # A run that fails elsewhere stops waiting; the node's last error stands.
        NodeEvent.FAIL: N.FAILED,
        NodeEvent.LOST: N.PENDING,
    },
    N.INTERRUPTED: {NodeEvent.RESUME: N.PENDING, NodeEvent.CANCEL: N.CANCELLED},
    N.SUCCEEDED: {},
    N.FAILED: {},
    N.SKIPPED: {},
    N.CANCELLED: {},
})

TERMINAL_RUN = frozenset(s for s, out in RUN_TRANSITIONS.items() if not out)
TERMINAL_NODE = frozenset(s for s, out in NODE_TRANSITIONS.items() if not out)
#: node statuses that count as "finished" for the dependency rule
FINISHED_NODE = frozenset({N.SUCCEEDED, N.SKIPPED, N.FAILED, N.CANCELLED})
#: node statuses that hold a concurrency slot or will ask for one again in this run
ACTIVE_NODE = frozenset({N.RUNNING, N.RETRYING})


def next_run_status(status: RunStatus, event: RunEvent) -> RunStatus:
    try:
        return RUN_TRANSITIONS[status][event]
    except KeyError:
        raise IllegalTransition("run", status, event) from None


def next_node_status(status: NodeStatus, event: NodeEvent) -> NodeStatus:
    try:
        return NODE_TRANSITIONS[status][event]
    except KeyError:
        raise IllegalTransition("node", status, event) from None


#: a node whose work is done: a run succeeds when every node is; a run branching off
#: a checkpoint (fork, replay, continuation) inherits these and runs the rest again
COMPLETED_NODE = frozenset({N.SUCCEEDED, N.SKIPPED})
#: node statuses a checkpoint must capture (the node's outcome is known)
SETTLED_NODE = frozenset({N.SUCCEEDED, N.FAILED, N.SKIPPED, N.INTERRUPTED, N.CANCELLED})


class StopKind(StrEnum):
    """Why a running run is winding down (it ends once nothing is in flight)."""

    INTERRUPT = "interrupt"    # a node asked a question: pause
    FAIL = "fail"              # a node failed for good, or a run limit was hit
    CANCEL = "cancel"          # someone asked to cancel


#: a stronger reason replaces a weaker one; an equal one never replaces the first
#: (the first failure is the one reported). Cancel is explicit and wins over all.
STOP_PRIORITY: MappingProxyType[StopKind, int] = MappingProxyType({
    StopKind.INTERRUPT: 0, StopKind.FAIL: 1, StopKind.CANCEL: 2})
#: how a run that stops for this reason ends (a pause is not an end)
STOP_RUN_EVENT: MappingProxyType[StopKind, RunEvent] = MappingProxyType({
    StopKind.INTERRUPT: RunEvent.INTERRUPT, StopKind.FAIL: RunEvent.FAIL, StopKind.CANCEL: RunEvent.CANCEL})
#: what happens to nodes still waiting (backing off or paused) when the run stops
STOP_NODE_EVENT: MappingProxyType[StopKind, dict[NodeStatus, NodeEvent]] = MappingProxyType({
    StopKind.INTERRUPT: {},
    StopKind.FAIL: {N.RETRYING: NodeEvent.FAIL},
    StopKind.CANCEL: {N.RETRYING: NodeEvent.CANCEL, N.INTERRUPTED: NodeEvent.CANCEL},
})


def supersedes(new: StopKind, current: StopKind | None) -> bool:
    """Whether a run stopping for ``current`` should stop for ``new`` instead."""
    return current is None or STOP_PRIORITY[new] > STOP_PRIORITY[current]


class ResumePath(StrEnum):
    """What ``Runtime.resume`` does with a run, decided by its status alone."""

    CLAIM = "claim"            # queued: start executing it here
    ANSWER = "answer"          # interrupted: validate the answers, continue the same run
    RECOVER = "recover"        # running, but its process is gone: take it over
    CONTINUE = "continue"      # failed or cancelled: a new continuation run in the thread
    REFUSE = "refuse"          # succeeded: a succeeded run never changes


RESUME_PATHS: MappingProxyType[RunStatus, ResumePath] = MappingProxyType({
    R.QUEUED: ResumePath.CLAIM,
    R.INTERRUPTED: ResumePath.ANSWER,
    R.RUNNING: ResumePath.RECOVER,
    R.FAILED: ResumePath.CONTINUE,
    R.CANCELLED: ResumePath.CONTINUE,
    R.SUCCEEDED: ResumePath.REFUSE,
})
