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

A branch copies its source run's limits (with the whole time budget again) unless
a fork is given limits of its own; its usage starts at zero, and mocked effects
count none of the usage they reported when they ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ..core.errors import InvalidRequest, NodeError, NotFound
from ..core.jsonvalues import JSON, json_equal, problems, to_json
from ..core.records import SERVED_STATUSES, Checkpoint, CheckpointSource, EffectsMode, Run, RunKind
from ..core.states import COMPLETED_NODE, NodeStatus, RunStatus
from ..engine.decisions import with_limits
from ..engine.deps import EngineDeps
from ..graph import ExecutableGraph, Graph
from ..graph.instances import base_node, group_of, loop_paths, parse_instance
from ..graph.reducers import fold
from ..history.creation import branch_statuses, inherited_of, insert_run, refuse_unknown_fields, renew_limits
from ..history.lineage import branch_sources, continued_chain, writes_lineage
from ..history.registry import RUN_GRAPH_REF, compiled, found_ref
from ..history.state import base_state, state_json
from ..store.base import CheckpointStore


def apply_patch(graph: ExecutableGraph, base: Mapping[str, JSON], patch: Any) -> dict[str, JSON]:
    """The base state with the patch's fields replaced, validated against the state model.

    A patch sets field values (it does not go through reducers): it is what a person
    typed into the state editor."""
    model = graph.state_model
    if not isinstance(patch, Mapping):
        raise InvalidRequest(f"a patch is an object of state fields, got {type(patch).__name__}")
    refuse_unknown_fields(model, patch, "patch")
    try:
        checked = model.model_validate({**base, **to_json(dict(patch), "patch")})
    except NodeError as e:  # a value with no JSON form
        raise InvalidRequest(str(e)) from None
    except ValidationError as e:
        raise InvalidRequest(f"patch does not fit {model.__name__}: {problems(e, '(state)', as_field=True)}") from None
    return checked.model_dump(mode="json")


def effective_base(store: CheckpointStore, cp: Checkpoint) -> tuple[Run, Checkpoint]:
    """The checkpoint a branch really starts from, and its run. The first checkpoint of a
    patched fork holds the state *before* its patch, while that fork's input is the
    patched state: branching there means branching where that fork branched."""
    run = store.get_run(cp.run_id)
    while cp.source == CheckpointSource.FORK and run.options.get("patched") and run.base_checkpoint_id:
        cp = store.get_checkpoint(run.base_checkpoint_id)
        run = store.get_run(cp.run_id)
    return run, cp


def mockable_effects(store: CheckpointStore, checkpoint_id: str) -> list[str]:
    """The names of the effects a mocked branch from this checkpoint can be served from
    recordings (when it asks with the recorded request), sorted: the served outcomes in
    the journal of the source lineage it will have. Runs that continued the
    checkpoint's run are not in it: what they recorded is not served."""
    source, _ = effective_base(store, store.get_checkpoint(checkpoint_id))
    return sorted({e.name for e in store.journal(branch_sources(store, source)) if e.status in SERVED_STATUSES})


def check_mocks(mocks: Any) -> dict[str, JSON]:
    if mocks is None:
        return {}
    if not isinstance(mocks, Mapping) or not all(isinstance(k, str) for k in mocks):
        raise InvalidRequest("mocks must be an object of {effect name: result}")
    try:
        return to_json(dict(mocks), "mocks")  # type: ignore[no-any-return]
    except NodeError as e:   # no JSON form (NaN, too deep, an object)
        raise InvalidRequest(str(e)) from None


def effects_mode(effects: Any) -> EffectsMode:
    try:
        return EffectsMode(effects)
    except ValueError:
        raise InvalidRequest(f"effects must be 'mock' or 'live', got {effects!r}") from None


