"""Plans: graphs as data (JSON or a dict) naming registered functions.

    {"name": "refund", "state": "examples.refund:RefundState",
     "nodes": [{"id": "lookup", "fn": "lookup", "args": {"region": "eu"}},
               {"id": "pay", "fn": "pay", "after": ["lookup"], "timeout": 5,
                "retry": {"max_attempts": 3}, "when": "is_large"}]}

A node may also start a loop (``"max_iterations": 5``, with an edge back to it from a
node that runs after it) or map over a list field (``"map_over": "items"``).

A node may run a subgraph instead of a function, as ``Graph.subgraph`` does: its
``"subgraph"`` names a graph (a ``Graph``, ``ExecutableGraph`` or plan) or is a plan
itself, written inline; like ``Graph.subgraph`` it takes only ``id`` and ``after``:

    {"id": "review", "after": ["pay"], "subgraph": {"state": "Review", "nodes": [
        {"id": "check", "fn": "check"}, {"id": "note", "fn": "note", "after": ["check"]}]}}

Its nodes run as ``review/check`` and ``review/note``, then ``review`` itself. A nested
plan without ``state`` sees its parent's; one with its own must be a view of the
parent's (the same fields, types and reducers). Problems inside are located by path:
``nodes[2] ('review').subgraph.nodes[0] ('check').fn``.

``fn``, ``when``, ``state`` and ``subgraph`` name entries of a ``Registry`` or, failing
that, an importable ``module:attribute``. A plan compiles to the same ``ExecutableGraph``
as the Python builder and is validated the same way: every problem at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from ..core.errors import ErrorClass, GraphError, InvalidRequest, Problem
from .builder import Graph, subgraph_decls, view_problems
from .registry import Registry, lookup, named_callable
from .spec import NO_RETRY, AnyState, ExecutableGraph, NodeDecl, RetryPolicy
from .validate import MAX_NESTING, NO_NODES, build, nesting_path, show

__all__ = ["Registry", "compile_plan"]

def _number(value: Any) -> Any:
    # JSON true/false would otherwise pass as 1 and 0, and "3" as 3: a plan says what it means
    if isinstance(value, bool):
        raise PydanticCustomError("bool_not_number", "Input should be a number, not a boolean")
    if isinstance(value, str):
        raise PydanticCustomError("str_not_number", "Input should be a number, not a string")
    return value


#: numbers in a plan: no booleans or strings, and no NaN or infinity (they would act as "no limit")
_Count = Annotated[int, BeforeValidator(_number)]
_Seconds = Annotated[float, BeforeValidator(_number), Field(allow_inf_nan=False)]


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


class _SubgraphNode(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    subgraph: Any        # a name or a nested plan: checked by ``_child``, with a message of its own
    after: list[str] = []


_M = TypeVar("_M", bound=BaseModel)

#: how many plans may run inside one another: a document's own nesting is bounded by
#: MAX_NESTING, a chain of registered plans naming the next only by this
MAX_SUBGRAPH_DEPTH = 50


@dataclass
class _Scope:
    """One plan being compiled (nested plans have their own), and where its problems go."""

    plan: Mapping[str, Any]
    registry: Registry
    state: type[BaseModel]
    state_known: bool            # False when its state could not be found: views go unchecked
    within: tuple[str, ...]      # the named plans being compiled around it (to refuse a plan in itself)
    depth: int                   # how many plans, named or inline, are around it
    problems: list[Problem] = field(default_factory=list)


@dataclass(frozen=True)
class _Subgraph:
    """A subgraph node whose graph compiled: expanded once every node's name is known."""

    id: str
    where: str
    after: tuple[str, ...]
    child: ExecutableGraph
    prefix: str


def compile_plan(plan: Mapping[str, Any], registry: Registry | None = None) -> ExecutableGraph:
    """Validate and compile a plan; ``GraphError`` lists every problem with its location."""
    return _compile(plan, registry or Registry(), AnyState, (), 0)


