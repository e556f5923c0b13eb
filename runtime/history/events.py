"""A run's trace as readers see it: each ``node.succeed`` event with the writes its
attempt recorded, under ``data["writes"]``, as a stream shows it.

The trace stores a node's writes once, as its pending write; an event read back
alone would say that a node succeeded, not what it wrote. Writes are read for the
events' own node instances only, so a page of the trace costs what that page did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..core.jsonvalues import JSON
from ..core.records import EventType, PendingWrite, TraceEvent, WriteKind
from ..store.base import CheckpointStore


def succeeded_writes(store: CheckpointStore, run_id: str, events: Sequence[TraceEvent], *,
                     every_node: bool = False) -> list[PendingWrite]:
    """The writes of the attempts whose ``node.succeed`` is among ``events``, read by node
    (``every_node``: in one read of all the run's, cheaper when ``events`` are most of them)."""
    done = {(e.node, e.attempt) for e in events if e.type == EventType.NODE_SUCCEED and e.node is not None}
    if not done:
        return []
    nodes = None if every_node else {n for n, _ in done}
    return [w for w in store.pending_writes(run_id, nodes=nodes)
            if w.kind == WriteKind.WRITES and (w.node, w.attempt) in done]


def with_writes(store: CheckpointStore, run_id: str, events: Sequence[TraceEvent]) -> list[TraceEvent]:
    """``events`` with each ``node.succeed`` event's writes in its data (``merge_stream``
    attaches them the same way to what a stream yields)."""
    outputs: dict[tuple[str | None, int | None], JSON] = {
        (w.node, w.attempt): w.value for w in succeeded_writes(store, run_id, events)}
    return [replace(e, data={**e.data, "writes": outputs[(e.node, e.attempt)]})
            if e.type == EventType.NODE_SUCCEED and (e.node, e.attempt) in outputs else e for e in events]
