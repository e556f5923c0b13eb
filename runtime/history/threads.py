"""Conversation threads: every ``start`` on a thread that already has a finished run
is a new turn that begins where the thread's latest run ended.

A turn is a run of kind ``main`` whose parent is the run it follows and whose base
is that run's last checkpoint. It stores only the turn's input (the fields given,
as the state model accepts them); its state is the previous state with that input
applied through the reducers, so a chat turn appends its message to the history
instead of replacing it — and storage per turn grows with what the turn wrote.
A turn whose graph (a new version) no longer has a field of that state leaves it
behind, and records which in its ``dropped_fields`` option.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ValidationError

from ..core.errors import InvalidRequest
from ..core.jsonvalues import JSON, problems
from ..core.records import Checkpoint, Run, RunKind
from ..core.states import RunStatus
from ..graph import ExecutableGraph
from ..graph.reducers import fold
from ..store.base import CheckpointStore
from .lineage import head
from .registry import GraphRegistry
from .state import TURN_INPUT, state_json

#: runs of these statuses may still change: a new turn waits until they stop
_ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.INTERRUPTED)


def compares(run: Run) -> bool:
    """A replay, or a continuation of one (it carries the replay's options): a comparison
    with the past, never what the thread's next turn follows."""
    return run.kind == RunKind.REPLAY or bool(run.options.get("compare"))


def thread_head(store: CheckpointStore, thread_id: str) -> Run | None:
    """The run a new turn follows: the thread's newest run that is not a replay or the
    continuation of one (those compare against the past; forks and the continuations of
    turns and forks carry the thread on)."""
    limit = 16
    while True:
        runs = store.list_runs(thread_id=thread_id, limit=limit)   # newest first
        found = next((r for r in runs if not compares(r)), None)
        if found is not None or len(runs) < limit:
            return found
        limit *= 8


def turn_base(store: CheckpointStore, graphs: GraphRegistry, thread_id: str) -> tuple[Run, Checkpoint] | None:
    """The run and checkpoint the thread's next turn starts from, or None for a new thread."""
    last = thread_head(store, thread_id)
    if last is None:
        return None
    if last.status in _ACTIVE:
        # a RUNNING run may be driven elsewhere, or orphaned by a process that died
        what = ("wait for it, or resume it if its process stopped (that recovers it), or cancel it"
                if last.status == RunStatus.RUNNING else "resume, cancel or wait for it")
        raise InvalidRequest(f"thread {thread_id}'s latest run {last.id} is {last.status.value}; "
                             f"{what} before starting the next turn")
    return last, head(store, last.id)


def known_fields(graph: ExecutableGraph, previous: Mapping[str, JSON]) -> tuple[dict[str, JSON], list[str]]:
    """(the thread's state as the turn's graph knows it; the fields it left out). A new
    version of the graph may remove a field: the turn starts without it, unless the state
    model takes extra fields (then it keeps them, as it would any input's)."""
    model = graph.state_model
    if model.model_config.get("extra") == "allow":
        return dict(previous), []
    dropped = sorted(k for k in previous if k not in model.model_fields)
    return {k: v for k, v in previous.items() if k not in dropped}, dropped


def turn_state(graph: ExecutableGraph, previous: Mapping[str, JSON], given: set[str],
               validated: Mapping[str, JSON]) -> tuple[dict[str, JSON], dict[str, JSON]]:
    """(the turn's input: the fields given, as the model accepted them; the state the
    turn starts from: the previous state with that input applied through the reducers)."""
    turn_input = {k: validated[k] for k in given if k in validated}
    try:
        state = fold(previous, [(TURN_INPUT, turn_input)], graph.reducers)
    except Exception as e:   # a custom reducer is the graph author's code: it may refuse the input
        raise InvalidRequest(f"the thread's state cannot take this input: a reducer raised "
                             f"{type(e).__name__}: {e}") from None
    try:
        checked = graph.state_model.model_validate(state)
    except ValidationError as e:
        raise InvalidRequest(f"the thread's state with this input does not fit "
                             f"{graph.state_model.__name__}: {problems(e, 'state')}") from None
    return turn_input, checked.model_dump(mode="json")


def thread_state(store: CheckpointStore, graphs: GraphRegistry, thread_id: str) -> tuple[Run, dict[str, JSON]] | None:
    """The thread's latest run and the state at its latest checkpoint (None: no such thread)."""
    last = thread_head(store, thread_id)
    if last is None:
        return None
    return last, state_json(store, graphs, head(store, last.id))


def given_fields(input: Mapping[str, JSON] | BaseModel | None) -> set[str]:
    """The fields a caller set: a turn applies only those (defaults would overwrite)."""
    if isinstance(input, BaseModel):
        return set(input.model_fields_set)
    return {str(k) for k in (input or {})}


def turn_of(store: CheckpointStore, run: Run) -> int:
    """The turn a run belongs to (the first run of a thread is turn 1). Only a turn
    stores its number: a continuation, fork or replay carries on the turn of the run
    it came from, so the turn after a fork of turn k is k + 1 (which keeps the
    recorder's snapshot schedule, turns 1, 2, 4, 8, …, doubling across forks)."""
    while run.kind != RunKind.MAIN and run.parent_run_id is not None:
        run = store.get_run(run.parent_run_id)
    return int(run.options.get("turn") or 1)


def next_turn(store: CheckpointStore, previous: Run) -> int:
    """Turn numbers count up a thread's lineage: one more than the run it follows."""
    return turn_of(store, previous) + 1