def _compile(plan: Mapping[str, Any], registry: Registry, inherited: type[BaseModel],
             within: tuple[str, ...], depth: int) -> ExecutableGraph:
    """``compile_plan``, for a plan whose state is ``inherited`` unless it names its own."""
    if depth > MAX_SUBGRAPH_DEPTH:   # a chain of named plans, which no one document's nesting bounds
        raise GraphError([Problem("plan", f"subgraphs nested more than {MAX_SUBGRAPH_DEPTH} plans deep")])
    deep = nesting_path(plan)
    if deep is not None:  # checked first: everything below walks the plan recursively
        raise GraphError([Problem(_loc(tuple(deep[:4]), plan), f"nested more than {MAX_NESTING} levels deep")])
    try:
        doc = _Plan.model_validate(plan)
    except ValidationError as e:
        raise GraphError([Problem(_loc(err["loc"], plan), _msg(err)) for err in e.errors()]) from None

    scope = _Scope(plan, registry, inherited, True, within, depth)
    problems = scope.problems
    if doc.state is not None:
        before = len(problems)
        found = lookup(doc.state, registry.states, "state", problems, "state")
        if isinstance(found, type) and issubclass(found, BaseModel):
            scope.state = found
        else:
            if len(problems) == before:
                problems.append(Problem("state", f"{doc.state!r} is not a pydantic model"))
            scope.state, scope.state_known = AnyState, False

    slots: list[NodeDecl | _Subgraph] = []
    for i, raw in enumerate(doc.nodes):
        if isinstance(raw, dict) and "subgraph" in raw:
            slot = _subgraph_node(i, raw, scope)
            if slot is not None:
                slots.append(slot)
            continue
        unknown_when = False
        try:
            node = _Node.model_validate(raw)
        except ValidationError as e:
            problems.extend(Problem(_loc(("nodes", i, *err["loc"]), plan), _msg(err)) for err in e.errors())
            salvaged = _without_unknown_keys(_Node, raw, e)
            if salvaged is None:
                if isinstance(raw, dict):
                    _check_names(raw, _loc(("nodes", i), plan), registry, problems)
                node_id = raw.get("id") if isinstance(raw, dict) else None
                if isinstance(node_id, str):  # keep the id known, so its dependents are not misreported
                    slots.append(_placeholder(node_id, f"nodes[{i}] ({node_id!r})"))
                continue
            # its own fields are still checked, and its dependencies kept; an unknown key may be
            # a misspelt ``when``, so without one its condition is not known either
            node, unknown_when = salvaged, salvaged.when is None
        where = f"nodes[{i}] ({node.id!r})"
        fn = named_callable(node.fn, registry, f"{where}.fn", problems, "function")
        when = named_callable(node.when, registry, f"{where}.when", problems, "predicate") if node.when else None
        if (node.when and when is None) or unknown_when:
            when = _unresolved   # said above; kept as a condition, so its loop is not also called exitless
        retry = RetryPolicy(**{**node.retry.model_dump(), "retry_on": frozenset(node.retry.retry_on)}) if node.retry else NO_RETRY
        slots.append(NodeDecl(
            name=node.id, fn=fn or _unresolved, after=tuple(node.after), retry=retry,
            timeout=node.timeout, when=when, args=node.args, location=where,
            fn_ref=node.fn, when_ref=node.when, max_iterations=node.max_iterations, map_over=node.map_over,
        ))
    decls = _expand(slots, scope)
    try:
        graph = build(doc.name, scope.state, decls)
    except GraphError as e:
        # a plan whose nodes all failed to read has none left: that is said of each already
        found = [p for p in e.problems if not (doc.nodes and p.message == NO_NODES)]
        raise GraphError([*problems, *found]) from None
    if problems:
        raise GraphError(problems)
    return graph


def _subgraph_node(i: int, raw: dict[str, Any], scope: _Scope) -> NodeDecl | _Subgraph | None:
    """A node that runs a subgraph: what it may hold is what ``Graph.subgraph`` takes."""
    problems = scope.problems
    where = _loc(("nodes", i), scope.plan)
    for key in raw:
        if key == "fn":
            problems.append(Problem(where, "names both a function (fn) and a subgraph; a node runs one or the other"))
            if isinstance(raw["fn"], str):   # so removing the subgraph reveals nothing new
                named_callable(raw["fn"], scope.registry, f"{where}.fn", problems, "function")
        elif key in _Node.model_fields and key not in _SubgraphNode.model_fields:
            problems.append(Problem(f"{where}.{key}", f"{key!r} is an option of a function node; "
                                                      "a subgraph node takes only id, subgraph and after"))
    fields = {k: v for k, v in raw.items() if k in _SubgraphNode.model_fields or k not in _Node.model_fields}
    try:
        node: _SubgraphNode | None = _SubgraphNode.model_validate(fields)
    except ValidationError as e:
        problems.extend(Problem(_loc(("nodes", i, *err["loc"]), scope.plan), _msg(err)) for err in e.errors())
        node = _without_unknown_keys(_SubgraphNode, fields, e)
    if node is None:
        node_id = raw.get("id")
        _child(raw["subgraph"], f"{where}.subgraph", node_id if isinstance(node_id, str) else "subgraph", scope)
        # keep a valid id known, so its dependents are not misreported
        return _placeholder(node_id, where) if isinstance(node_id, str) else None
    found = _child(node.subgraph, f"{where}.subgraph", node.id, scope)
    if found is None:
        return _placeholder(node.id, where, tuple(node.after))
    child, prefix = found
    return _Subgraph(node.id, where, tuple(node.after), child, prefix)


