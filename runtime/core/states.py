"""Run and node state machines.

Everything that decides which status follows which lives in the two tables below.
A (status, event) pair missing from a table is illegal and raises ``IllegalTransition``;
nothing else in the code base compares statuses to decide a transition.
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
    R.INTERRUPTED: {RunEvent.RESUME: R.RUNNING, RunEvent.CANCEL: R.CANCELLED},
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
