"""Graph validation: collect every problem, with its location, before anything runs."""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from ..core.errors import ErrorClass, GraphError, Problem
from ..core.records import thread_id_problem
from .exits import endless_loops
from .loops import canonical_order, check_loop, cycles
from .spec import AnyState, ExecutableGraph, NodeDecl, NodeSpec, RetryPolicy
from .state_checks import alias_problems, may_be_list, reducer_problems, show_type

_CTX_NAMES = {"ctx", "context"}
NO_NODES = "a graph needs at least one node"
_ID = re.compile(r"[\w.-]+")  # letters (any script), digits, _ . -
_PATH = re.compile(r"[\w.-]+(/[\w.-]+)+")  # a subgraph's node: sub/inner

#: how deeply a plan or a node's args may nest; deeper values would exhaust the stack of
#: the recursive code that hashes, stores and prints them
MAX_NESTING = 100


def build(name: str, state: type[BaseModel], decls: Sequence[NodeDecl]) -> ExecutableGraph:
    problems: list[Problem] = []
    if not isinstance(name, str) or not name:
        problems.append(Problem("graph", "a graph needs a non-empty name"))
    elif (wrong_name := thread_id_problem(name)) is not None:   # stored as text, as a thread id is
        problems.append(Problem("graph", f"a graph's name {wrong_name}"))
    if not decls:
        problems.append(Problem("graph", NO_NODES))
    wrong_state = state_problem(state)
    if wrong_state is not None:
        problems.append(Problem("graph state", wrong_state))
        state = AnyState   # the nodes are still checked, against a state that takes any field

    first_at: dict[str, str] = {}
    good: list[NodeDecl] = []
    for d in decls:
        if d.scoped and isinstance(d.name, str) and _PATH.fullmatch(d.name):
            pass
        elif not isinstance(d.name, str) or not _ID.fullmatch(d.name):
            problems.append(Problem(d.location, f"node id {d.name!r} must be a non-empty string of letters, digits, '_', '-' or '.'"))
            continue
        if d.name.startswith("__"):
            problems.append(Problem(d.location, f"node id {d.name!r}: ids starting with '__' are reserved"))
            continue
        if d.name in first_at:
            problems.append(Problem(d.location, f"duplicate node id {d.name!r} (first declared at {first_at[d.name]})"))
            continue
        first_at[d.name] = d.location
        good.append(d)

    problems.extend(reducer_problems(state))
    problems.extend(alias_problems(state))
    names = set(first_at)
    deps: dict[str, list[str]] = {}
    specs: list[NodeSpec] = []
    for d in good:
        deps[d.name] = _check_deps(d, names, problems)
        spec = _check_node(d, state, problems)
        if spec is not None:
            specs.append(spec)

    by_name = {d.name: d for d in good}
    loops: dict[str, list[str]] = {}
    bad: set[str] = set()
    for comp, cycle in cycles(deps):
        problem = check_loop(comp, cycle, deps, by_name, loops)
        if problem is not None:
            problems.append(problem)
            bad |= comp
    # a node with a dependency left out (reported above) is not known to always run
    partial = {d.name for d in good if not isinstance(d.after, (list, tuple)) or len(deps[d.name]) != len(d.after)}
    problems.extend(endless_loops(deps, by_name, loops, bad | partial))
    for d in good:
        if d.max_iterations is not None and d.name not in loops and d.name not in bad:
            problems.append(Problem(d.location, f"max_iterations bounds a loop, and {d.name!r} is in no cycle; "
                                                "give it to the node each iteration starts at"))
    problems.extend(_unreachable(deps, names, bad, decls))

    if problems:
        raise GraphError(problems)
    return ExecutableGraph(name, state, specs, canonical_order(deps, loops), loops)


def is_model(state: object) -> bool:
    return isinstance(state, type) and issubclass(state, BaseModel)


def state_problem(state: object) -> str | None:
    """Why ``state`` cannot be a graph's state, or None: fields, validation and reducers
    come from a pydantic model class (a TypedDict or a dataclass has none of them)."""
    if is_model(state):
        return None
    if isinstance(state, BaseModel):
        what = f"an instance of {type(state).__name__}; pass the class itself"
    elif isinstance(state, type) and typing.is_typeddict(state):
        what = f"TypedDict {state.__name__!r}; declare it as class {state.__name__}(BaseModel) with the same fields"
    elif isinstance(state, type) and dataclasses.is_dataclass(state):
        what = f"dataclass {state.__name__!r}; declare it as class {state.__name__}(BaseModel) with the same fields"
    elif isinstance(state, type):
        what = repr(state.__name__)
    else:
        what = show(state)
    return f"state must be a pydantic model class (a subclass of BaseModel), got {what}"


def _check_deps(d: NodeDecl, names: set[str], problems: list[Problem]) -> list[str]:
    after = d.after
    if isinstance(after, str) or not isinstance(after, (list, tuple)):
        problems.append(Problem(d.location, f"after must be a list of node ids, got {after!r}"))
        return []
    out: list[str] = []
    for i, dep in enumerate(after):
        if dep not in names:
            hint = f"; known nodes: {', '.join(sorted(names))}" if names else ""
            problems.append(Problem(f"{d.location} after[{i}]", f"unknown dependency {dep!r}{hint}"))
        elif dep in out:
            problems.append(Problem(f"{d.location} after[{i}]", f"dependency {dep!r} listed twice"))
        else:
            out.append(dep)
    return out