def new_fork(deps: EngineDeps, checkpoint_id: str, patch: Mapping[str, JSON] | None, effects: str,
             mocks: Mapping[str, JSON] | None, graph: ExecutableGraph | None,
             limits: Mapping[str, JSON] | None = None, *, claim: bool = True
             ) -> tuple[Run, ExecutableGraph, Checkpoint]:
    """A fork run, created (claimed, not yet driven; QUEUED for a worker unless ``claim``):
    the run, its graph, its head. ``limits`` (validated by the caller) replace those copied
    from the source run."""
    if patch is not None and not isinstance(patch, Mapping):
        raise InvalidRequest(f"a patch is an object of state fields, got {type(patch).__name__}")
    mode = effects_mode(effects)
    mocks_json = check_mocks(mocks)
    if mocks_json and mode == EffectsMode.LIVE:
        raise InvalidRequest("mocks only apply when effects are mocked; a live fork runs every effect for real")
    source, cp = effective_base(deps.store, deps.store.get_checkpoint(checkpoint_id))
    compiled = _same_version(deps, source, graph)
    base = state_json(deps.store, deps.graphs, cp)
    patched = apply_patch(compiled, base, patch) if patch else None   # {}: nothing edited
    statuses = branch_statuses(cp.node_states)
    if patched is not None:
        restarted = _restart_edited_items(compiled, statuses, base, patched)
        if restarted != statuses:
            # the state without the writes of the items that run again, edited as asked
            writes = deps.store.node_writes(writes_lineage(deps.store, source))
            baked = sorted(n for n, st in statuses.items()
                           if n not in restarted and st == NodeStatus.SUCCEEDED and n not in writes)
            if baked:
                raise InvalidRequest(
                    f"the patch edits the list of a map under way, whose finished items then run again; "
                    f"{', '.join(baked[:5])} came to run {source.id} with its own patched state, which "
                    f"holds their results: fork from the checkpoint that run branched off instead")
            statuses = restarted
            kept = [(n, writes[n]) for n in compiled.canonical(list(statuses))
                    if statuses[n] == NodeStatus.SUCCEEDED and n in writes]
            base = fold(base_state(deps.store, deps.graphs, source), kept, compiled.reducers)
            patched = apply_patch(compiled, base, patch)
    options: dict[str, JSON] = {"effects": mode.value, "mocks": mocks_json,
                                "source": {"run_id": source.id, "checkpoint_id": cp.id}}
    if source.options.get("compensate_on"):
        options["compensate_on"] = source.options["compensate_on"]
    if patched is not None:
        options["patched"] = True   # its input is the patched state; it inherits no writes
    _name_code(options, source, graph)
    # unpatched, it folds the source's writes onto the base the source folded them onto
    run = _new_run(deps, compiled, source, cp, RunKind.FORK,
                   patched if patched is not None else base_state(deps.store, deps.graphs, source), options, limits)
    if patched is not None:
        patch = {k: patched[k] for k in patch}  # type: ignore[union-attr]  # as the model coerced them
    deps.graphs.register(compiled, current=False)
    run, head = insert_run(deps.store, deps.env, run, statuses, snapshot=base, claim=claim,
                           source=CheckpointSource.FORK, inherited=inherited_of(statuses),
                           patch=patch if patched is not None else None)
    return run, compiled, head


def new_replay(deps: EngineDeps, target_id: str, graph: ExecutableGraph | None,
               mocks: Mapping[str, JSON] | None, *, claim: bool = True) -> tuple[Run, ExecutableGraph, Checkpoint]:
    """A replay of a run (from its lineage's first checkpoint) or of a checkpoint onwards.

    Returns the replay run (created, not yet driven; QUEUED for a worker unless ``claim``),
    its graph and its head."""
    mocks_json = check_mocks(mocks)
    source, cp = _replay_base(deps, target_id)
    compiled = graph if graph is not None else deps.graphs.run_graph(source)
    base_run = deps.store.get_run(cp.run_id)
    if compiled.name != base_run.graph_name:   # as a thread's turns: another graph is not a replay
        raise InvalidRequest(f"run {base_run.id} ran graph {base_run.graph_name!r}; a replay runs that graph "
                             f"(a new version of it is fine), not {compiled.name!r}")
    recorded_input = base_state(deps.store, deps.graphs, base_run)   # a conversation turn's whole state
    try:  # new code must accept the recorded input
        compiled.state_model.model_validate(recorded_input)
    except ValidationError as e:
        raise InvalidRequest(f"the recorded input does not fit {compiled.state_model.__name__} of the "
                             f"graph given: {problems(e, 'input')}") from None
    if compiled.version != base_run.graph_version:
        _refuse_moved_loops(deps, base_run, compiled, cp.node_states)
        _refuse_unmapped_items(compiled, cp.node_states)
    statuses = branch_statuses(cp.node_states, compiled)
    options: dict[str, JSON] = {"effects": EffectsMode.MOCK.value, "mocks": mocks_json, "compare": True,
                                "source": {"run_id": source.id, "checkpoint_id": cp.id}}
    _name_code(options, source, graph)
    # its parent is the run asked for: that lineage's journal serves the mocks
    run = _new_run(deps, compiled, source, cp, RunKind.REPLAY, recorded_input, options)
    # the state the replay's nodes fold from: the input and the kept nodes' recorded
    # writes, under the graph it runs (new code may have dropped a node)
    writes = deps.store.node_writes(writes_lineage(deps.store, source))
    kept = [(n, writes[n]) for n in compiled.canonical(list(statuses))
            if statuses[n] == NodeStatus.SUCCEEDED and n in writes]
    snapshot = fold(recorded_input, kept, compiled.reducers)
    if kept and compiled.version != base_run.graph_version:
        _check_start_state(compiled, snapshot, kept)
    deps.graphs.register(compiled, current=False)
    run, head = insert_run(deps.store, deps.env, run, statuses, snapshot=snapshot, claim=claim,
                           source=CheckpointSource.REPLAY, inherited=inherited_of(statuses))
    return run, compiled, head


