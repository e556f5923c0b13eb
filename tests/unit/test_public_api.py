"""The public surface is exactly what the package defines for users, sorted, and
everything a public method hands back can be imported from ``runtime``."""

from __future__ import annotations

import inspect
import types
import typing

import runtime


def test_design_names_are_importable_from_runtime():
    from runtime import Graph, MemoryStore, NodeContext, RetryPolicy, Runtime, SqlStore  # noqa: F401


def test_all_is_sorted():
    assert runtime.__all__ == sorted(runtime.__all__)


def test_all_is_exactly_what_the_package_defines():
    defined = {name for name, value in vars(runtime).items()
               if not name.startswith("_") and not isinstance(value, types.ModuleType) and name != "logging"}
    assert set(runtime.__all__) == defined


def test_old_import_paths_keep_working():
    from runtime.errors import GraphError, InvalidRequest, NodeError  # noqa: F401
    from runtime.records import Checkpoint, EffectStatus, InterruptKind, Run  # noqa: F401

    assert GraphError is runtime.GraphError and Run is runtime.Run


def _classes(hint: object) -> set[type]:
    out: set[type] = set()
    origin = typing.get_origin(hint)
    for arg in typing.get_args(hint):
        out |= _classes(arg)
    if origin is None and isinstance(hint, type):
        out.add(hint)
    return out


def _fields_of(cls: type) -> set[type]:
    try:
        hints = typing.get_type_hints(cls, vars(inspect.getmodule(cls)))
    except Exception:
        return set()
    found: set[type] = set()
    for h in hints.values():
        found |= _classes(h)
    return found


def test_every_type_a_public_method_returns_is_public():
    """Return types of Runtime's public methods, and the dataclasses inside them."""
    seen: set[type] = set()
    todo: list[type] = []
    for name, fn in inspect.getmembers(runtime.Runtime, inspect.isfunction):
        if name.startswith("_"):
            continue
        hints = typing.get_type_hints(fn, vars(inspect.getmodule(fn)))
        todo.extend(_classes(hints.get("return")))
    while todo:
        cls = todo.pop()
        if cls in seen or not cls.__module__.startswith("runtime"):
            continue
        seen.add(cls)
        todo.extend(_fields_of(cls))
    assert {"CheckpointView", "ReplayReport", "NodeReport", "CompensationStep"} <= {c.__name__ for c in seen}
    missing = sorted(c.__name__ for c in seen if getattr(runtime, c.__name__, None) is not c)
    assert missing == []


def test_run_status_values_are_the_documented_strings():
    assert [s.value for s in runtime.RunStatus] == ["queued", "running", "interrupted", "succeeded",
                                                    "failed", "cancelled"]


def test_the_library_logs_nothing_unless_the_application_asks(capsys):
    import logging

    logging.getLogger("runtime.engine.loop").warning("a warning nobody configured a handler for")
    assert capsys.readouterr().err == ""
