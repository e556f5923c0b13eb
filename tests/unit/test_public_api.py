"""The public surface is exactly what DESIGN.md names, plus documented extras."""

from __future__ import annotations

import runtime


def test_design_names_are_importable_from_runtime():
    from runtime import Graph, MemoryStore, NodeContext, RetryPolicy, Runtime, SqlStore  # noqa: F401


def test_all_is_exactly_the_public_api():
    assert set(runtime.__all__) == {
        "Change", "Checkpoint", "CompensationReport", "EffectInfo", "EffectsMode", "ReplayReport", "ErrorClass", "ExecutableGraph", "Graph", "GraphError", "HarnessError",
        "IllegalTransition", "Interrupt", "InvalidAnswer", "InvalidInputError", "InvalidRequest",
        "LeaseLost", "MemoryStore", "NodeContext", "NodeError", "NodeStatus", "NotFound",
        "PermissionDeniedError", "Registry", "RetryPolicy", "Run", "RunKind", "RunStatus", "Runtime",
        "SemanticError", "SqlStore", "TransientError", "add", "append", "compile_plan", "last_value",
        "merge", "reducer",
    }
    for name in runtime.__all__:
        assert hasattr(runtime, name), name


def test_run_status_values_are_the_documented_strings():
    assert [s.value for s in runtime.RunStatus] == ["queued", "running", "interrupted", "succeeded",
                                                    "failed", "cancelled"]
