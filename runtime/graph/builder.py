"""The Python way to declare a graph: ``Graph`` with its ``@g.node(...)`` decorator."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, overload

from pydantic import BaseModel

from ..core.errors import GraphError, Problem
from .reducers import reducers_for
from .spec import NO_RETRY, AnyState, ExecutableGraph, NodeDecl, RetryPolicy
from .validate import build, is_model

_F = TypeVar("_F", bound=Callable[..., Any])


def subgraph_done(state: Any) -> None:
    """The node a subgraph's name stands for in its parent: it settles once the
    subgraph's last nodes have, and writes nothing."""
    return None


def _location_of(fn: Any) -> str:
    try:
        return f"{inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]}"
    except (TypeError, OSError):
        return repr(fn)


def _ref_of(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


class Graph:
    """Declare nodes with ``@g.node(...)``, then ``compile()`` into an ExecutableGraph.

    Declaration never raises: ``compile()`` reports every problem at once.
    """

    def __init__(self, name: str, state: type[BaseModel] | None = None, *,
                 retry: RetryPolicy | None = None):
        self.name = name
        self.state = state or AnyState
        self.default_retry = retry or NO_RETRY
        #: in declaration order; a subgraph is expanded when this graph compiles, so nodes
        #: added to it after ``subgraph()`` are part of it, as they are of a graph itself
        self._decls: list[NodeDecl | _Sub] = []
        self._problems: list[Problem] = []

    @overload
    def node(self, name: _F, /) -> _F: ...

    @overload
    def node(self, name: str | None = None, *, after: Sequence[str] = (),
             retry: RetryPolicy | None = None, timeout: float | None = None,
             when: Callable[[Any], bool] | None = None,
             args: Mapping[str, Any] | None = None, max_iterations: int | None = None,
             map_over: str | None = None) -> Callable[[_F], _F]: ...

    def node(self, name: str | Callable[..., Any] | None = None, *, after: Sequence[str] = (),
             retry: RetryPolicy | None = None, timeout: float | None = None,
             when: Callable[[Any], bool] | None = None,
             args: Mapping[str, Any] | None = None, max_iterations: int | None = None,
             map_over: str | None = None) -> Any:
        """Decorator: register the function as a node that runs after ``after``
        (``@g.node`` alone declares it with no dependencies and default options).

        ``max_iterations``: this node starts a loop (an edge back to it from a node that
        runs after it); the run fails with ``limit_exceeded`` past that many iterations.
        ``map_over``: run one instance per item of that state field's list (the
        function takes the item as a parameter named ``item``); nodes after it see
        every item's writes, folded in item order.
        """

        # ``@g.node`` without parentheses is given the function itself
        label = None if callable(name) else name

        def register(fn: _F) -> _F:
            self.add_node(label or fn.__name__, fn, after=after, retry=retry,
                          timeout=timeout, when=when, args=args, max_iterations=max_iterations, map_over=map_over)
            return fn

        return register(name) if callable(name) else register

    def add_node(self, name: str, fn: Callable[..., Any], *, after: Sequence[str] = (),
                 retry: RetryPolicy | None = None, timeout: float | None = None,
                 when: Callable[[Any], bool] | None = None,
                 args: Mapping[str, Any] | None = None, max_iterations: int | None = None,
                 map_over: str | None = None) -> None:
        self._decls.append(NodeDecl(
            name=name, fn=fn, after=tuple(after) if not isinstance(after, str) else (after,),
            retry=retry or self.default_retry, timeout=timeout, when=when, args=dict(args or {}),
            location=f"node {name!r} ({_location_of(fn)})", fn_ref=_ref_of(fn),
            when_ref=_ref_of(when) if when is not None else None,
            max_iterations=max_iterations, map_over=map_over,
        ))

    def subgraph(self, name: str, graph: Graph | ExecutableGraph, *, after: Sequence[str] = ()) -> None:
        """Use a graph as node ``name``: its nodes run in this graph's runs as ``name/node``
        (same checkpoints, concurrency budget and interrupts), after ``after``; nodes
        after ``name`` run once the subgraph's last nodes have. Its nodes see their own
        state model, a view of this graph's state: each of its fields must be a field
        here with the same type and reducer. A ``Graph`` is read when this one compiles:
        nodes added to it after this call are part of it."""
        if not isinstance(graph, (Graph, ExecutableGraph)):   # declaration never raises: reported at compile
            self._problems.append(Problem(f"subgraph {name!r}", f"must be a Graph or a compiled graph, got "
                                                                f"{type(graph).__name__} {graph!r:.60}"))
            return
        self._decls.append(_Sub(name, graph, tuple(after) if not isinstance(after, str) else (after,)))

    def compile(self) -> ExecutableGraph:
        return self.compile_within(())

    def compile_within(self, within: tuple[Graph, ...]) -> ExecutableGraph:
        """``compile()`` as a subgraph of the graphs ``within`` (whose compiling compiles this
        one): refused if it is one of them. Per call, not a flag on the graph: threads may
        compile the same graph at once."""
        if any(g is self for g in within):
            raise GraphError([Problem(f"graph {self.name!r}", "it is a subgraph of itself (directly or "
                                                               "through other subgraphs)")])
        problems = list(self._problems)
        decls = self._expanded(problems, (*within, self))
        if problems:
            try:
                build(self.name, self.state, decls)
            except GraphError as e:
                raise GraphError([*problems, *e.problems]) from None
            raise GraphError(problems)
        return build(self.name, self.state, decls)

    def _expanded(self, problems: list[Problem], within: tuple[Graph, ...]) -> list[NodeDecl]:
        """The declarations with every subgraph put in as its nodes, as the subgraph is now."""
        decls: list[NodeDecl] = []
        for d in self._decls:
            if isinstance(d, NodeDecl):
                decls.append(d)
                continue
            where = f"subgraph {d.name!r}"
            try:
                child = d.graph.compile_within(within) if isinstance(d.graph, Graph) else d.graph
            except GraphError as e:
                problems.extend(Problem(f"{where}: {p.location}", p.message) for p in e.problems)
                continue
            problems.extend(view_problems(where, child, self.state))
            decls.extend(subgraph_decls(d.name, child, d.after, self.state, prefix=f"{where} ",
                                        end=f"{where} (its end)"))
        return decls


@dataclass(frozen=True)
class _Sub:
    """``Graph.subgraph``'s declaration, expanded when the graph compiles."""
    name: str
    graph: Graph | ExecutableGraph
    after: tuple[str, ...]


def subgraph_decls(name: str, child: ExecutableGraph, after: Sequence[str], parent: type[BaseModel], *,
                   prefix: str, end: str) -> list[NodeDecl]:
    """The declarations that put ``child`` into a graph of state ``parent`` as node ``name``:
    its nodes as ``name/<node>`` (located as ``prefix`` + their own location), then the
    node ``name`` itself (located at ``end``), which settles once they have."""
    # a child that declares no state sees its parent's, as a plan without one does
    view = None if child.state_model is parent or child.state_model is AnyState else child.state_model
    decls: list[NodeDecl] = []
    for n in child.order:
        spec = child.nodes[n]
        # the child's first nodes run after ``after``: a loop's entry among them too,
        # whose own ``after`` holds only the edges back to it
        first = tuple(after) if not child.forward_deps(n) else ()
        decls.append(NodeDecl(
            name=f"{name}/{n}", fn=spec.fn, after=(*(f"{name}/{d}" for d in spec.after), *first),
            retry=spec.retry, timeout=spec.timeout, when=spec.when, args=dict(spec.args),
            location=f"{prefix}{spec.location}", fn_ref=spec.fn_ref, when_ref=spec.when_ref,
            max_iterations=spec.max_iterations, map_over=spec.map_over, view=spec.view or view, scoped=True,
            subgraph_root=f"{name}/{spec.subgraph_root}" if spec.subgraph_root else None))
    last = [f"{name}/{n}" for n in child.order if not child.children(n) and not child.loop_of.get(n)]
    last += [f"{name}/{n}" for n in child.order if child.loop_path.get(n, ())[:1] == (n,)]   # a loop ends the subgraph
    root = next(n for n in child.order if not child.forward_deps(n))
    decls.append(NodeDecl(name=name, fn=subgraph_done, after=tuple(dict.fromkeys(last)), retry=NO_RETRY,
                          location=end, fn_ref="runtime.graph.builder:subgraph_done", subgraph_root=f"{name}/{root}"))
    return decls


def view_problems(where: str, child: ExecutableGraph, parent: type[BaseModel]) -> list[Problem]:
    """A subgraph's state must be a view of its parent's: same fields, types, reducers."""
    if child.state_model is parent or child.state_model is AnyState or not is_model(parent):
        return []   # a parent state that is not a model is reported when the parent compiles
    if parent is AnyState:
        return [Problem(where, f"the graph declares no state, and this subgraph's state "
                               f"{child.state_model.__name__} needs a parent state that has its fields "
                               f"(of the same types, with the same reducers): give the graph a state")]
    out = []
    mine = reducers_of(parent)
    for field, info in child.state_model.model_fields.items():
        theirs = parent.model_fields.get(field)
        if theirs is None:
            out.append(Problem(where, f"state field {field!r} of {child.state_model.__name__} is not a field "
                                      f"of {parent.__name__}"))
        elif theirs.annotation != info.annotation:
            out.append(Problem(where, f"state field {field!r} is {info.annotation!r} in "
                                      f"{child.state_model.__name__} but {theirs.annotation!r} in {parent.__name__}"))
        elif child.reducer(field).name != mine.get(field, "last_value"):
            out.append(Problem(where, f"state field {field!r} has reducer {child.reducer(field).name!r} in "
                                      f"{child.state_model.__name__} but {mine.get(field, 'last_value')!r} in {parent.__name__}"))
    return out


def reducers_of(model: type[BaseModel]) -> dict[str, str]:
    return {f: r.name for f, r in reducers_for(model).items()}
