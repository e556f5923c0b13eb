"""Per-field reducers and the canonical fold of node writes into state.

A state is a pydantic model; a field's reducer is given with ``Annotated``::

    class S(BaseModel):
        log: Annotated[list[str], append] = []
        total: Annotated[int, add] = 0
        answer: str = ""                      # last-value (the default)

Folding works on JSON-mode dicts so that it is deterministic and storable; the
result is validated into the model only when a node or a caller needs it.

``field_plan(model)`` says how a state model can instead be validated one field
at a time (so a node's write costs what it writes, not what the state holds) and
how a validated state is copied for a node: ``None`` when the model's validation
is not a plain per-field affair, and callers then validate the whole state.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic_core import from_json, to_json

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
    # ``+`` from nothing is the update itself: numbers sum, lists and strings concatenate
    # (from an empty one too; ``0 + []`` would not)
    return update if current is None else current + update


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
    #: ``append`` fields whose list this fold made: extended in place (a map's many items
    #: would otherwise copy the list once each)
    own: set[str] = set()
    for node, update in writes:
        for field, value in update.items():
            red = reducers.get(field, last_value)
            if red is append:
                if field in own:
                    state[field].extend(value if isinstance(value, list) else [value])
                else:
                    state[field] = _append(state.get(field), value)
                    own.add(field)
                continue
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


# ------------------------------------------------------------------ field plans

Copier = Callable[[Any], Any]
_setattr = object.__setattr__
Schema = Mapping[str, Any]

_SCALARS = frozenset({"none", "bool", "int", "float", "str", "literal"})
#: validated values of these types cannot be changed in place, so nodes may share them
_IMMUTABLE = _SCALARS | {"bytes", "date", "time", "datetime", "timedelta", "uuid", "enum", "url",
                         "multi-host-url"}
#: schema types whose Python-mode validation of parsed JSON gives what JSON-mode
#: validation of the same text gives (no ``json-or-python``, ``is-instance``, decimals...)
_SAFE = _IMMUTABLE | {"any", "list", "dict", "tuple", "set", "frozenset", "nullable", "default", "union",
                      "tagged-union", "model", "model-fields", "definitions", "definition-ref",
                      "function-after", "function-before", "function-wrap", "function-plain"}
#: validators that may hand back (parts of) their input as it is
_PASS_INPUT = frozenset({"any", "function-before", "function-wrap", "function-plain"})
#: a copier's answer: no quick copy; validate the field again for each node
_REVALIDATE = "revalidate"
#: copies of containers whose items are immutable
_SHALLOW: dict[str, Copier] = {"list": list.copy, "set": set.copy, "dict": dict.copy}


@dataclass(frozen=True, slots=True)
class FieldPlan:
    """A state model whose validation is field by field: validating the fields a write
    changes, on a copy of an already validated state, gives what validating the whole
    folded state gives (the same values, or an error for the same field)."""

    model: type[BaseModel]
    #: fields holding containers of immutable values, with the copy a node gets of them
    copies: tuple[tuple[str, Copier], ...]
    #: fields a node gets validated afresh from their JSON (mutable models, validators...)
    revalidate: tuple[str, ...]
    #: as ``revalidate``, from a copy of their JSON (``Any`` parts would share it otherwise)
    refresh: tuple[str, ...]
    #: ``append`` fields of plain lists: validating the appended items alone validates the list
    appends: frozenset[str]

    def copy(self, state: BaseModel) -> BaseModel:
        """A shallow copy of a validated state (see ``copy_model``)."""
        return copy_model(state)

    def assign(self, state: BaseModel, field: str, value: JSON) -> None:
        """Validate ``value`` into ``state.field`` in place (``ValidationError`` if it does not fit)."""
        self.model.__pydantic_validator__.validate_assignment(state, field, value)

    def extend(self, state: BaseModel, field: str, update: JSON) -> None:
        """``state.field`` (an ``appends`` field) with ``update`` appended, validating only
        the new items: what folding ``update`` with ``append`` and validating gives."""
        before = state.__dict__[field]
        self.assign(state, field, update if isinstance(update, list) else [update])
        state.__dict__[field] = [*before, *state.__dict__[field]]

    def items(self, scratch: BaseModel, field: str, update: JSON) -> list[Any]:
        """The items ``update`` appends to ``field`` (an ``appends`` field), validated: what
        ``extend`` adds to the list (``ValidationError`` if one does not fit). ``scratch``
        is any model of this plan's, changed: a field validates alone (see ``field_plan``)."""
        self.model.__pydantic_validator__.validate_assignment(scratch, field, update if isinstance(update, list)
                                                              else [update])
        new: list[Any] = scratch.__dict__[field]
        return new

    def for_node(self, validated: BaseModel, state: Mapping[str, JSON]) -> BaseModel:
        """A copy of ``validated`` (the validation of ``state``) that shares nothing a
        node could change in place with it or with ``state``."""
        out = copy_model(validated)
        values = out.__dict__
        for field, copier in self.copies:
            values[field] = copier(values[field])
        for field in self.revalidate:
            self.assign(out, field, state[field])
        for field in self.refresh:
            self.assign(out, field, _fresh(state[field]))
        extra = out.__pydantic_extra__   # not ``model_extra``: a property, a call
        if extra:
            for key in extra:
                extra[key] = _fresh(extra[key])
        return out


