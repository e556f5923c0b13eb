"""Read models built from the store: a checkpoint with its context, a replay's report.

These gather records; the decisions (what runs next, comparison) live in the pure
modules ``lookahead`` and ``report``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..core.errors import GraphError, InvalidRequest, NotFound
from ..core.jsonvalues import JSON
from ..core.records import (
    Checkpoint,
    EffectStatus,
    EventType,
    InterruptKind,
    InterruptStatus,
    JournalEntry,
    PendingWrite,
    Run,
    WriteKind,
)
from ..core.states import NodeStatus
from ..engine import lookahead
from ..engine.instances import Instances
from ..engine.deps import EngineDeps
from ..graph import ExecutableGraph
from ..graph.instances import base_node
from ..history.creation import branch_statuses
from ..history.lineage import continued_chain, head, writes_lineage
from ..history.state import base_state, state_json
from .branches import effective_base
from .report import Recording, ReplayReport, compare, effective_effects


@dataclass(frozen=True, slots=True)
class CheckpointView:
    checkpoint: Checkpoint
    state: Mapping[str, JSON]
    #: node outcomes recorded while this checkpoint was the run's head (folded into the next one)
    pending_writes: list[PendingWrite]
    #: what a branch from here (a fork without a patch, a continuation, a resume) starts first,
    #: canonical order: the scheduler's decision on this checkpoint's statuses and state, with
    #: ``when=`` asked, skips propagated, loops grown and maps' items created; nodes in flight
    #: when it was taken have no outcome here and run again. Empty when a loop here needs an
    #: iteration past its bound (the branch fails at once). None when the run's code cannot be
    #: found here: ``when=`` cannot be asked, so what would run is not known
    ready: list[str] | None
    #: nodes paused on a question here
    interrupted: list[str]

    def to_json(self) -> dict[str, JSON]:
        cp = self.checkpoint
        return {"id": cp.id, "run_id": cp.run_id, "seq": cp.seq, "parent_id": cp.parent_id,
                "source": cp.source, "nodes": list(cp.nodes), "created_at": cp.created_at,
                "node_states": {n: s.value for n, s in cp.node_states.items()}, "state": dict(self.state),
                "pending_writes": [{"node": w.node, "attempt": w.attempt, "kind": w.kind.value, "value": w.value}
                                   for w in self.pending_writes],
                "ready": self.ready, "interrupted": self.interrupted}


def checkpoint_view(deps: EngineDeps, cp: Checkpoint) -> CheckpointView:
    writes = deps.store.pending_writes(cp.run_id, cp.seq)
    state = state_json(deps.store, deps.graphs, cp)
    try:
        # the code the run ran with here first: a branch given code this Runtime never registered
        ready = ready_next(deps, deps.graphs.run_graph(deps.store.get_run(cp.run_id)), cp, state)
    except (NotFound, InvalidRequest, GraphError):  # the graph's code is not importable here
        ready = None
    interrupted = [n for n, s in cp.node_states.items() if s == NodeStatus.INTERRUPTED]
    return CheckpointView(cp, state, writes, ready, interrupted)


def ready_next(deps: EngineDeps, graph: ExecutableGraph, cp: Checkpoint, state: Mapping[str, JSON]) -> list[str]:
    """What a branch from ``cp`` (a fork without a patch, a continuation, a resume) starts
    first, given the state at ``cp``: see ``lookahead.first_started``. Its unfinished
    nodes run again, those in flight when it was taken included."""
    statuses = branch_statuses(cp.node_states)
    inst = Instances(graph, statuses)

    def load() -> tuple[Mapping[str, JSON], Mapping[str, JSON]]:
        # what a branch's nodes fold: its base and its lineage's writes (a patched fork's
        # first checkpoint branches where that fork branched)
        run, _ = effective_base(deps.store, cp)
        return base_state(deps.store, deps.graphs, run), deps.store.node_writes(writes_lineage(deps.store, run))

    return lookahead.first_started(inst, statuses, lookahead.BranchInputs(inst, statuses, state, load))


def build_report(deps: EngineDeps, replay: Run) -> ReplayReport:
    if not replay.options.get("compare"):   # else it is compared with itself: "same", always
        raise NotFound(f"run {replay.id} is not a replay: it has no divergence report")
    store = deps.store
    source_info = replay.options.get("source") or {}
    source = store.get_run(source_info.get("run_id") or replay.parent_run_id or replay.id)
    recorded = _recording(deps, source, continued_chain(store, source))
    replayed = _recording(deps, replay, continued_chain(store, replay))
    first = store.find_checkpoint(replay.id, 0)
    assert first is not None
    inherited = frozenset(n for n, s in first.node_states.items() if s != NodeStatus.PENDING)
    reused: dict[str, list[str]] = {}
    for ev in store.events(replay.id):
        if ev.type == EventType.INTERRUPT_REUSED and ev.node:
            reused.setdefault(ev.node, []).append(str(ev.data.get("interrupt_id")))
    # the code the replay ran with here, when it was given to this Runtime and never registered;
    # where it cannot be imported, its stored description: the report is recorded data
    graph = deps.graphs.order_for(replay)
    # every instance either side has of the replayed graph's nodes (a loop's iterations,
    # a map's items): one report each, in canonical order
    named = [n for n in (*replayed.statuses, *recorded.statuses) if base_node(n) in graph.index]
    order = graph.canonical(list(dict.fromkeys([*graph.order, *named])))
    nodes = compare(order, recorded, replayed, inherited=inherited, reused=reused)
    return ReplayReport(run_id=replay.id, source_run_id=source.id,
                        base_checkpoint_id=replay.base_checkpoint_id or first.id, status=replay.status.value,
                        nodes=tuple(nodes), graph_version=replay.graph_version,
                        recorded_graph_version=source.graph_version, run=replay)


def _recording(deps: EngineDeps, run: Run, lineage: list[str]) -> Recording:
    """What a run and the runs it continued recorded, per node."""
    store = deps.store
    statuses = dict(head(store, run.id).node_states)
    writes: dict[str, JSON] = {}
    errors: dict[str, str] = {}
    for rid in reversed(lineage):  # oldest first: a later run's outcome replaces an earlier one
        for w in store.pending_writes(rid):
            if w.kind == WriteKind.WRITES:
                writes[w.node] = w.value
                errors.pop(w.node, None)   # it failed in a run that a continuation finished
            elif w.kind == WriteKind.ERROR:
                errors[w.node] = str((w.value or {}).get("message", w.value))
    entries = store.journal(list(reversed(lineage)))
    effects = effective_effects(entries)
    for intr in store.interrupts(run.id, InterruptStatus.PENDING):
        if intr.kind == InterruptKind.UNRECORDED:  # asked for, not yet served: still a request to compare
            value = intr.value if isinstance(intr.value, dict) else {}
            effects.setdefault(intr.node, []).append(JournalEntry(
                run.id, intr.node, value.get("effect", "?"), int(value.get("occurrence", 0)), 0, "",
                EffectStatus.STARTED, value.get("request")))
    return Recording(statuses, writes, errors, effects)
