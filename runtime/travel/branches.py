"""Creating forks and replays: new runs in a thread that start from a checkpoint.

Everything a caller gives (the checkpoint, the patch, the effects mode, mocks, a
new graph) is checked here before anything is written, so a rejected fork or
replay leaves the store exactly as it was.

* A **fork** continues from its base checkpoint: the nodes that had finished there
  (succeeded or skipped) are not run again, and the rest run. Without a patch it
  inherits their writes exactly as a continuation does, so every node sees what it
  would have seen in the source run. With a patch, the patched state at the base is
  the fork's input (a person authored it), and nodes see it plus their ancestors'
  writes in the fork. Effects are mocked by default.
* A **replay** re-executes recorded nodes with every effect mocked, to compare:
  from a run (its first checkpoint: everything runs again) or from a checkpoint
  (the nodes finished there keep their recorded writes). It may use new code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..core.jsonvalues import to_json
from ..core.errors import InvalidRequest, NodeError, NotFound
from ..graph.spec import ExecutableGraph
from ..core.records import Checkpoint, EffectsMode, Run, RunKind
from ..graph.reducers import fold
from ..core.states import NodeStatus, RunStatus
from ..core.jsonvalues import JSON

if TYPE_CHECKING:
    from ..runtime import Runtime


_KEEP = (NodeStatus.SUCCEEDED, NodeStatus.SKIPPED)


def apply_patch(graph: ExecutableGraph, base: Mapping[str, JSON], patch: Any) -> dict[str, JSON]:
    """The base state with the patch's fields replaced, validated against the state model.

    A patch sets field values (it does not go through reducers): it is what a person
    typed into the state editor."""
    model = graph.state_model
    if not isinstance(patch, Mapping):
        raise InvalidRequest(f"a patch is an object of state fields, got {type(patch).__name__}")
    if model.model_config.get("extra") != "allow":
        unknown = sorted(str(k) for k in patch if k not in model.model_fields)
        if unknown:
            raise InvalidRequest(f"patch names unknown state field(s) {', '.join(map(repr, unknown))}; "
                                 f"{model.__name__} has: {', '.join(model.model_fields)}")
    try:
        checked = model.model_validate({**base, **to_json(dict(patch), "patch")})
    except NodeError as e:  # a value with no JSON form
        raise InvalidRequest(str(e)) from None
    except ValidationError as e:
        problems = "; ".join(f"field {'.'.join(map(str, err['loc'])) or '(state)'!r}: {err['msg']}"
                             for err in e.errors())
        raise InvalidRequest(f"patch does not fit {model.__name__}: {problems}") from None
    return checked.model_dump(mode="json")


def effective_base(rt: Runtime, cp: Checkpoint) -> tuple[Run, Checkpoint]:
    """The checkpoint a branch really starts from, and its run. The first checkpoint of a
    patched fork holds the state *before* its patch, while that fork's input is the
    patched state: branching there means branching where that fork branched."""
    run = rt.store.get_run(cp.run_id)
    while cp.source == "fork" and run.options.get("patched") and run.base_checkpoint_id:
        cp = rt.store.get_checkpoint(run.base_checkpoint_id)
        run = rt.store.get_run(cp.run_id)
    return run, cp


def check_mocks(mocks: Any) -> dict[str, JSON]:
    if mocks is None:
        return {}
    if not isinstance(mocks, Mapping) or not all(isinstance(k, str) for k in mocks):
        raise InvalidRequest("mocks must be an object of {effect name: result}")
    return to_json(dict(mocks), "mocks")  # type: ignore[no-any-return]


def effects_mode(effects: Any) -> EffectsMode:
    try:
        return EffectsMode(effects)
    except ValueError:
        raise InvalidRequest(f"effects must be 'mock' or 'live', got {effects!r}") from None


def new_fork(rt: Runtime, checkpoint_id: str, patch: Mapping[str, JSON] | None, effects: str,
             mocks: Mapping[str, JSON] | None, graph: ExecutableGraph | None) -> tuple[Run, ExecutableGraph]:
    mode = effects_mode(effects)
    mocks_json = check_mocks(mocks)
    if mocks_json and mode == EffectsMode.LIVE:
        raise InvalidRequest("mocks only apply when effects are mocked; a live fork runs every effect for real")
    source, cp = effective_base(rt, rt.store.get_checkpoint(checkpoint_id))
    compiled = _same_version(rt, source, graph)
    base = rt._state_json(cp)
    patched = apply_patch(compiled, base, patch) if patch else None
    statuses = {n: (s if s in _KEEP else NodeStatus.PENDING) for n, s in cp.node_states.items()}
    options: dict[str, JSON] = {"effects": mode.value, "mocks": mocks_json,
                                "source": {"run_id": source.id, "checkpoint_id": cp.id}}
    if source.options.get("compensate_on"):
        options["compensate_on"] = source.options["compensate_on"]
    if patched is not None:
        options["patched"] = True   # its input is the patched state; it inherits no writes
    run = _new_run(rt, compiled, source, cp, RunKind.FORK, patched if patched is not None else source.input,
                   options)
    inherited = {n: s.value for n, s in statuses.items() if s != NodeStatus.PENDING}
    if patched is not None:
        patch = {k: patched[k] for k in patch}  # type: ignore[union-attr]  # as the model coerced them
    rt.register(compiled)
    run = rt._insert(run, statuses, snapshot=base, claim=True, source="fork", inherited=inherited,
                     patch=patch if patched is not None else None)
    return run, compiled


def new_replay(rt: Runtime, target_id: str, graph: ExecutableGraph | None,
               mocks: Mapping[str, JSON] | None) -> tuple[Run, ExecutableGraph, Run]:
    """A replay of a run (from its lineage's first checkpoint) or of a checkpoint onwards.

    Returns the replay run, its graph, and the run it re-executes (the report's source)."""
    mocks_json = check_mocks(mocks)
    source, cp = _replay_base(rt, target_id)
    compiled = graph if graph is not None else rt.graph_for(source)
    base_run = rt.store.get_run(cp.run_id)
    try:  # new code must accept the recorded input
        compiled.state_model.model_validate(dict(base_run.input))
    except ValidationError as e:
        raise InvalidRequest(f"the recorded input does not fit {compiled.state_model.__name__} of the "
                             f"graph given: {e.errors()[0]['msg']}") from None
    statuses = {n: NodeStatus.PENDING for n in compiled.order}
    for n, s in cp.node_states.items():
        if n in statuses and s in _KEEP:
            statuses[n] = s
    options: dict[str, JSON] = {"effects": EffectsMode.MOCK.value, "mocks": mocks_json, "compare": True,
                                "source": {"run_id": source.id, "checkpoint_id": cp.id}}
    # its parent is the run asked for: that lineage's journal serves the mocks
    run = _new_run(rt, compiled, source, cp, RunKind.REPLAY, dict(base_run.input), options)
    inherited = {n: s.value for n, s in statuses.items() if s != NodeStatus.PENDING}
    # the state the replay's nodes fold from: the input and the kept nodes' recorded
    # writes, under the graph it runs (new code may have dropped a node)
    writes = rt.store.node_writes(rt._writes_lineage(source))
    kept = [(n, writes[n]) for n in compiled.order if statuses[n] == NodeStatus.SUCCEEDED and n in writes]
    snapshot = fold(dict(base_run.input), kept, compiled.reducers)
    rt.register(compiled)
    run = rt._insert(run, statuses, snapshot=snapshot, claim=True, source="replay", inherited=inherited)
    return run, compiled, source


def _replay_base(rt: Runtime, target_id: str) -> tuple[Run, Checkpoint]:
    """(the run re-executed, the checkpoint the replay starts from)."""
    try:
        run = rt.store.get_run(target_id)
    except NotFound:
        try:
            cp = rt.store.get_checkpoint(target_id)
        except NotFound:
            raise NotFound(f"no run or checkpoint with id {target_id!r}") from None
        return effective_base(rt, cp)
    if run.status in (RunStatus.RUNNING, RunStatus.QUEUED):
        raise InvalidRequest(f"run {run.id} is {run.status.value}; replay it once it has stopped")
    origin = rt.store.get_run(rt._lineage(run)[-1])  # a continued run is replayed whole
    # a patched fork ran from its patch checkpoint (its input), not from the state before it
    first = rt.store.find_checkpoint(origin.id, 1 if origin.options.get("patched") else 0)
    assert first is not None  # every run is created with its first checkpoint
    return run, first


def _same_version(rt: Runtime, source: Run, graph: ExecutableGraph | None) -> ExecutableGraph:
    if graph is None:
        return rt._run_graphs.get(source.id) or rt.graph_for(source)
    compiled = graph
    if compiled.version != source.graph_version:
        raise InvalidRequest(f"run {source.id} was made by graph version {source.graph_version}; a fork "
                             f"continues that graph (version {compiled.version} was given); use replay "
                             f"to run new code against a recording")
    return compiled


def _new_run(rt: Runtime, graph: ExecutableGraph, source: Run, cp: Checkpoint, kind: RunKind,
             state: Mapping[str, JSON], options: Mapping[str, JSON]) -> Run:
    now = rt.clock.time()
    limits = {k: v for k, v in source.limits.items() if k != "deadline_at"}
    if limits.get("deadline_s") is not None:  # a new run gets the whole time budget again
        limits["deadline_at"] = now + limits["deadline_s"]
    return Run(id=rt.ids.new("run"), thread_id=source.thread_id, graph_name=graph.name,
               graph_version=graph.version, status=RunStatus.QUEUED, kind=kind, input=dict(state),
               created_at=now, updated_at=now, parent_run_id=source.id, base_checkpoint_id=cp.id,
               limits=limits,
               max_concurrency=source.max_concurrency, options=dict(options))