def copy_model(state: BaseModel) -> BaseModel:
    """A shallow copy of a validated state of a planned model, as ``copy.copy`` makes it.
    A planned model has no private attributes, so this skips pydantic's probe for them
    (a failed attribute lookup, the costliest part of a copy)."""
    cls = type(state)
    out = cls.__new__(cls)
    extra = state.__pydantic_extra__
    _setattr(out, "__dict__", dict(state.__dict__))
    _setattr(out, "__pydantic_extra__", None if extra is None else dict(extra))
    _setattr(out, "__pydantic_fields_set__", set(state.__pydantic_fields_set__))
    _setattr(out, "__pydantic_private__", None)
    return out


def field_plan(model: type[BaseModel]) -> FieldPlan | None:
    """How ``model`` validates and copies field by field, or None when it cannot: model
    validators, validators or serialisers that see other fields (``info``), strict mode,
    aliases, frozen fields, private attributes, computed fields, typed extras, and types
    whose Python and JSON validation differ all make callers validate the whole state."""
    try:
        return _PLANS[model]
    except KeyError:
        pass
    try:
        plan = _plan(model)
    except (KeyError, TypeError, AttributeError):  # a schema shape this does not know: validate whole states
        plan = None
    _PLANS[model] = plan
    return plan


_PLANS: weakref.WeakKeyDictionary[type[BaseModel], FieldPlan | None] = weakref.WeakKeyDictionary()


def _plan(model: type[BaseModel]) -> FieldPlan | None:
    schema: Schema = model.__pydantic_core_schema__
    if not _safe(schema) or model.__private_attributes__ or model.model_config.get("frozen"):
        return None
    defs = {d["ref"]: d for d in schema.get("definitions", ())}
    top = schema["schema"] if schema["type"] == "definitions" else schema
    if (top["type"] != "model" or top.get("root_model") or top.get("custom_init") or top.get("post_init")
            or "serialization" in top or top["schema"]["type"] != "model-fields"):
        return None
    fields_schema = top["schema"]
    if fields_schema.get("computed_fields") or "extras_schema" in fields_schema:
        return None
    copies: list[tuple[str, Copier]] = []
    revalidate: list[str] = []
    refresh: list[str] = []
    appends: set[str] = set()
    reducers = reducers_for(model)
    for name, field in fields_schema["fields"].items():
        if field.get("frozen") or "validation_alias" in field or "serialization_alias" in field:
            return None
        inner = field["schema"]["schema"] if field["schema"]["type"] == "default" else field["schema"]
        # a list with no length bounds or validators of its own validates item by item
        if reducers[name] is append and inner["type"] == "list" and set(inner) <= {"type", "items_schema"}:
            appends.add(name)
        how = _copier(field["schema"], defs, frozenset())
        if isinstance(how, str):
            (refresh if _passes_input(field["schema"], defs, frozenset()) else revalidate).append(name)
        elif how is not None:
            copies.append((name, how))
    return FieldPlan(model, tuple(copies), tuple(revalidate), tuple(refresh), frozenset(appends))


def _safe(schema: Schema) -> bool:
    kind = schema.get("type")
    function = schema.get("function")
    serializer = schema.get("serialization")
    if (kind not in _SAFE or schema.get("strict")
            or (isinstance(function, Mapping) and function.get("type") == "with-info")
            or (isinstance(serializer, Mapping) and serializer.get("info_arg"))):
        return False
    if kind == "model":
        config = schema.get("config", {})
        if config.get("strict") or config.get("val_json_bytes", "utf8") != "utf8":
            return False
    if kind == "union":  # smart unions pick differently in Python and JSON mode, except among scalars
        choices = [c[0] if isinstance(c, tuple) else c for c in schema["choices"]]
        return all(c.get("type") in _SCALARS and _safe(c) for c in choices)
    return all(_safe(c) for c in _children(schema))


