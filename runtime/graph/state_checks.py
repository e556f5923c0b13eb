"""Checks of a state model alone, before any run: its reducers and its aliases.

A field's reducer must be a ``Reducer`` whose result its type can hold. A model whose
fields have aliases is refused unless it also validates by name: a run keeps its state
as JSON keyed by field name (what ``model_dump`` gives), and validates it again wherever a
node or a page reads it. A model with aliases that takes
only its aliases would drop every stored value as an unknown key and fill in defaults:
the run would succeed with its input and its writes silently lost. Nested models are
read back the same way, so they are checked too.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Iterable

from pydantic import AliasChoices, BaseModel
from pydantic.fields import FieldInfo

from ..core.errors import Problem
from .reducers import Reducer, add, append, merge

_NONE = type(None)
#: field types each built-in reducer can never produce: every write to such a field fails
#: (append makes a list, merge a dict, add uses ``+``, which dicts and sets lack). Models are
#: left out: a RootModel may be any of these.
_MISFITS: dict[Reducer, tuple[tuple[type, ...], str]] = {
    append: ((str, bytes, int, float, dict, _NONE), "makes a list: type it list[...]"),
    merge: ((str, bytes, int, float, list, tuple, set, frozenset, _NONE), "makes a dict: type it dict[...]"),
    add: ((set, frozenset, dict, _NONE),
          "adds with +: type it a number, a list or a string (to merge a dict, use merge)"),
}


def reducer_problems(state: type[BaseModel]) -> Iterable[Problem]:
    """A bare function in a field's ``Annotated`` (``operator.add``, as other libraries take
    it) would be ignored, leaving the field last-value: each write would replace the value
    it meant to extend. A built-in reducer whose result the field's type can never hold
    would fail every write, and is refused before a run is created."""
    for field, info in getattr(state, "model_fields", {}).items():
        for m in info.metadata:
            if inspect.isroutine(m) or isinstance(m, functools.partial):
                name = getattr(m, "__name__", repr(m))
                yield Problem(f"state {state.__name__}.{field}",
                              f"{name} is a plain function, not a reducer (it would be ignored and the "
                              f"field be last-value): write reducer({name}), or use append, merge or add")
        used = [m for m in info.metadata if isinstance(m, Reducer)]
        misfit = _MISFITS.get(used[-1]) if used else None
        if misfit is not None and not _may_be(info.annotation, misfit[0]):
            shown = show_type(info.annotation) if isinstance(info.annotation, type) else str(info.annotation)
            yield Problem(f"state {state.__name__}.{field}",
                          f"typed {shown.replace('typing.', '')} but its reducer {used[-1].name!r} "
                          f"{misfit[1]}; as it is, every write to it would fail")


#: field types that can never hold a list (a map over one fails every run)
_NOT_LISTS = (str, bytes, int, float, bool, dict)


def _may_be(annotation: object, never: tuple[type, ...]) -> bool:
    """Whether a field of this type may hold a value of none of the types ``never``
    (unions: any member may)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_may_be(a, never) for a in typing.get_args(annotation))
    if origin is typing.Annotated:
        return _may_be(typing.get_args(annotation)[0], never)
    base = _NONE if annotation is None else origin or annotation
    return not (isinstance(base, type) and issubclass(base, never))


def may_be_list(annotation: object) -> bool:
    """Whether a field of this type may hold a list."""
    return _may_be(annotation, _NOT_LISTS)


def show_type(annotation: object) -> str:
    return getattr(annotation, "__name__", None) or str(annotation)



def alias_problems(state: type[BaseModel]) -> Iterable[Problem]:
    seen: set[type[BaseModel]] = set()
    for model, where in _models(state, f"state {state.__name__}", seen):
        config = model.model_config
        if config.get("validate_by_name") or config.get("populate_by_name"):
            continue
        aliased = [(name, alias) for name, info in model.model_fields.items()
                   if not _takes_name(name, alias := _validated_as(info))]
        if aliased:
            name, alias = aliased[0]
            more = f" (and {len(aliased) - 1} more)" if len(aliased) > 1 else ""
            yield Problem(where, f"field {name!r} of {model.__name__} has the alias {alias!r}{more}, and the "
                                 f"model takes only aliases: a run stores its state by field name, so every "
                                 f"value would be dropped; set model_config = ConfigDict(validate_by_name=True) "
                                 f"on {model.__name__}, or drop the aliases")


def _validated_as(info: FieldInfo) -> object:
    """What validation reads a field by: its validation alias, else its alias (None: its name)."""
    return info.validation_alias if info.validation_alias is not None else info.alias


def _takes_name(name: str, alias: object) -> bool:
    """Whether validation takes the field by its name: no alias, the name itself, or one of
    its choices (``AliasChoices("full_name", "fullName")``)."""
    if alias is None or alias == name:
        return True
    return isinstance(alias, AliasChoices) and name in alias.choices


def _models(model: type[BaseModel], where: str, seen: set[type[BaseModel]]
            ) -> Iterable[tuple[type[BaseModel], str]]:
    if model in seen:
        return
    seen.add(model)
    yield model, where
    for name, info in model.model_fields.items():
        for inner in _inner_models(info.annotation):
            yield from _models(inner, f"{where}.{name}", seen)


def _inner_models(annotation: object) -> Iterable[type[BaseModel]]:
    """The model classes an annotation holds: itself, or inside list[...], X | None, dict[...]."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _inner_models(arg)
