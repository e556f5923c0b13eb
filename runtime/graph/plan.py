"""Plans: graphs as data (JSON or a dict) naming registered functions.

    {"name": "refund", "state": "examples.refund:RefundState",
     "nodes": [{"id": "lookup", "fn": "lookup", "args": {"region": "eu"}},
               {"id": "pay", "fn": "pay", "after": ["lookup"], "timeout": 5,
                "retry": {"max_attempts": 3}, "when": "is_large"}]}

A node may also start a loop (``"max_iterations": 5``, with an edge back to it from a
node that runs after it) or map over a list field (``"map_over": "items"``).

``fn``, ``when`` and ``state`` name entries of a ``Registry`` or, failing that, an
importable ``module:attribute``. A plan compiles to the same ``ExecutableGraph`` as
the Python builder and is validated the same way: every problem at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from ..core.errors import ErrorClass, GraphError, InvalidRequest, Problem
from .locate import resolve_callable
from .spec import NO_RETRY, AnyState, ExecutableGraph, NodeDecl, RetryPolicy
from .validate import MAX_NESTING, build, nesting_path, show


class Registry:
    """Names a plan may use for node functions, predicates and state models."""

    def __init__(self) -> None:
        self.functions: dict[str, Callable[..., Any]] = {}
        self.states: dict[str, type[BaseModel]] = {}

    def function(self, name: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.functions[name or fn.__name__] = fn
            return fn
        return register

    def state(self, model: type[BaseModel], name: str | None = None) -> type[BaseModel]:
        self.states[name or model.__name__] = model
        return model


def _not_bool(value: Any) -> Any:
    # JSON true/false would otherwise pass as 1 and 0
    if isinstance(value, bool):
        raise PydanticCustomError("bool_not_number", "Input should be a number, not a boolean")
    return value


#: numbers in a plan: no booleans, and no NaN or infinity (they would act as "no limit")
_Count = Annotated[int, BeforeValidator(_not_bool)]
_Seconds = Annotated[float, BeforeValidator(_not_bool), Field(allow_inf_nan=False)]


class _Retry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_attempts: _Count = Field(3, ge=1)
    initial_interval: _Seconds = Field(0.5, ge=0)
    backoff: _Seconds = Field(2.0, ge=1)
    max_interval: _Seconds = Field(30.0, ge=0)
    retry_on: list[ErrorClass] = [ErrorClass.TRANSIENT, ErrorClass.DEADLINE]


class _Node(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    fn: str
    args: dict[str, Any] = {}
    after: list[str] = []
    when: str | None = None
    timeout: Annotated[_Seconds, Field(gt=0)] | None = None
    retry: _Retry | None = None
    max_iterations: Annotated[_Count, Field(ge=1)] | None = None
    map_over: str | None = None


class _Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    state: str | None = None
    nodes: list[Any]     # each checked on its own, so one bad node hides no other problem


def compile_plan(plan: Mapping[str, Any], registry: Registry | None = None) -> ExecutableGraph:
    """Validate and compile a plan; ``GraphError`` lists every problem with its location."""
    registry = registry or Registry()
    deep = nesting_path(plan)
    if deep is not None:  # checked first: everything below walks the plan recursively
        raise GraphError([Problem(_loc(tuple(deep[:4]), plan), f"nested more than {MAX_NESTING} levels deep")])
    try:
        doc = _Plan.model_validate(plan)
    except ValidationError as e:
        raise GraphError([Problem(_loc(err["loc"], plan), err["msg"]) for err in e.errors()]) from None

    problems: list[Problem] = []
    state: type[BaseModel] = AnyState
    if doc.state is not None:
        before = len(problems)
        found = _lookup(doc.state, registry.states, "state", problems, "state")
        if isinstance(found, type) and issubclass(found, BaseModel):
            state = found
        elif len(problems) == before:
            problems.append(Problem("state", f"{doc.state!r} is not a pydantic model"))

    decls: list[NodeDecl] = []
    for i, raw in enumerate(doc.nodes):
        unknown_when = False
        try:
            node = _Node.model_validate(raw)
        except ValidationError as e:
            problems.extend(Problem(_loc(("nodes", i, *err["loc"]), plan), err["msg"]) for err in e.errors())
            salvaged = _without_unknown_keys(raw, e)
            if salvaged is None:
                if isinstance(raw, dict):
                    _check_names(raw, _loc(("nodes", i), plan), registry, problems)
                node_id = raw.get("id") if isinstance(raw, dict) else None
                if isinstance(node_id, str):  # keep the id known, so its dependents are not misreported
                    # (its when= unknown too: a loop after it is not also called endless)
                    decls.append(NodeDecl(name=node_id, fn=_unresolved, location=f"nodes[{i}] ({node_id!r})",
                                          retry=NO_RETRY, when=_unresolved))
                continue
            # its own fields are still checked, and its dependencies kept; an unknown key may be
            # a misspelt ``when``, so without one its condition is not known either
            node, unknown_when = salvaged, salvaged.when is None
        where = f"nodes[{i}] ({node.id!r})"
        fn = _callable(node.fn, registry, f"{where}.fn", problems, "function")
        when = _callable(node.when, registry, f"{where}.when", problems, "predicate") if node.when else None
        if (node.when and when is None) or unknown_when:
            when = _unresolved   # said above; kept as a condition, so its loop is not also called exitless
        retry = RetryPolicy(**{**node.retry.model_dump(), "retry_on": frozenset(node.retry.retry_on)}) if node.retry else NO_RETRY
        decls.append(NodeDecl(
            name=node.id, fn=fn or _unresolved, after=tuple(node.after), retry=retry,
            timeout=node.timeout, when=when, args=node.args, location=where,
            fn_ref=node.fn, when_ref=node.when, max_iterations=node.max_iterations, map_over=node.map_over,
        ))
    try:
        graph = build(doc.name, state, decls)
    except GraphError as e:
        raise GraphError([*problems, *e.problems]) from None
    if problems:
        raise GraphError(problems)
    return graph


def _without_unknown_keys(raw: Any, error: ValidationError) -> _Node | None:
    """The node ``raw`` describes when only unknown keys are wrong with it: those are
    reported already, and hiding its other fields would hide their problems too (a
    dependency that does not exist, a map over a field the state lacks)."""
    if not isinstance(raw, dict) or any(err["type"] != "extra_forbidden" for err in error.errors()):
        return None
    try:
        return _Node.model_validate({k: v for k, v in raw.items() if k in _Node.model_fields})
    except ValidationError:
        return None


def _check_names(raw: Mapping[str, Any], where: str, registry: Registry, problems: list[Problem]) -> None:
    """Check the functions a malformed node names too, so fixing its fields reveals nothing new."""
    for key, what in (("fn", "function"), ("when", "predicate")):
        name = raw.get(key)
        if isinstance(name, str):
            _callable(name, registry, f"{where}.{key}", problems, what)


def _callable(name: str, registry: Registry, where: str, problems: list[Problem],
              what: str) -> Callable[..., Any] | None:
    """The function ``name`` stands for, or None with the reason added to ``problems``."""
    before = len(problems)
    found = _lookup(name, registry.functions, where, problems, what)
    if len(problems) > before:
        return None
    if not callable(found):  # e.g. "os:sep": it imports, but a run could never call it
        problems.append(Problem(where, f"{name!r} is a {type(found).__name__}, not a {what}: "
                                       f"{show(found)}"))
        return None
    fn: Callable[..., Any] = found
    return fn


def _unresolved(state: Any, **_: Any) -> None:  # stands in for an unknown function during validation
    raise InvalidRequest("unresolved plan function")


def _lookup(name: str, table: Mapping[str, Any], where: str, problems: list[Problem], what: str) -> Any:
    if name in table:
        return table[name]
    if ":" in name:
        try:
            return resolve_callable(name)
        except InvalidRequest as e:
            problems.append(Problem(where, str(e)))
            return None
    known = ", ".join(sorted(table)) or "none registered"
    problems.append(Problem(where, f"unknown {what} {name!r} (known: {known}; or use module:attribute)"))
    return None


def _loc(loc: tuple[Any, ...], plan: Mapping[str, Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
        try:
            node_id = plan["nodes"][loc[1]].get("id")
        except (KeyError, IndexError, AttributeError, TypeError):
            return out
        if isinstance(node_id, (str, int, float, type(None))):  # a container id could be huge
            label = repr(node_id) if isinstance(node_id, str) else show(node_id)
            out = out.replace(f"nodes[{loc[1]}]", f"nodes[{loc[1]}] ({label})", 1)
    return out or "plan"
