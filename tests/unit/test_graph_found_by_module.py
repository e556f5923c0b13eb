"""A graph started as an object is found again by another process when a module it comes
from binds it at module level: its description keeps ``module:name``, so ``harness resume``,
the debugger and workers need no ``--graph``. A graph made by a factory keeps none."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from runtime import GraphNotRegistered, Runtime, RunStatus, SqlStore

MODULE = textwrap.dedent('''
    from runtime import Graph, NodeContext

    g = Graph("found-by-module")

    @g.node()
    async def ask(state, ctx: NodeContext):
        return {"a": await ctx.interrupt({"q": "go?"})}

    compiled = g.compile()

    def factory():
        f = Graph("made-by-a-factory")
        f.add_node("ask", ask)
        return f
''')


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"agent_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


@pytest.mark.parametrize("attr", ["g", "compiled"])
async def test_a_module_level_graph_is_found_by_a_runtime_that_never_registered_it(
        module: str, tmp_path: Path, attr: str) -> None:
    __import__(module)
    graph = getattr(sys.modules[module], attr)
    url = f"sqlite:///{tmp_path / 'h.db'}"
    starter = Runtime(SqlStore(url))
    run = await starter.start(graph, {})
    desc = starter.store.graph_description(run.graph_version)
    starter.close()
    assert run.status == RunStatus.INTERRUPTED
    assert desc is not None and desc["ref"] == f"{module}:{attr}"
    other = Runtime(SqlStore(url))   # another process: no graph given
    try:
        done = await other.resume(run.id, "yes")
        assert done.status == RunStatus.SUCCEEDED
    finally:
        other.close()


async def test_a_graph_made_by_a_factory_keeps_no_reference(module: str, tmp_path: Path) -> None:
    __import__(module)
    url = f"sqlite:///{tmp_path / 'h.db'}"
    starter = Runtime(SqlStore(url))
    run = await starter.start(sys.modules[module].factory(), {})
    assert "ref" not in (starter.store.graph_description(run.graph_version) or {})
    starter.close()
    other = Runtime(SqlStore(url))
    try:
        with pytest.raises(GraphNotRegistered):
            await other.resume(run.id, "yes")
    finally:
        other.close()


async def test_a_reference_the_store_has_is_not_replaced_by_one_found(module: str, tmp_path: Path) -> None:
    """``harness run agents.a1:g`` stored its reference: a script importing the same module
    under another name does not replace it."""
    __import__(module)
    graph = sys.modules[module].g.compile()
    graph.ref = "agents.a1:g"
    url = f"sqlite:///{tmp_path / 'h.db'}"
    first = Runtime(SqlStore(url), graphs=[graph])
    first.close()
    second = Runtime(SqlStore(url))
    try:
        run = await second.start(sys.modules[module].g, {})
        assert second.store.graph_description(run.graph_version)["ref"] == "agents.a1:g"
    finally:
        second.close()
