"""A graph's new run (``start``, ``submit``): its input and options checked, and, on a
conversation thread that has runs already, placed as the thread's next turn.

Everything is validated before ``insert_run`` writes the run, so a refused start
leaves the store as it was.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import BaseModel

from ..core.env import Environment
from ..core.errors import InvalidRequest
from ..core.jsonvalues import JSON
from ..core.records import Checkpoint, CheckpointSource, Run, RunKind
from ..core.states import NodeStatus, RunStatus
from ..graph import ExecutableGraph
from ..store.base import CheckpointStore
from .creation import insert_run, new_limits, validate_input
from .registry import GraphRegistry
from .state import DROPPED_FIELDS, state_json
from .threads import given_fields, known_fields, next_turn, turn_base, turn_state


def create_run(store: CheckpointStore, graphs: GraphRegistry, env: Environment, graph: ExecutableGraph,
               input: Mapping[str, JSON] | BaseModel | None, *, claim: bool, thread_id: str | None = None,
               deadline: float | None = None, max_steps: int | None = None, max_tokens: int | None = None,
               max_cost: float | None = None, max_concurrency: int | None = None,
               compensate_on: Iterable[str] = ()) -> tuple[Run, Checkpoint]:
    """Write a new run of ``graph`` (claimed by this process when ``claim``, else QUEUED);
    returns it and its head. ``thread_id`` was checked by the caller."""
    follows = turn_base(store, graphs, thread_id) if thread_id is not None else None
    if follows is not None and follows[0].graph_name != graph.name:
        raise InvalidRequest(f"thread {thread_id} runs graph {follows[0].graph_name!r}; a turn must run "
                             f"that graph (a new version of it is fine), not {graph.name!r}")
    # a turn's input is applied to the thread's state: what it leaves out is there already
    before, dropped = (known_fields(graph, state_json(store, graphs, follows[1]))
                       if follows is not None else (None, []))
    state = validate_input(graph, input, before)
    if isinstance(compensate_on, str) or not isinstance(compensate_on, Iterable):
        raise InvalidRequest(f"compensate_on takes a list of 'failed' and/or 'cancelled', got {compensate_on!r}")
    policy = sorted(set(compensate_on))
    if [s for s in policy if s not in (RunStatus.FAILED.value, RunStatus.CANCELLED.value)]:
        raise InvalidRequest(f"compensate_on takes a list of 'failed' and/or 'cancelled', got {compensate_on!r}")
    now = env.now()
    limits = new_limits(now, deadline=deadline, max_steps=max_steps, max_tokens=max_tokens,
                        max_cost=max_cost, max_concurrency=max_concurrency)
    run_id = env.ids.new("run")
    options: dict[str, JSON] = {"compensate_on": policy} if policy else {}
    run = Run(id=run_id, thread_id=thread_id or run_id, graph_name=graph.name,
              graph_version=graph.version, status=RunStatus.QUEUED, kind=RunKind.MAIN,
              input=state, created_at=now, updated_at=now, limits=limits,
              max_concurrency=max_concurrency or env.max_concurrency, options=options)
    statuses = {n: NodeStatus.PENDING for n in graph.order}
    if follows is None:
        return insert_run(store, env, run, statuses, snapshot=state, claim=claim, source=CheckpointSource.INPUT)
    previous, base = follows
    turn_input, _ = turn_state(graph, before or {}, given_fields(input), state)
    run = run.evolve(input=turn_input, parent_run_id=previous.id, base_checkpoint_id=base.id,
                     options={**options, "turn": next_turn(store, previous),
                              **({DROPPED_FIELDS: dropped} if dropped else {})})
    # the state is rebuilt from the previous turn's: only the input is stored
    return insert_run(store, env, run, statuses, snapshot=None, claim=claim, source=CheckpointSource.TURN)
