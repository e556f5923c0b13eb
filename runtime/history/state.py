"""The state at a checkpoint.

Checkpoints store node statuses as deltas and the full state only on periodic
snapshots, so the state at a delta checkpoint is rebuilt: the nearest earlier
snapshot (or the run's input) folded with the writes of the nodes completed
since, in the graph's canonical order — never in completion order.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

from ..core.errors import GraphError, InvalidRequest, NotFound
from ..core.jsonvalues import JSON
from ..core.records import Checkpoint
from ..core.states import NodeStatus
from ..graph import AnyState
from ..graph.reducers import fold
from ..store.base import CheckpointStore
from .lineage import writes_lineage
from .registry import GraphRegistry


def state_json(store: CheckpointStore, graphs: GraphRegistry, cp: Checkpoint) -> dict[str, JSON]:
    if cp.snapshot is not None:
        return dict(cp.snapshot)
    run = store.get_run(cp.run_id)
    graph = graphs.graph_for(run)
    done = [n for n in graph.order if cp.node_states.get(n) == NodeStatus.SUCCEEDED]
    writes = store.node_writes(writes_lineage(store, run))
    base: Mapping[str, JSON] = run.input
    snap = store.find_checkpoint(run.id, cp.seq - 1, with_snapshot=True)
    if snap is not None:
        had = {n for n, s in snap.node_states.items() if s == NodeStatus.SUCCEEDED}
        top = max((graph.index[n] for n in had), default=-1)
        extra = [n for n in done if n not in had]
        # the snapshot is a prefix of this fold only if nothing it lacks comes before it
        if had <= set(done) and all(graph.index[n] > top for n in extra):
            base, done = snap.snapshot or {}, extra
    # nodes a patched fork inherited have no writes: their writes are in its input
    return fold(base, [(n, writes[n]) for n in done if n in writes], graph.reducers)


def state_model_at(store: CheckpointStore, graphs: GraphRegistry, cp: Checkpoint) -> BaseModel:
    """The state at ``cp`` as the graph's state model (any fields, when its code is not here)."""
    state = state_json(store, graphs, cp)
    model: type[BaseModel]
    try:
        model = graphs.graph_for(store.get_run(cp.run_id)).state_model
    except (NotFound, InvalidRequest, GraphError):  # the code is not importable here
        model = AnyState
    return model.model_validate(state)
