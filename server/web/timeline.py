"""What each checkpoint on the run page's timeline says happened at it.

A checkpoint names the nodes whose writes it folded; one taken when a node failed, was
skipped or asked a question folds none, yet something happened there: the node
statuses that changed since the checkpoint before it tell what.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runtime import Runtime
from runtime.core.records import Checkpoint, CheckpointSource, CheckpointSummary, EventType
from runtime.core.states import NodeStatus

#: how the timeline words a node status that changed at a checkpoint, in the order shown
WORDS: Mapping[NodeStatus, str] = {
    NodeStatus.FAILED: "failed",
    NodeStatus.INTERRUPTED: "asked",
    NodeStatus.CANCELLED: "cancelled",
    NodeStatus.RETRYING: "retrying",
    NodeStatus.SKIPPED: "skipped",
    NodeStatus.RUNNING: "running",
    NodeStatus.SUCCEEDED: "succeeded",
    NodeStatus.PENDING: "pending",
}
#: statuses not worth a word at a checkpoint that folded nodes
BESIDE_FOLDED = frozenset({NodeStatus.RUNNING, NodeStatus.PENDING})
#: instances named per status before "and N more" (a map's items change together)
NAMED = 3


def say(changed: Sequence[str], states: Mapping[str, NodeStatus], folded: Sequence[str] = ()) -> str:
    """``changed`` nodes (those not folded) grouped by their status, in words:
    ``failed: second · skipped: tool#1``; empty when there is nothing to say."""
    by_status: dict[NodeStatus, list[str]] = {}
    for node in changed:
        st = states.get(node)
        # beside folded nodes, what started or was added is the next step's news
        if st is not None and node not in folded and not (folded and st in BESIDE_FOLDED):
            by_status.setdefault(st, []).append(node)
    parts = []
    for st, word in WORDS.items():
        names = by_status.get(st)
        if names:
            more = f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
            parts.append(f"{word}: {', '.join(names[:NAMED])}{more}")
    return " · ".join(parts)


def happened(rt: Runtime, run_id: str, window: Sequence[CheckpointSummary]) -> dict[int, str]:
    """For each checkpoint of ``window``, by seq, what changed at it besides the nodes it
    folded (absent: nothing, or nothing is known); one that folded none and changed nothing
    says so. Reads the window's checkpoints once."""
    if not window:
        return {}
    first, last = window[0].seq, window[-1].seq
    full: list[Checkpoint] = rt.store.checkpoints(run_id, first, last - first + 1)
    out = {}
    for cp in full:
        said = besides_folded(rt, cp)
        if said is not None:
            out[cp.seq] = said
    return out


def besides_folded(rt: Runtime, cp: Checkpoint) -> str | None:
    """What changed at ``cp`` besides the nodes it folded, in words (None: nothing, or
    nothing is known); a fork's patch checkpoint names the fields its patch edited."""
    if cp.changed is None:
        return None
    said = say(cp.changed, cp.node_states, cp.nodes)
    if not said and cp.source == CheckpointSource.PATCH:
        said = patched(rt, cp.run_id)
    if said or not cp.nodes:
        return said or "no node changed"
    return None


def patched_fields(rt: Runtime, run_id: str) -> tuple[str, ...]:
    """The fields a fork's patch edited (its event comes among the fork's first)."""
    for ev in rt.store.events(run_id, 0, 20):
        if ev.type == EventType.STATE_PATCHED:
            patch = ev.data.get("patch")
            return tuple(sorted(patch)) if isinstance(patch, Mapping) else ()
    return ()


def patched(rt: Runtime, run_id: str) -> str:
    """What a fork's patch checkpoint changed, in words."""
    fields = patched_fields(rt, run_id)
    return "patched: " + ", ".join(fields) if fields else "state patched"


def words(rt: Runtime, cp: Checkpoint) -> str:
    """A checkpoint in the words its timeline entry has, for a list of choices: its source,
    the nodes it folded, and what else changed at it (``patch patched: sources``)."""
    said = besides_folded(rt, cp)
    what = " · ".join(part for part in (", ".join(cp.nodes), said or "") if part)
    return f"{cp.source} {what or '–'}"