def _check_start_state(compiled: ExecutableGraph, state: Mapping[str, JSON],
                       kept: list[tuple[str, Mapping[str, JSON]]]) -> None:
    """New code must accept the state its replay starts from: the recorded input with the
    writes of the nodes it does not run again (refused naming them, before anything is written)."""
    try:
        compiled.state_model.model_validate(state)
    except ValidationError as e:
        fields = {str(err["loc"][0]) for err in e.errors() if err["loc"]}
        writers = [n for n, w in kept if fields & set(w)]
        raise InvalidRequest(
            f"the state this replay starts from does not fit {compiled.state_model.__name__} of the graph "
            f"given: {problems(e, 'state')}" + (f" (written by {', '.join(writers)}, which it does not run "
                                                 f"again: replay from a checkpoint before them)" if writers else "")
        ) from None


def branch_code(given: Graph | ExecutableGraph | None, queued: bool = False) -> ExecutableGraph | None:
    """The code given to a fork or replay, compiled. A queued branch is driven by a worker,
    another process, which finds that code again by its reference (``RUN_GRAPH_REF``): code
    nothing can import (built by a factory, or in a script run as ``__main__``) is refused
    before anything is written, rather than the worker running other code of that version."""
    if given is None:
        return None
    done = compiled(given)
    if queued and not done.ref:
        ref = found_ref(given, done)
        if ref is None:
            raise InvalidRequest(f"a queued branch is driven by a worker, which must import its code: graph "
                                 f"{done.name!r} given here is bound to no module-level name it can import "
                                 f"(define it at module level, or load it with resolve_ref('module:attr'))")
        done.ref = ref
    return done


def _replay_base(deps: EngineDeps, target_id: str) -> tuple[Run, Checkpoint]:
    """(the run re-executed, the checkpoint the replay starts from)."""
    store = deps.store
    try:
        run = store.get_run(target_id)
    except NotFound:
        try:
            cp = store.get_checkpoint(target_id)
        except NotFound:
            raise NotFound(f"no run or checkpoint with id {target_id!r}") from None
        # a replay compares with what the run recorded: from a checkpoint of a run still under
        # way, that record is not complete yet (as when the run itself is named)
        _refuse_unfinished(store.get_run(cp.run_id))
        return effective_base(store, cp)
    _refuse_unfinished(run)
    origin = store.get_run(continued_chain(store, run)[-1])  # a continued run is replayed whole
    # a patched fork ran from its patch checkpoint (its input), not from the state before it
    first = store.find_checkpoint(origin.id, 1 if origin.options.get("patched") else 0)
    assert first is not None  # every run is created with its first checkpoint
    return run, first


def _refuse_unfinished(run: Run) -> None:
    if run.status in (RunStatus.RUNNING, RunStatus.QUEUED):
        raise InvalidRequest(f"run {run.id} is {run.status.value}; replay it once it has stopped")