def _children(schema: Schema) -> list[Schema]:
    kind = schema["type"]
    if kind in ("tagged-union", "union"):
        choices = schema["choices"].values() if kind == "tagged-union" else schema["choices"]
        return [c[0] if isinstance(c, tuple) else c for c in choices]
    if kind == "model-fields":
        extras = [schema["extras_schema"]] if "extras_schema" in schema else []
        return [f["schema"] for f in schema["fields"].values()] + extras
    if kind == "definitions":
        return [schema["schema"], *schema["definitions"]]
    if kind == "tuple":
        return list(schema.get("items_schema", []))
    return [schema[k] for k in ("schema", "items_schema", "keys_schema", "values_schema") if k in schema]


def _resolve(schema: Schema, defs: Mapping[str, Schema], seen: frozenset[str]) -> tuple[Schema, frozenset[str]] | None:
    """``schema`` with a definition reference followed; None for a reference already being
    followed (a recursive model) or one not found."""
    if schema["type"] != "definition-ref":
        return schema, seen
    ref = schema["schema_ref"]
    if ref in seen or ref not in defs:
        return None
    return defs[ref], seen | {ref}


def _passes_input(schema: Schema, defs: Mapping[str, Schema], seen: frozenset[str]) -> bool:
    """Whether validating may keep objects of its input in its output (``Any``, validators
    that return what they are given, extra fields of a nested model)."""
    found = _resolve(schema, defs, seen)
    if found is None:
        return False  # the outer visit of that definition answers for it
    schema, seen = found
    if schema["type"] in _PASS_INPUT:
        return True
    if schema["type"] == "model" and schema.get("config", {}).get("extra_fields_behavior") == "allow":
        return True
    return any(_passes_input(c, defs, seen) for c in _children(schema))


def _copier(schema: Schema, defs: Mapping[str, Schema], seen: frozenset[str]) -> Copier | str | None:
    """How a node gets its own copy of a validated value of ``schema``: None (immutable,
    shared), a function copying it, or ``_REVALIDATE``."""
    found = _resolve(schema, defs, seen)
    if found is None:
        return _REVALIDATE
    schema, seen = found
    kind = schema["type"]
    if kind in _IMMUTABLE:
        return None
    if kind == "default":
        return _copier(schema["schema"], defs, seen)
    if kind == "model":  # a frozen model of immutable values is immutable: shared
        cls = schema["cls"]
        fields = schema["schema"].get("fields", {}) if schema["schema"]["type"] == "model-fields" else None
        frozen = (cls.model_config.get("frozen") and not cls.__private_attributes__ and fields is not None
                  and cls.model_config.get("extra") != "allow")
        return None if frozen and all(_copier(f["schema"], defs, seen | {schema.get("ref", "")}) is None
                                      for f in (fields or {}).values()) else _REVALIDATE
    if kind == "nullable":
        inner = _copier(schema["schema"], defs, seen)
        return inner if inner is None or isinstance(inner, str) else _or_none(inner)
    if kind in ("tuple", "frozenset", "union"):
        parts = _children(schema)
        shared = all(_copier(p, defs, seen) is None for p in parts)
        return None if shared and parts else _REVALIDATE
    if kind in ("list", "set", "dict"):
        item = schema.get("values_schema" if kind == "dict" else "items_schema")
        inner = _copier(item, defs, seen) if item is not None else _REVALIDATE
        if kind == "dict" and _copier(schema.get("keys_schema", {"type": "str"}), defs, seen) is not None:
            return _REVALIDATE
        if inner is None:
            return _SHALLOW[kind]
        if isinstance(inner, str) or kind == "set":
            return _REVALIDATE
        return _each_item(inner) if kind == "list" else _each_value(inner)
    return _REVALIDATE


def _or_none(inner: Copier) -> Copier:
    return lambda value: None if value is None else inner(value)


def _each_item(inner: Copier) -> Copier:
    return lambda value: [inner(x) for x in value]


def _each_value(inner: Copier) -> Copier:
    return lambda value: {k: inner(x) for k, x in value.items()}


def _fresh(value: JSON) -> JSON:
    """A JSON value copied through its text: nothing shared, nothing aliased."""
    return from_json(to_json(value))
