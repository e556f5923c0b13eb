"""How a run stops: the reason it is winding down, and recording its end.

The priority between reasons and what each does to waiting nodes are tables in
``core.states``; this module applies them once nothing is in flight any more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..core.errors import ErrorClass, NodeError
from ..core.jsonvalues import JSON
from ..core.states import COMPLETED_NODE, STOP_NODE_EVENT, NodeEvent, NodeStatus, RunEvent, StopKind
from ..store.base import CheckpointStore
from .host import RunHost
from .recorder import Recorder


@dataclass(frozen=True, slots=True)
class Stop:
    """Why the run is winding down, and the error it will end with."""

    kind: StopKind
    error: Mapping[str, JSON]


def stop(kind: StopKind, cls: ErrorClass, message: str) -> Stop:
    return Stop(kind, {"class": cls.value, "message": message})


class StopError(NodeError):
    """Why an in-flight attempt was stopped when its run failed (deadline, limits)."""

    def __init__(self, error: Mapping[str, JSON]):
        self.error_class = ErrorClass(error.get("class", ErrorClass.INTERNAL.value))
        super().__init__(error.get("message", "run stopped"))


def stop_event(kind: StopKind, status: NodeStatus) -> NodeEvent | None:
    """What a run stopping for ``kind`` does to a node with nothing in flight in ``status``."""
    event = STOP_NODE_EVENT[kind].get(status)
    if event is None and status == NodeStatus.RUNNING and kind != StopKind.INTERRUPT:
        # a map's group record runs no attempt of its own: it ends with the run
        event = NodeEvent.FAIL if kind == StopKind.FAIL else NodeEvent.CANCEL
    return event


def finish_run(rec: Recorder, host: RunHost, store: CheckpointStore, why: Stop | None) -> None:
    """Record the end (or the pause) of a run with nothing in flight."""
    statuses = rec.statuses
    interrupted = NodeStatus.INTERRUPTED in statuses.values()   # unchanged below unless the run stops
    if (why is None or why.kind == StopKind.INTERRUPT) and store.durable and interrupted:
        # asked to cancel while it was running: do not leave it paused instead (a run that
        # would not pause ends as it is, so the store is not asked)
        reason = store.cancel_request(rec.run.id)
        if reason is not None:
            why = stop(StopKind.CANCEL, ErrorClass.CANCELLED, reason)
    kind = why.kind if why else None
    if kind is not None:
        for node in list(rec.inst.order):  # nodes still waiting end with the run, or stay paused
            event = stop_event(kind, statuses[node])
            if event is not None:
                rec.node(node, event)
    paused = kind == StopKind.INTERRUPT or (kind is None and interrupted)
    if not paused:
        host.close_pending()
    rec.checkpoint_if_dirty()
    error = dict(why.error) if why and kind != StopKind.INTERRUPT else None
    if kind == StopKind.CANCEL:
        rec.run_event(RunEvent.CANCEL, reason=error["message"] if error else "")
    elif kind == StopKind.FAIL:
        rec.run_event(RunEvent.FAIL, **(error or {}))
    elif paused:
        rec.run_event(RunEvent.INTERRUPT)
    elif all(s in COMPLETED_NODE for s in statuses.values()):
        rec.run_event(RunEvent.SUCCEED)
    else:
        stuck = [n for n, s in statuses.items() if s not in COMPLETED_NODE]
        error = {"class": ErrorClass.INTERNAL.value, "message": f"nodes can never run: {stuck}"}
        rec.run_event(RunEvent.FAIL, **error)
    rec.final_checkpoint()
    rec.run = rec.run.evolve(error=error, lease_owner=None, lease_expires_at=None)
