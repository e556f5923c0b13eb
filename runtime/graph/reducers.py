"""Per-field reducers and the canonical fold of node writes into state.

A state is a pydantic model; a field's reducer is given with ``Annotated``::

    class S(BaseModel):
        log: Annotated[list[str], append] = []
        total: Annotated[int, add] = 0
        answer: str = ""                      # last-value (the default)

Folding works on JSON-mode dicts so that it is deterministic and storable; the
result is validated into the model only when a node or a caller needs it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ..core.errors import WriteConflict
from ..core.jsonvalues import JSON




@dataclass(frozen=True, slots=True)
class Reducer:
    """Combines the current value of a field with one node's write to it."""

    name: str
    fn: Callable[[JSON, JSON], JSON]
    #: last-value fields are the only ones where two unordered writers conflict
    conflicts: bool = False
    #: built-in reducers never change their inputs; custom ones get a copy to change
    pure: bool = False

    def __call__(self, current: JSON, update: JSON) -> JSON:
        return self.fn(current, update)


def _append(current: JSON, update: JSON) -> JSON:
    items = update if isinstance(update, list) else [update]
    return [*(current or []), *items]


def _merge(current: JSON, update: JSON) -> JSON:
    return {**(current or {}), **update}


def _add(current: JSON, update: JSON) -> JSON:
    return (current or 0) + update


last_value = Reducer("last_value", lambda _current, update: update, conflicts=True, pure=True)
append = Reducer("append", _append, pure=True)
merge = Reducer("merge", _merge, pure=True)
add = Reducer("add", _add, pure=True)
#: the built-in reducers by name: a stored graph description names them, so states can
#: be rebuilt where the graph's code is not importable
BUILTIN: dict[str, Reducer] = {r.name: r for r in (last_value, append, merge, add)}


def reducer(fn: Callable[[JSON, JSON], JSON], name: str | None = None) -> Reducer:
    """Wrap ``fn(current, update) -> new`` as a custom reducer (values are JSON-mode)."""
    return Reducer(name or str(getattr(fn, "__name__", "custom")), fn)


def reducers_for(model: type[BaseModel]) -> dict[str, Reducer]:
    """The reducer of every field of a state model (last-value when none is declared)."""
    out: dict[str, Reducer] = {}
    for name, field in model.model_fields.items():
        found = [m for m in field.metadata if isinstance(m, Reducer)]
        out[name] = found[-1] if found else last_value
    return out


def fold(
    base: Mapping[str, JSON],
    writes: Iterable[tuple[str, Mapping[str, JSON]]],
    reducers: Mapping[str, Reducer],
    ordered: Callable[[str, str], bool] | None = None,
) -> dict[str, JSON]:
    """Fold ``(node, writes)`` pairs, already in canonical order, onto ``base``.

    ``ordered(a, b)`` says whether node ``a`` is an ancestor of ``b``; when given,
    two unordered writers of one last-value field raise ``WriteConflict``.
    """
    state = dict(base)
    writer: dict[str, str] = {}
    for node, update in writes:
        for field, value in update.items():
            red = reducers.get(field, last_value)
            if red.conflicts and ordered is not None:
                prev = writer.get(field)
                if prev is not None and not ordered(prev, node):
                    raise WriteConflict(field, prev, node)
                writer[field] = node
            current = state.get(field)
            if not red.pure:  # a custom reducer may change its input in place: never the shared one
                current = copy.deepcopy(current)
            state[field] = red(current, value)
    return state
