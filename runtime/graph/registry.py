"""The names a plan may use: a ``Registry`` of functions, predicates, state models and
graphs, and finding what a name stands for there or, failing that, by import."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from ..core.errors import InvalidRequest, Problem
from .builder import Graph
from .locate import resolve_callable
from .spec import ExecutableGraph
from .validate import show

#: what a plan's ``subgraph`` may name: a graph in any of its forms
SubgraphSource = Graph | ExecutableGraph | Mapping[str, Any]


class Registry:
    """Names a plan may use for node functions, predicates, state models and subgraphs."""

    def __init__(self) -> None:
        self.functions: dict[str, Callable[..., Any]] = {}
        self.states: dict[str, type[BaseModel]] = {}
        self.graphs: dict[str, SubgraphSource] = {}

    def function(self, name: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.functions[name or fn.__name__] = fn
            return fn
        return register

    def state(self, model: type[BaseModel], name: str | None = None) -> type[BaseModel]:
        self.states[name or model.__name__] = model
        return model

    def graph(self, graph: SubgraphSource, name: str | None = None) -> SubgraphSource:
        """Register a graph (or a plan) for plans to use as a subgraph, under ``name`` or its own."""
        own = graph.get("name") if isinstance(graph, Mapping) else graph.name
        key = name or own
        if not isinstance(key, str) or not key:
            raise InvalidRequest("a plan registered as a graph needs a name: give one, or give the plan a \"name\"")
        self.graphs[key] = graph
        return graph


def lookup(name: str, table: Mapping[str, Any], where: str, problems: list[Problem], what: str) -> Any:
    """What ``name`` stands for in ``table`` or, failing that, as ``module:attribute``; None
    with the reason added to ``problems``."""
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


def named_callable(name: str, registry: Registry, where: str, problems: list[Problem],
                   what: str) -> Callable[..., Any] | None:
    """The function ``name`` stands for, or None with the reason added to ``problems``."""
    before = len(problems)
    found = lookup(name, registry.functions, where, problems, what)
    if len(problems) > before:
        return None
    if not callable(found):  # e.g. "os:sep": it imports, but a run could never call it
        problems.append(Problem(where, f"{name!r} is a {type(found).__name__}, not a {what}: "
                                       f"{show(found)}"))
        return None
    fn: Callable[..., Any] = found
    return fn
