"""States of an exported thread against the graph's state model, checked before import.

Only possible where the importing Runtime has the graph's code (registered, or
importable by its ``ref``): a snapshot, an input or a node's writes that do not fit
the model would be accepted, then fail every later read of the run's state.
Without the code, the loader has already made sure they are JSON objects.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from pydantic import ValidationError

from ..core.errors import Problem
from ..core.jsonvalues import JSON, problems
from ..core.records import WriteKind
from ..graph.reducers import fold
from ..graph.spec import ExecutableGraph
from .transfer_checks import LoadedRun, Thread, names

__all__ = ["check_states"]


def check_states(t: Thread) -> Iterator[Problem]:
    """The run's input, every snapshot and every node's writes fit the state model."""
    for r in t.runs:
        info = t.graphs.get(r.run.graph_version)
        if info is None or info.graph is None:
            continue
        graph = info.graph
        # a conversation turn's input holds only the fields it gave: its states are checked
        input_problem = None if r.run.options.get("turn") else _misfit(graph, r.run.input)
        if input_problem:
            yield Problem(r.at("run"), f"input {input_problem}")
        for j, cp in enumerate(r.batch.checkpoints):
            found = _misfit(graph, cp.snapshot) if cp.snapshot is not None else None
            if found:
                yield Problem(r.at("checkpoints", j), f"snapshot {found}")
        if input_problem is None:
            yield from _writes(graph, r)


def _misfit(graph: ExecutableGraph, state: Mapping[str, JSON], *, partial: bool = False) -> str | None:
    """Why ``state`` does not fit the graph's state model, or None. ``partial``: ``state``
    is a conversation turn's input with writes, so a field it lacks is in the thread's
    state (a required one given by an earlier turn), not missing."""
    model = graph.state_model
    try:
        model.model_validate(dict(state))
    except ValidationError as e:
        if not partial:
            return f"does not fit {model.__name__}: {problems(e, 'state')}"
        found = [f"{'.'.join(map(str, err['loc'])) or 'state'}: {err['msg']}" for err in e.errors()
                 if not (err["type"] == "missing" and len(err["loc"]) == 1 and err["loc"][0] not in state)]
        return f"does not fit {model.__name__}: {'; '.join(found)}" if found else None
    return None


def _writes(graph: ExecutableGraph, r: LoadedRun) -> Iterator[Problem]:
    """Each node's writes folded onto the run's input (a valid state) must give a valid state."""
    model = graph.state_model
    extra_ok = model.model_config.get("extra") == "allow"
    for j, w in enumerate(r.batch.writes):
        if w.kind != WriteKind.WRITES or not isinstance(w.value, Mapping):
            continue  # the value's type is reported by check_pending_writes
        where = r.at("pending_writes", j)
        unknown = [k for k in w.value if k not in model.model_fields]
        if unknown and not extra_ok:
            yield Problem(where, f"writes unknown state field(s) {names(unknown)}; {model.__name__} has: "
                                 f"{', '.join(model.model_fields)}")
            continue
        try:
            folded = fold(r.run.input, [(w.node, w.value)], graph.reducers)
        except Exception as e:  # a reducer is node-author code: any failure is the document's problem
            yield Problem(where, f"writes cannot be folded into the state: {type(e).__name__}: {e}")
            continue
        found = _misfit(graph, folded, partial=bool(r.run.options.get("turn")))
        if found:
            yield Problem(where, f"writes give a state that {found}")
