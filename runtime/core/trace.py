"""Reading the trace: node states rebuilt from events alone.

Used to check that trace and checkpoints agree (every checkpoint's node states
equal the fold of the events up to its ``event_seq``) and by the debugger.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from .records import TraceEvent
from .states import NodeEvent, NodeStatus, next_node_status


def node_states_from_events(nodes: Sequence[str], events: Iterable[TraceEvent],
                            upto_seq: int | None = None) -> dict[str, NodeStatus]:
    """Replay node events through the transition table, starting from the
    statuses a run inherited when it was created."""
    states = {n: NodeStatus.PENDING for n in nodes}
    for ev in events:
        if upto_seq is not None and ev.seq > upto_seq:
            break
        if ev.type == "run.created":
            for n, s in (ev.data.get("inherited") or {}).items():
                states[n] = NodeStatus(s)
        elif ev.type.startswith("node.") and ev.node is not None:
            states[ev.node] = next_node_status(states[ev.node], NodeEvent(ev.type[5:]))
    return states


def states_after(statuses: Mapping[str, NodeStatus], events: Iterable[TraceEvent],
                 after_seq: int) -> dict[str, NodeStatus]:
    """``statuses`` (a checkpoint's, which reflects the events up to ``after_seq``) moved on by
    the node events recorded after it: what started, or waits to be retried, before the
    next checkpoint (one is taken when a node settles). A node new since is pending first."""
    states = dict(statuses)
    for ev in events:
        if ev.seq > after_seq and ev.node is not None and ev.type.startswith("node."):
            states[ev.node] = next_node_status(states.get(ev.node, NodeStatus.PENDING), NodeEvent(ev.type[5:]))
    return states


def gaps(events: Sequence[TraceEvent]) -> list[int]:
    """Missing sequence numbers (an empty list for a healthy trace)."""
    seen = {e.seq for e in events}
    top = max(seen, default=0)
    return [s for s in range(1, top + 1) if s not in seen]
