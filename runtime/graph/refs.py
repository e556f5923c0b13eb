"""Find graphs by reference: ``package.module:attribute`` or a plan ``.json`` file.

The top of the graph layer: it may use both the builder and plans. Finding plain
objects by reference (functions, answer models) lives in ``locate``: plans need it too.
"""

from __future__ import annotations

from pathlib import Path

from ..core.errors import InvalidRequest
from .builder import Graph
from .loader import load_plan_file
from .locate import import_ref
from .plan import compile_plan
from .spec import ExecutableGraph

__all__ = ["resolve_ref"]


def resolve_ref(ref: str) -> ExecutableGraph:
    """A compiled graph from ``module:attr`` (a Graph, ExecutableGraph, or plan dict) or a
    ``.json`` plan file. Raises ``GraphError`` for invalid graphs, ``InvalidRequest`` otherwise."""
    is_file = ref.endswith(".json") and ":" not in ref
    if is_file:
        graph = compile_plan(load_plan_file(ref))
    else:
        obj = import_ref(ref)
        if isinstance(obj, Graph):
            graph = obj.compile()
        elif isinstance(obj, ExecutableGraph):
            graph = obj
        elif isinstance(obj, dict):
            graph = compile_plan(obj)
        else:
            raise InvalidRequest(f"{ref!r} is a {type(obj).__name__}, not a Graph, ExecutableGraph or plan")
    graph.ref = str(Path(ref).resolve()) if is_file else ref
    return graph
