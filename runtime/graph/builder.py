"""The Python way to declare a graph: ``Graph`` with its ``@g.node(...)`` decorator."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from .spec import NO_RETRY, AnyState, ExecutableGraph, NodeDecl, RetryPolicy
from .validate import build


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
        self._decls: list[NodeDecl] = []

    def node(self, name: str | None = None, *, after: Sequence[str] = (),
             retry: RetryPolicy | None = None, timeout: float | None = None,
             when: Callable[[Any], bool] | None = None,
             args: Mapping[str, Any] | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: register the function as a node that runs after ``after``."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.add_node(name or fn.__name__, fn, after=after, retry=retry, timeout=timeout,
                          when=when, args=args)
            return fn

        return register

    def add_node(self, name: str, fn: Callable[..., Any], *, after: Sequence[str] = (),
                 retry: RetryPolicy | None = None, timeout: float | None = None,
                 when: Callable[[Any], bool] | None = None,
                 args: Mapping[str, Any] | None = None) -> None:
        self._decls.append(NodeDecl(
            name=name, fn=fn, after=tuple(after) if not isinstance(after, str) else (after,),
            retry=retry or self.default_retry, timeout=timeout, when=when, args=dict(args or {}),
            location=f"node {name!r} ({_location_of(fn)})", fn_ref=_ref_of(fn),
            when_ref=_ref_of(when) if when is not None else None,
        ))

    def compile(self) -> ExecutableGraph:
        return build(self.name, self.state, self._decls)