def _restart_edited_items(graph: ExecutableGraph, statuses: dict[str, NodeStatus], base: Mapping[str, JSON],
                          patched: Mapping[str, JSON]) -> dict[str, NodeStatus]:
    """The statuses of a branch whose patch edits the list of a map under way. Its finished
    items are kept while the edited list still has each of them, unchanged (JSON-equal, as
    the diff compares: ``True`` is not ``1``), at its index (items added or dropped after them); otherwise they all run again from the edited list,
    so that its results still fold in item order (a mocked branch is served the recorded
    results of the items that did not change). A map that had finished keeps its results,
    as any finished node does."""
    redo: set[str] = set()
    for name in statuses:
        parsed = parse_instance(name)
        node, item = parsed.node, parsed.item
        field = graph.nodes[node].map_over if item is not None and node in graph.nodes else None
        group = group_of(parsed)
        if field is None or item is None or statuses.get(group) in COMPLETED_NODE:
            continue
        old, new = base.get(field), patched.get(field)
        if not (isinstance(old, list) and isinstance(new, list) and item < min(len(old), len(new))
                and json_equal(old[item], new[item])):
            redo.add(group)
    return {n: st for n, st in statuses.items()
            if (p := parse_instance(n)).item is None or group_of(p) not in redo}


def _refuse_moved_loops(deps: EngineDeps, recorded: Run, graph: ExecutableGraph,
                        node_states: Mapping[str, NodeStatus]) -> None:
    """Refuse to replay new code whose loops hold a node differently from the code that
    recorded its instances: a name such as ``X#1`` says which iteration of which loop it
    was, and under other loops it would stand for another instance."""
    desc = deps.store.graph_description(recorded.graph_version) or {}
    raw = desc.get("loops")
    before = loop_paths({str(e): [str(m) for m in ms] for e, ms in raw.items() if isinstance(ms, list)}
                        if isinstance(raw, dict) else {})
    for name in node_states:
        node = base_node(name)
        if "#" in name and node in graph.nodes and before.get(node, ()) != graph.loop_path.get(node, ()):
            def loops(path: tuple[str, ...]) -> str:
                return " inside ".join(map(repr, reversed(path))) if path else "no loop"
            raise InvalidRequest(
                f"the graph given runs {node!r} in {loops(graph.loop_path.get(node, ()))}, and the recording "
                f"ran it in {loops(before.get(node, ()))}: its recorded instance {name!r} has no place in the new "
                f"graph; replay from a checkpoint before {node!r} ran in a loop iteration, or from the run's start")


def _refuse_unmapped_items(graph: ExecutableGraph, node_states: Mapping[str, NodeStatus]) -> None:
    """Refuse to replay new code that runs once a node the recording mapped over a list:
    its recorded items (``work[2]``), and the writes they hold, have no place in it."""
    for name in node_states:
        parsed = parse_instance(name)
        node = parsed.node
        if parsed.item is not None and node in graph.nodes and graph.nodes[node].map_over is None:
            raise InvalidRequest(
                f"the graph given runs {node!r} once, and the recording mapped it over a list: its recorded "
                f"item {name!r} has no place in the new graph; replay from a checkpoint before {node!r} "
                f"ran, or from the run's start")


def _name_code(options: dict[str, JSON], source: Run, graph: ExecutableGraph | None) -> None:
    """Let a branch name the code it runs, when that is not its version's: the code given
    (when it can be imported again), or else the code its source ran."""
    ref = getattr(graph, "ref", None) if graph is not None else source.options.get(RUN_GRAPH_REF)
    if isinstance(ref, str) and ref:
        options[RUN_GRAPH_REF] = ref


def _same_version(deps: EngineDeps, source: Run, graph: ExecutableGraph | None) -> ExecutableGraph:
    if graph is None:
        return deps.graphs.run_graph(source)
    compiled = graph
    if not deps.graphs.made_by(compiled, source.graph_version):
        raise InvalidRequest(f"run {source.id} was made by graph version {source.graph_version}; a fork "
                             f"continues that graph (version {compiled.version} was given); use replay "
                             f"to run new code against a recording")
    return compiled


def _new_run(deps: EngineDeps, graph: ExecutableGraph, source: Run, cp: Checkpoint, kind: RunKind,
             state: Mapping[str, JSON], options: Mapping[str, JSON],
             given: Mapping[str, JSON] | None = None) -> Run:
    now = deps.env.now()
    limits = with_limits(renew_limits(source.limits, now), given or {}, now)
    # the same structure as the source's keeps its version (an older name for it, recorded
    # before versions named reducers); new code has its own
    version = source.graph_version if deps.graphs.made_by(graph, source.graph_version) else graph.version
    return Run(id=deps.env.ids.new("run"), thread_id=source.thread_id, graph_name=graph.name,
               graph_version=version, status=RunStatus.QUEUED, kind=kind, input=dict(state),
               created_at=now, updated_at=now, parent_run_id=source.id, base_checkpoint_id=cp.id,
               limits=limits,
               max_concurrency=source.max_concurrency, options=dict(options))
