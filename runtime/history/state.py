"""The state at a checkpoint.

Checkpoints store node statuses as deltas and the full state only on periodic
snapshots, so the state at a delta checkpoint is rebuilt: the nearest earlier
snapshot (or the run's base state) folded with the writes of the nodes completed
since, in the graph's canonical order — never in completion order.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

from ..core.errors import GraphError, InvalidRequest, NotFound
from ..core.jsonvalues import JSON
from ..core.records import Checkpoint, Run
from ..core.states import NodeStatus
from ..graph import AnyState, ExecutableGraph, FoldShape
from ..graph.reducers import Reducer, fold
from ..store.base import CheckpointStore
from .lineage import origin, writes_lineage
from .registry import GraphRegistry


def state_json(store: CheckpointStore, graphs: GraphRegistry, cp: Checkpoint) -> dict[str, JSON]:
    """The state at ``cp``: a snapshot (or a state this process remembers), else the
    nearest snapshot before it folded with the writes since, in canonical order. A
    conversation turn starts from the state its previous turn ended with, so the walk
    may cross turns (iteratively: a thread may have thousands of turns)."""
    #: folds still to apply, newest first: a run's completed nodes, or a turn's input (None)
    pending: list[tuple[Run, ExecutableGraph | FoldShape, list[str] | None]] = []
    while True:
        found = graphs.known_state(cp.id)
        if found is None and cp.snapshot is not None:
            found = cp.snapshot
        if found is not None:
            state = dict(found)
            break
        run = store.get_run(cp.run_id)
        graph = graphs.shape_for(run)
        done = graph.canonical([n for n, st in cp.node_states.items() if st == NodeStatus.SUCCEEDED])
        prefix = _snapshot_prefix(store, graph, run, cp, done)
        if prefix is not None:
            base, extra = prefix
            pending.append((run, graph, extra))
            state = dict(base)
            break
        pending.append((run, graph, done))
        first = origin(store, run)
        if not first.options.get("turn") or first.base_checkpoint_id is None:
            state = dict(first.input)
            break
        pending.append((first, graph, None))   # the turn's input goes through the reducers
        cp = store.get_checkpoint(first.base_checkpoint_id)
    for run, graph, nodes in reversed(pending):
        if nodes is None:
            state = turn_start(state, run, graph.reducers)
            continue
        writes = store.node_writes(writes_lineage(store, run))
        # nodes a patched fork inherited have no writes: their writes are in its input
        state = fold(state, [(n, writes[n]) for n in nodes if n in writes], graph.reducers)
    return state


#: the name the reducers see for a turn's input (it is folded like a node's writes)
TURN_INPUT = "(turn input)"
#: a turn's run option: the fields of the thread's state its graph no longer has, left behind
DROPPED_FIELDS = "dropped_fields"


def turn_start(previous: Mapping[str, JSON], turn: Run, reducers: Mapping[str, Reducer]) -> dict[str, JSON]:
    """The state a conversation turn starts from: the previous turn's, without the fields
    the turn recorded as dropped, with its input applied through the reducers. What was
    dropped is read from the turn, not worked out again from whatever code is here."""
    dropped = set(turn.options.get(DROPPED_FIELDS) or ())
    if dropped:
        previous = {k: v for k, v in previous.items() if k not in dropped}
    return fold(previous, [(TURN_INPUT, dict(turn.input))], reducers)


def base_state(store: CheckpointStore, graphs: GraphRegistry, run: Run) -> dict[str, JSON]:
    """The state a run's nodes fold their writes onto: its input, or for a conversation
    turn (and its continuations) the previous turn's final state with the input applied."""
    first = origin(store, run)
    if not first.options.get("turn") or first.base_checkpoint_id is None:
        return dict(first.input)
    previous = state_json(store, graphs, store.get_checkpoint(first.base_checkpoint_id))
    return turn_start(previous, first, graphs.shape_for(first).reducers)


def _snapshot_prefix(store: CheckpointStore, graph: ExecutableGraph | FoldShape, run: Run, cp: Checkpoint,
                     done: list[str]) -> tuple[Mapping[str, JSON], list[str]] | None:
    """The run's nearest snapshot before ``cp``, and the nodes to fold after it — when
    the snapshot is a prefix of the canonical fold (nothing it lacks comes before it)."""
    snap = store.find_checkpoint(run.id, cp.seq - 1, with_snapshot=True)
    if snap is None:
        return None
    had = {n for n, s in snap.node_states.items() if s == NodeStatus.SUCCEEDED}
    top = max((graph.key(n) for n in had), default=(-1, 0, 0, 0))
    extra = [n for n in done if n not in had]
    if had <= set(done) and all(graph.key(n) > top for n in extra):
        return snap.snapshot or {}, extra
    return None


def state_model_at(store: CheckpointStore, graphs: GraphRegistry, cp: Checkpoint) -> BaseModel:
    """The state at ``cp`` as the graph's state model (any fields, when its code is not here)."""
    state = state_json(store, graphs, cp)
    model: type[BaseModel]
    try:
        model = graphs.run_graph(store.get_run(cp.run_id)).state_model
    except (NotFound, InvalidRequest, GraphError):  # the code is not importable here
        model = AnyState
    return model.model_validate(state)