def _check_node(d: NodeDecl, state: type[BaseModel], problems: list[Problem]) -> NodeSpec | None:
    before = len(problems)
    if d.max_iterations is not None and (isinstance(d.max_iterations, bool) or not isinstance(d.max_iterations, int)
                                         or d.max_iterations < 1):
        problems.append(Problem(f"{d.location} max_iterations",
                                f"must be a whole number >= 1, got {show(d.max_iterations)}"))
    if d.map_over is not None:
        extra = state.model_config.get("extra") == "allow"
        if not isinstance(d.map_over, str) or not d.map_over:
            problems.append(Problem(f"{d.location} map_over", f"must name a state field, got {show(d.map_over)}"))
        elif d.map_over not in state.model_fields and not extra:
            problems.append(Problem(f"{d.location} map_over", f"{d.map_over!r} is not a field of {state.__name__}; "
                                                              f"fields are: {', '.join(state.model_fields)}"))
        elif d.map_over in state.model_fields and not may_be_list(state.model_fields[d.map_over].annotation):
            problems.append(Problem(f"{d.location} map_over", f"field {d.map_over!r} is typed "
                                    f"{show_type(state.model_fields[d.map_over].annotation)}; a map runs over a list"))
    if not callable(d.fn):
        problems.append(Problem(d.location, f"node function {d.fn!r} is not callable"))
        return None
    if d.timeout is not None and not (finite_number(d.timeout) and d.timeout > 0):
        problems.append(Problem(f"{d.location} timeout", "timeout must be a positive number of seconds "
                                                         f"(finite, not a bool), got {show(d.timeout)}"))
    if d.when is not None and not callable(d.when):
        problems.append(Problem(d.location, f"when= must be a callable taking the state, got {d.when!r}"))
    elif d.when is not None and _is_async(d.when):
        problems.append(Problem(d.location, "when= must be a plain function, not async: it decides "
                                            "from the state alone"))
    elif d.when is not None and (why := _not_callable_with_state(d.when)) is not None:
        problems.append(Problem(d.location, f"when= must take one parameter, the state (it is called as "
                                            f"when(state)); {why}"))
    _check_retry(d, problems)
    deep = nesting_path(d.args)
    if deep is not None:
        problems.append(Problem(f"{d.location} args", f"nested more than {MAX_NESTING} levels deep"))
        return None
    wants_ctx, wants_item, bound = _check_signature(d, problems)
    if len(problems) > before:
        return None
    return NodeSpec(
        name=d.name, fn=d.fn, after=tuple(d.after), retry=d.retry, timeout=d.timeout, when=d.when,
        args=dict(d.args), bound=bound, is_async=_is_async(d.fn), wants_ctx=wants_ctx,
        fn_ref=d.fn_ref, when_ref=d.when_ref, location=d.location,
        max_iterations=d.max_iterations, map_over=d.map_over, view=d.view, wants_item=wants_item,
        subgraph_root=d.subgraph_root,
    )


def _check_retry(d: NodeDecl, problems: list[Problem]) -> None:
    """Every bad field of the retry policy, each located: NaN or infinite intervals would
    silently mean "retry at once" or "never again"."""
    retry = d.retry
    if not isinstance(retry, RetryPolicy):
        problems.append(Problem(d.location, f"retry must be a RetryPolicy with max_attempts >= 1, got {retry!r}"))
        return
    attempts = retry.max_attempts
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        problems.append(Problem(f"{d.location} retry.max_attempts",
                                f"must be a whole number >= 1, got {show(attempts)}"))
    for name in ("initial_interval", "backoff", "max_interval"):
        value = getattr(retry, name)
        if not (finite_number(value) and value >= 0):
            problems.append(Problem(f"{d.location} retry.{name}",
                                    f"must be a finite number >= 0 (not a bool), got {show(value)}"))
    on = retry.retry_on
    classes = set(ErrorClass)
    # one class's name as a string works (``in`` a string: no class's name is in another's);
    # a typo would silently never retry
    wrong = None if isinstance(on, (set, frozenset, list, tuple, str)) else "a set of error classes"
    unknown = ([] if wrong or on in classes else [on]) if isinstance(on, str) else \
        [c for c in on if not isinstance(c, str) or c not in classes] if wrong is None else []
    if wrong or unknown:
        problems.append(Problem(f"{d.location} retry.retry_on",
                                f"must be {wrong or 'error classes'} (one of: {', '.join(ErrorClass)}), got "
                                f"{show(on) if wrong else ', '.join(map(show, unknown))}"))