def _child(spec: Any, where: str, node_id: str, scope: _Scope) -> tuple[ExecutableGraph, str] | None:
    """The graph a subgraph node runs and the prefix that locates its nodes, or None with
    the reasons added to the scope's problems."""
    problems = scope.problems
    if isinstance(spec, dict):
        child = _nested(spec, node_id, where, ".", scope, scope.within)
        if child is not None and "state" in spec and scope.state_known:
            problems.extend(view_problems(f"{where}.state", child, scope.state))
        return None if child is None else (child, f"{where}.")
    if not isinstance(spec, str) or not spec:
        problems.append(Problem(where, "must name a graph (registered, or module:attribute) or be a plan "
                                       f"(an object with its nodes), got {show(spec)}"))
        return None
    if spec in scope.within:   # a plan naming itself, directly or through others, would never end
        cycle = " → ".join(map(repr, (*scope.within[scope.within.index(spec):], spec)))
        problems.append(Problem(where, f"subgraph {spec!r} contains itself: {cycle}"))
        return None
    before = len(problems)
    found = lookup(spec, scope.registry.graphs, where, problems, "subgraph")
    if len(problems) > before:
        return None
    label = f"{where} {spec!r}"
    named: ExecutableGraph | None
    if isinstance(found, Mapping):
        named = _nested(found, spec, label, ": ", scope, (*scope.within, spec))
    elif isinstance(found, Graph):
        try:
            named = found.compile()
        except GraphError as e:
            problems.extend(Problem(f"{label}: {p.location}", p.message) for p in e.problems)
            return None
    elif isinstance(found, ExecutableGraph):
        named = found
    else:
        problems.append(Problem(where, f"{spec!r} is a {type(found).__name__}, not a graph: {show(found)}"))
        return None
    if named is None:
        return None
    if scope.state_known:
        problems.extend(view_problems(where, named, scope.state))
    return named, f"{label} "


def _nested(plan: Mapping[str, Any], name: str, label: str, sep: str, scope: _Scope,
            within: tuple[str, ...]) -> ExecutableGraph | None:
    """A plan used as a subgraph, compiled with its parent's state unless it names its own;
    its problems are located under ``label``."""
    doc = plan if "name" in plan else {"name": name, **plan}
    try:
        return _compile(doc, scope.registry, scope.state, within, scope.depth + 1)
    except GraphError as e:
        scope.problems.extend(Problem(label if p.location in ("plan", "graph") else f"{label}{sep}{p.location}",
                                      p.message) for p in e.problems)
        return None


def _expand(slots: list[NodeDecl | _Subgraph], scope: _Scope) -> list[NodeDecl]:
    """The plan's declarations in its order, each subgraph node expanded into its nodes.

    A subgraph's ``after`` is checked here, at the node that holds it: expanded, it would
    be reported at each of the subgraph's first nodes instead."""
    names: set[str] = set()
    for slot in slots:
        if isinstance(slot, _Subgraph):
            names |= {slot.id, *(f"{slot.id}/{n}" for n in slot.child.order)}
        elif isinstance(slot.name, str):
            names.add(slot.name)
    decls: list[NodeDecl] = []
    for slot in slots:
        if isinstance(slot, NodeDecl):
            decls.append(slot)
            continue
        after: list[str] = []
        for j, dep in enumerate(slot.after):
            if dep not in names:
                scope.problems.append(Problem(f"{slot.where} after[{j}]",
                                              f"unknown dependency {dep!r}; known nodes: {', '.join(sorted(names))}"))
            elif dep in after:
                scope.problems.append(Problem(f"{slot.where} after[{j}]", f"dependency {dep!r} listed twice"))
            else:
                after.append(dep)
        decls.extend(subgraph_decls(slot.id, slot.child, after, scope.state, prefix=slot.prefix, end=slot.where))
    return decls


def _placeholder(name: str, where: str, after: tuple[str, ...] = ()) -> NodeDecl:
    """Stands for a node that could not be compiled, so its dependents are not misreported
    (and, its condition unknown, a loop through it is not also called exitless)."""
    return NodeDecl(name=name, fn=_unresolved, after=after, location=where, retry=NO_RETRY, when=_unresolved)


def _msg(err: Any) -> str:
    """A validation error's message in the plan's terms: where an object was expected, the
    message names the internal model that would read it, which means nothing to a plan's author."""
    if err["type"] in ("model_type", "dict_type", "model_attributes_type"):
        return f"must be a JSON object, got {_JSON_KINDS.get(type(err['input']), type(err['input']).__name__)}"
    return str(err["msg"])


_JSON_KINDS = {str: "a string", int: "a number", float: "a number", bool: "true or false", list: "an array",
               type(None): "null"}


def _without_unknown_keys(model: type[_M], raw: Any, error: ValidationError) -> _M | None:
    """The node ``raw`` describes when only unknown keys are wrong with it: those are
    reported already, and hiding its other fields would hide their problems too (a
    dependency that does not exist, a map over a field the state lacks)."""
    if not isinstance(raw, dict) or any(err["type"] != "extra_forbidden" for err in error.errors()):
        return None
    try:
        return model.model_validate({k: v for k, v in raw.items() if k in model.model_fields})
    except ValidationError:
        return None


def _check_names(raw: Mapping[str, Any], where: str, registry: Registry, problems: list[Problem]) -> None:
    """Check the functions a malformed node names too, so fixing its fields reveals nothing new."""
    for key, what in (("fn", "function"), ("when", "predicate")):
        name = raw.get(key)
        if isinstance(name, str):
            named_callable(name, registry, f"{where}.{key}", problems, what)


def _unresolved(state: Any, **_: Any) -> None:  # stands in for an unknown function during validation
    raise InvalidRequest("unresolved plan function")


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
