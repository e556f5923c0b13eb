"""Inside the graph layer, validation depends only on the data types (the builders
depend on it, not the other way round), and the package names the graph types."""

from __future__ import annotations

import ast
from pathlib import Path

GRAPH = Path(__file__).resolve().parents[2] / "runtime" / "graph"


def graph_imports() -> dict[str, set[str]]:
    """Module -> graph modules it imports anywhere in the file (deferred imports count)."""
    names = {p.stem for p in GRAPH.glob("*.py") if p.stem != "__init__"}
    out: dict[str, set[str]] = {}
    for name in names:
        deps: set[str] = set()
        for node in ast.walk(ast.parse((GRAPH / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module in names:
                    deps.add(node.module)
                deps.update(a.name for a in node.names if node.module is None and a.name in names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("runtime.graph."):
                deps.add(node.module.split(".")[2])
        out[name] = deps - {name}
    return out


def test_validation_does_not_import_the_builders():
    deps = graph_imports()
    # state_checks checks a state model alone: its reducers (a data type below spec) against
    # the field types, and its aliases
    assert deps["validate"] == {"spec", "loops", "exits", "state_checks"}
    assert deps["state_checks"] == {"reducers"}
    assert deps["loops"] == {"spec"}
    assert deps["exits"] == {"spec"}
    assert "refs" not in deps["plan"]


def test_the_package_names_the_graph_types():
    from runtime.graph import AnyState, ExecutableGraph, Graph, NodeDecl, NodeSpec, RetryPolicy
    from runtime.graph import builder, spec

    assert builder.Graph is Graph
    assert (spec.ExecutableGraph, spec.RetryPolicy, spec.AnyState, spec.NodeDecl, spec.NodeSpec) == (
        ExecutableGraph, RetryPolicy, AnyState, NodeDecl, NodeSpec)