def finite_number(value: object) -> bool:
    """A real number, not a bool, that is finite as a float (NaN and ±inf are not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def show(value: object) -> str:
    """``repr`` for a message, kept short; some values cannot be shown at all (an int over
    Python's digit limit, a structure nested past the recursion limit)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        return f"a {type(value).__name__} too large to show"
    return text if len(text) <= 80 else text[:77] + "..."


def nesting_path(value: Any, limit: int = MAX_NESTING) -> list[object] | None:
    """The path (keys and indexes) to a point more than ``limit`` containers deep inside
    ``value``, or None. Iterative, so it cannot itself run out of stack; a value that
    contains itself counts as too deep."""
    stack: list[tuple[Any, list[object]]] = [(value, [])]
    while stack:
        item, path = stack.pop()
        if isinstance(item, Mapping):
            children: list[tuple[object, Any]] = list(item.items())
        elif isinstance(item, (list, tuple, set, frozenset)):
            children = list(enumerate(item))
        else:
            continue
        if len(path) >= limit:
            return path
        stack.extend((child, [*path, key]) for key, child in children)
    return None


def _is_async(fn: object) -> bool:
    """Async functions, async callable objects, and partials of either."""
    target = getattr(fn, "func", fn)  # functools.partial
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(getattr(target, "__call__", None))


def _not_callable_with_state(fn: Any) -> str | None:
    """Why ``fn(state)`` cannot be called, as its signature says (None when it can, or has none)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        sig.bind(None)
    except TypeError as e:
        return f"got {getattr(fn, '__name__', type(fn).__name__)}{sig}: {e}"
    return None


def _check_signature(d: NodeDecl, problems: list[Problem]) -> tuple[bool, bool, dict[str, object]]:
    """Check that ``fn(state[, ctx], **args)`` can be called with the node's args; return
    whether it takes ``ctx``, whether it takes its map ``item``, and the args converted
    to the annotated types."""
    bound: dict[str, object] = dict(d.args) if isinstance(d.args, dict) else {}
    try:
        sig = inspect.signature(d.fn)
    except (TypeError, ValueError):
        return True, False, bound
    if not isinstance(d.args, dict):
        problems.append(Problem(d.location, f"args must be an object, got {d.args!r}"))
        return False, False, bound
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not positional:
        if any(p.kind == p.VAR_POSITIONAL for p in params):  # a generic wrapper(*a, **k)
            return True, d.map_over is not None, bound
        problems.append(Problem(d.location, "node function must take the state as its first parameter"))
        return False, False, bound
    rest = positional[1:]
    wants_ctx = bool(rest) and rest[0].name in _CTX_NAMES
    if wants_ctx:
        rest = rest[1:]
    keywords = {p.name: p for p in [*rest, *(p for p in params if p.kind == p.KEYWORD_ONLY)]}
    accepts_any = any(p.kind == p.VAR_KEYWORD for p in params)
    # a map worker receives its item as ``item``; one that cannot take it would run once per
    # item without knowing which
    wants_item = d.map_over is not None and (keywords.pop("item", None) is not None or accepts_any)
    if d.map_over is not None and not wants_item:
        problems.append(Problem(d.location, f"maps over {d.map_over!r} but its function takes no parameter "
                                            f"named 'item': a map's worker is given its item as 'item'"))
    # a map's worker with a parameter nothing fills most likely meant its item
    hint = " (a map's worker is given its item as a parameter named 'item')" if d.map_over is not None else ""
    try:
        hints = typing.get_type_hints(d.fn)
    except Exception:  # unresolved forward references: skip type checks, keep the rest
        hints = {}
    for key, value in d.args.items():
        p = keywords.get(key)
        if p is None:
            if not accepts_any:
                problems.append(Problem(f"{d.location} args.{key}",
                                        f"unexpected argument {key!r}; the function takes: "
                                        f"{', '.join(keywords) or 'no arguments'}"))
            continue
        if key in hints:
            try:
                bound[key] = TypeAdapter(hints[key]).validate_python(value)
            except ValidationError as e:
                for err in e.errors():
                    where = ".".join(map(str, (key, *err["loc"])))
                    problems.append(Problem(f"{d.location} args.{where}", f"{err['msg']} (got {err['input']!r})"))
            except Exception:  # a type pydantic cannot check: leave it to run time
                pass
    for key, p in keywords.items():
        if p.default is p.empty and key not in d.args:
            problems.append(Problem(f"{d.location} args", f"missing required argument {key!r}{hint}"))
    return wants_ctx, wants_item, bound


def _unreachable(deps: dict[str, list[str]], names: set[str], in_cycle: set[str],
                 decls: Sequence[NodeDecl]) -> list[Problem]:
    """Nodes that can never start: a dependency is in a cycle or depends on one."""
    where = {d.name: d.location for d in decls if isinstance(d.name, str)}
    blocked: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for n in sorted(names - in_cycle - set(blocked)):
            for dep in deps.get(n, ()):
                if dep in in_cycle:
                    blocked[n] = f"depends on {dep!r}, which is in a cycle"
                elif dep in blocked:
                    blocked[n] = f"depends on {dep!r}, which can never start"
                else:
                    continue
                changed = True
                break
    return [Problem(where.get(n, f"node {n!r}"), f"unreachable: {why}") for n, why in sorted(blocked.items())]
