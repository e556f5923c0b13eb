"""The graph layer's modules import each other without a circle, and the names other
layers import from them stay where they were."""

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


def test_graph_modules_import_each_other_without_a_circle():
    deps = graph_imports()
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        assert name not in path, "import circle: " + " → ".join([*path, name])
        if name in done:
            return
        for dep in sorted(deps[name]):
            visit(dep, [*path, name])
        done.add(name)

    for name in sorted(deps):
        visit(name, [])


def test_validation_does_not_import_the_builders():
    deps = graph_imports()
    assert deps["validate"] == {"definitions"}
    assert "refs" not in deps["plan"]


def test_old_import_paths_still_name_the_same_objects():
    from runtime.graph import AnyState, ExecutableGraph, Graph, NodeDecl, NodeSpec, RetryPolicy
    from runtime.graph import builder, definitions, locate, refs, spec

    assert spec.Graph is builder.Graph is Graph
    assert (spec.ExecutableGraph, spec.RetryPolicy, spec.AnyState, spec.NodeDecl, spec.NodeSpec) == (
        ExecutableGraph, RetryPolicy, AnyState, NodeDecl, NodeSpec)
    assert spec.NO_RETRY is definitions.NO_RETRY
    assert refs.resolve_callable is locate.resolve_callable
    assert refs.resolve_model is locate.resolve_model
    assert callable(refs.resolve_ref)
