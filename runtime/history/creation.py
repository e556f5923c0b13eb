"""The first records of a new run: its row, its first checkpoint(s) and trace events.

Every way a run comes to exist — start, submit, continuation, fork, replay — writes
them through ``insert_run`` in one transaction, after the caller has validated
everything it was given (a rejected request writes nothing).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from ..core.env import Environment
from ..core.errors import InvalidRequest, NodeError
from ..core.jsonvalues import JSON, problems, to_json, unstorable
from ..core.records import Batch, Checkpoint, CheckpointSource, EventType, Run, TraceEvent
from ..core.states import COMPLETED_NODE, NodeStatus, RunStatus
from ..core.streams import publish
from ..graph import ExecutableGraph
from ..graph.instances import base_node, parse_instance
from ..store.base import MAX_SEQ, CheckpointStore


def insert_run(store: CheckpointStore, env: Environment, run: Run, statuses: Mapping[str, NodeStatus], *,
               snapshot: Mapping[str, JSON] | None, claim: bool, source: CheckpointSource,
               inherited: Mapping[str, str] | None = None,
               patch: Mapping[str, JSON] | None = None) -> tuple[Run, Checkpoint]:
    """Write a new run (claimed by this process when ``claim``); returns it and its head.
    ``snapshot``: the state at its first checkpoint (None: rebuilt from its base)."""
    now = env.now()
    events = [TraceEvent(run.id, 1, now, EventType.RUN_CREATED, data={
        "status": RunStatus.QUEUED.value, "kind": run.kind.value, "parent_run_id": run.parent_run_id,
        "base_checkpoint_id": run.base_checkpoint_id, "inherited": dict(inherited or {})})]
    if claim:
        run = run.evolve(status=RunStatus.RUNNING, lease_owner=env.owner,
                         lease_expires_at=now + env.lease_ttl, fence=1)
        events.append(TraceEvent(run.id, 2, now, EventType.RUN_CLAIM,
                                 data={"status": RunStatus.RUNNING.value, "owner": env.owner}))
    cps = [Checkpoint(id=env.ids.new("cp"), run_id=run.id, seq=0, parent_id=run.base_checkpoint_id,
                      nodes=(), node_states=dict(statuses), event_seq=len(events), created_at=now,
                      source=source, snapshot=None if snapshot is None else dict(snapshot))]
    if patch is not None:  # the person's edit is a checkpoint of its own: diffable, undoable by a fork
        events.append(TraceEvent(run.id, len(events) + 1, now, EventType.STATE_PATCHED,
                                 data={"patch": dict(patch)}))
        cps.append(Checkpoint(id=env.ids.new("cp"), run_id=run.id, seq=1, parent_id=cps[0].id, nodes=(),
                              node_states=dict(statuses), event_seq=len(events), created_at=now,
                              source=CheckpointSource.PATCH, snapshot=dict(run.input), changed=()))
    run = run.evolve(event_seq=len(events), head_seq=cps[-1].seq)
    # not forced to disk: nothing outside has seen the run yet (output-commit rule);
    # the first effect, a pause or the end of the run forces it
    store.create_run(Batch(run_id=run.id, run=run, checkpoints=cps, events=events))
    publish(run.id, events, cps)
    return run, cps[-1]


def branch_statuses(node_states: Mapping[str, NodeStatus],
                    graph: ExecutableGraph | None = None) -> dict[str, NodeStatus]:
    """Node statuses of a run branching off a checkpoint: finished work is kept,
    the rest runs again (``graph``: the new run's graph, when it differs). Instances of
    loops and maps are kept when their node is in the graph, except a map's unfinished
    items: its map creates them again from its list as the branch sees it (a patch may
    have changed that list)."""
    def kept(n: str, s: NodeStatus | None) -> bool:
        return s in COMPLETED_NODE or parse_instance(n).item is None

    out = {n: NodeStatus.PENDING for n in (node_states if graph is None else graph.order)
           if kept(n, node_states.get(n))}
    for n, s in node_states.items():
        if graph is not None and n not in out and base_node(n) in graph.nodes and kept(n, s):
            out[n] = NodeStatus.PENDING
        if n in out and s in COMPLETED_NODE:
            out[n] = s
    return out


def inherited_of(statuses: Mapping[str, NodeStatus]) -> dict[str, str]:
    """What a trace's ``run.created`` event records as inherited (node → status)."""
    return {n: s.value for n, s in statuses.items() if s != NodeStatus.PENDING}


def validate_input(graph: ExecutableGraph, input: Mapping[str, JSON] | BaseModel | None,
                   base: Mapping[str, JSON] | None = None) -> dict[str, JSON]:
    """The run input as the state model accepts it; unknown fields are refused unless
    the model allows extra fields (as a fork's patch is). ``base`` (a conversation turn's:
    the thread's state) gives the required fields the input leaves out, so they need not be
    given again (and the others too when a model validator refuses the input without them)."""
    if isinstance(input, BaseModel):
        input = input.model_dump()
    model = graph.state_model
    if input is not None and not isinstance(input, Mapping):
        raise InvalidRequest(f"input must be an object of state fields, got {type(input).__name__}")
    given = dict(input or {})
    refuse_unknown_fields(model, given, "input")
    problem = unstorable(given)   # before validation: a JSON dump would turn NaN into null silently
    if problem is not None:
        raise InvalidRequest(f"input {problem}")
    if base:   # only what validation needs from it: the whole state is checked once the turn applies
        given = {**{f: base[f] for f, info in model.model_fields.items()
                    if info.is_required() and f not in given and f in base}, **given}
    try:
        try:
            state = model.model_validate(given).model_dump(mode="json")
        except ValidationError:
            if not base:
                raise
            # a model validator may compare fields: it must see the thread's values of
            # those the input leaves out, not their defaults (the rare case pays for it)
            state = _fit_with_thread(model, base, given)
    except ValidationError as e:
        raise InvalidRequest(f"input does not fit {model.__name__}: {problems(e, 'input')}") from None
    except (TypeError, ValueError) as e:
        raise InvalidRequest(f"input must be an object of state fields: {e}") from None
    try:
        return to_json(state, "input")  # type: ignore[no-any-return]
    except NodeError as e:   # NaN or infinity: no JSON form
        raise InvalidRequest(str(e)) from None


def _fit_with_thread(model: type[BaseModel], base: Mapping[str, JSON], given: Mapping[str, JSON]) -> dict[str, JSON]:
    """The turn's input validated over the thread's values. A value the thread holds and
    the input leaves out (a new version may have changed its field's type) is named as
    the thread's: blaming the input would send its author looking in the wrong place."""
    try:
        return model.model_validate({**base, **given}).model_dump(mode="json")
    except ValidationError as e:
        kept = sorted({str(err["loc"][0]) for err in e.errors()
                       if err["loc"] and err["loc"][0] in base and err["loc"][0] not in given})
        if not kept:
            raise
        whose = ", ".join(kept)
        raise InvalidRequest(f"the thread's state with this input does not fit {model.__name__}: "
                             f"{problems(e, 'state')} (the thread's value of {whose}, not the input's: give "
                             f"{whose} to replace it)") from None


def refuse_unknown_fields(model: type[BaseModel], given: Mapping[str, JSON], what: str) -> None:
    """``InvalidRequest`` naming the fields the state model does not have (unless it
    takes extra fields): a typo must not be silently dropped."""
    if model.model_config.get("extra") == "allow":
        return
    unknown = sorted(str(k) for k in given if k not in model.model_fields)
    if unknown:
        raise InvalidRequest(f"{what} names unknown state field(s) {', '.join(map(repr, unknown))}; "
                             f"{model.__name__} has: {', '.join(model.model_fields)}")


def new_limits(now: float, *, deadline: Any = None, max_steps: Any = None, max_tokens: Any = None,
               max_cost: Any = None, max_concurrency: Any = None) -> dict[str, JSON]:
    """A run's limits, checked: finite positive numbers; counts are whole numbers."""
    counts = {"max_steps": max_steps, "max_tokens": max_tokens, "max_concurrency": max_concurrency}
    amounts = {"deadline": deadline, "max_cost": max_cost}
    for name, value in {**amounts, **counts}.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value) or value <= 0:
            raise InvalidRequest(f"{name} must be a positive number, got {_shown(value)}")
        if name in counts and not isinstance(value, int):
            raise InvalidRequest(f"{name} must be a whole number, got {value!r}")
    if max_concurrency is not None:
        check_concurrency(max_concurrency)
    limits: dict[str, JSON] = {}
    if deadline is not None:
        limits["deadline_s"] = deadline
    for name in ("max_steps", "max_tokens", "max_cost"):
        if (value := {**amounts, **counts}[name]) is not None:
            limits[name] = value
    return renew_limits(limits, now)


def check_concurrency(value: Any) -> None:
    """A concurrency bound (the Runtime's, a run's): a whole number the store's 32-bit column holds."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SEQ:
        raise InvalidRequest(f"max_concurrency must be a whole number from 1 to {MAX_SEQ}, got {value!r}")


def _finite(value: int | float) -> bool:
    """Whether a number is finite as a float: an int too large for one (10**400) is not."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}… ({len(text)} characters)"


def renew_limits(limits: Mapping[str, JSON], now: float) -> dict[str, JSON]:
    """The limits of a new run that copies another's: it gets the whole time budget again."""
    out = {k: v for k, v in limits.items() if k != "deadline_at"}
    if out.get("deadline_s") is not None:
        out["deadline_at"] = now + out["deadline_s"]
    return out
