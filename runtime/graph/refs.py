"""Find graphs and models by reference: ``package.module:attribute`` or a plan file."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..core.errors import GraphError, InvalidRequest, Problem
from .spec import ExecutableGraph, Graph
from ..core.jsonvalues import JSON


def _import(ref: str) -> Any:
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise InvalidRequest(f"{ref!r} is not a reference of the form package.module:attribute")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise InvalidRequest(f"cannot import {module_name!r} (from {ref!r}): {e}") from None
    except Exception as e:  # the module itself is broken: say where, in one line
        raise InvalidRequest(f"importing {module_name!r} failed: {type(e).__name__}: {e}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise InvalidRequest(f"{module_name!r} has no attribute {attr!r} (from {ref!r})") from None
    return obj


def resolve_ref(ref: str) -> ExecutableGraph:
    """A compiled graph from ``module:attr`` (a Graph, ExecutableGraph, or plan dict) or a
    ``.json`` plan file. Raises ``GraphError`` for invalid graphs, ``InvalidRequest`` otherwise."""
    from .plan import compile_plan

    if ref.endswith(".json") and ":" not in ref:
        path = Path(ref)
        try:
            doc = json.loads(path.read_text())
        except OSError as e:
            raise InvalidRequest(f"cannot read plan {ref}: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise GraphError([Problem(f"{ref}:{e.lineno}:{e.colno}", f"not valid JSON: {e.msg}")]) from None
        graph = compile_plan(doc)
    else:
        obj = _import(ref)
        if isinstance(obj, Graph):
            graph = obj.compile()
        elif isinstance(obj, ExecutableGraph):
            graph = obj
        elif isinstance(obj, dict):
            graph = compile_plan(obj)
        else:
            raise InvalidRequest(f"{ref!r} is a {type(obj).__name__}, not a Graph, ExecutableGraph or plan")
    graph.ref = str(Path(ref).resolve()) if ref.endswith(".json") and ":" not in ref else ref
    return graph


def resolve_model(ref: str) -> type[BaseModel] | None:
    try:
        obj = _import(ref)
    except InvalidRequest:
        return None
    return obj if isinstance(obj, type) and issubclass(obj, BaseModel) else None


def resolve_callable(ref: str) -> Any:
    return _import(ref)
