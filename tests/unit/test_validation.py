"""Invalid graphs and plans are rejected with every problem and its location."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import BaseModel

from runtime import Graph, GraphError, Registry, Runtime, append, compile_plan


def noop(state):
    return None


def test_cycle_is_named_in_execution_order():
    g = Graph("g")
    g.add_node("a", noop, after=["c"])
    g.add_node("b", noop, after=["a"])
    g.add_node("c", noop, after=["b"])
    with pytest.raises(GraphError) as e:
        g.compile()
    assert any("cycle: a → b → c → a" in str(p) for p in e.value.problems)


def test_every_problem_is_reported_at_once():
    g = Graph("g")
    g.add_node("a", noop, after=["missing"])
    g.add_node("a", noop)
    g.add_node("b", noop, after=["b"])
    g.add_node("c", noop, after=["b"])
    with pytest.raises(GraphError) as e:
        g.compile()
    text = str(e.value)
    assert "unknown dependency 'missing'" in text
    assert "duplicate node id 'a'" in text
    assert "cycle: b → b" in text
    assert "'c'" in text and "unreachable: depends on 'b', which is in a cycle" in text
    assert len(e.value.problems) == 4


def test_problem_location_points_at_the_function_source():
    g = Graph("g")
    g.add_node("a", noop, after=["zzz"])
    with pytest.raises(GraphError) as e:
        g.compile()
    assert "test_validation.py" in e.value.problems[0].location


def test_args_that_do_not_fit_the_signature_are_rejected():
    def fetch(state, source: str, count: int = 1):
        return None

    g = Graph("g")
    g.add_node("f", fetch, args={"count": "many", "colour": "red"})
    with pytest.raises(GraphError) as e:
        g.compile()
    text = str(e.value)
    assert "args.count" in text and "valid integer" in text
    assert "unexpected argument 'colour'" in text
    assert "missing required argument 'source'" in text


def test_empty_graph_and_bad_options_are_rejected():
    with pytest.raises(GraphError, match="at least one node"):
        Graph("g").compile()
    g = Graph("g")
    g.add_node("a", noop, timeout=-1)
    g.add_node("b", noop, when="yes")  # type: ignore[arg-type]
    with pytest.raises(GraphError) as e:
        g.compile()
    assert "timeout must be a positive number" in str(e.value)
    assert "when= must be a callable" in str(e.value)


def test_a_when_that_cannot_take_the_state_alone_is_refused_at_compile():
    g = Graph("g")
    g.add_node("a", noop)
    g.add_node("b", noop, after=["a"], when=lambda s, c: True)
    g.add_node("c", noop, after=["a"], when=lambda: True)
    with pytest.raises(GraphError) as e:
        g.compile()
    b, c = map(str, e.value.problems)
    assert b.startswith("node 'b' (") and b.endswith("when= must take one parameter, the state (it is called as "
                                                    "when(state)); got <lambda>(s, c): missing a required argument: 'c'")
    assert c.startswith("node 'c' (") and c.endswith("got <lambda>(): too many positional arguments")


def test_a_when_with_defaults_or_star_args_takes_the_state():
    g = Graph("g")
    g.add_node("a", noop)
    g.add_node("b", noop, after=["a"], when=lambda s, limit=3: True)
    g.add_node("c", noop, after=["a"], when=lambda *args: True)
    g.compile()


def test_canonical_order_does_not_depend_on_declaration_order():
    def build(names):
        g = Graph("g")
        for n in names:
            g.add_node(n, noop, after=["root"] if n != "root" else [])
        return g.compile()

    one, two = build(["root", "b", "a", "c"]), build(["c", "root", "a", "b"])
    assert one.order == two.order == ("root", "a", "b", "c")
    assert one.version == two.version


def test_version_changes_with_structure():
    g1, g2 = Graph("g"), Graph("g")
    g1.add_node("a", noop)
    g2.add_node("a", noop)
    g2.add_node("b", noop, after=["a"])
    assert g1.compile().version != g2.compile().version


async def test_nothing_runs_or_is_stored_for_an_invalid_graph(rt: Runtime):
    g = Graph("g")
    g.add_node("a", noop, after=["nope"])
    with pytest.raises(GraphError):
        await rt.start(g, {})
    assert await rt.runs() == []


class Doc(BaseModel):
    items: Annotated[list[str], append] = []


REG = Registry()


@REG.function()
def fetch(state, source: str, count: int = 1):
    return {"items": [f"{source}-{i}" for i in range(count)]}


@REG.function()
def count_items(state):
    return None


REG.state(Doc)


def test_plan_compiles_to_the_same_graph_as_python():
    plan = {"name": "p", "state": "Doc", "nodes": [
        {"id": "f", "fn": "fetch", "args": {"source": "x", "count": 2}},
        {"id": "c", "fn": "count_items", "after": ["f"]}]}
    g = Graph("p", state=Doc)
    g.add_node("f", fetch, args={"source": "x", "count": 2})
    g.add_node("c", count_items, after=["f"])
    compiled = compile_plan(plan, REG)
    assert compiled.order == g.compile().order == ("f", "c")


async def test_plan_runs_with_its_args(rt: Runtime):
    plan = {"name": "p", "state": "Doc", "nodes": [
        {"id": "f", "fn": "fetch", "args": {"source": "x", "count": 2}},
        {"id": "c", "fn": "count_items", "after": ["f"]}]}
    run = await rt.start(compile_plan(plan, REG), {})
    cps = await rt.history(run.id)
    assert (await rt.state_at(cps[-1].id)).items == ["x-0", "x-1"]


def test_plan_reports_structure_and_reference_problems_together():
    plan = {"name": "p", "nodes": [
        {"id": "f", "fn": "fetch", "args": {"count": "two"}},
        {"id": "g", "fn": "no_such_fn", "after": ["f", "ghost"]},
        {"id": "h", "fn": "count_items", "after": ["h"]}]}
    with pytest.raises(GraphError) as e:
        compile_plan(plan, REG)
    text = str(e.value)
    assert "nodes[1] ('g').fn: unknown function 'no_such_fn'" in text
    assert "unknown dependency 'ghost'" in text
    assert "nodes[0] ('f') args.count" in text
    assert "missing required argument 'source'" in text
    assert "cycle: h → h" in text


def test_malformed_plan_names_the_field():
    with pytest.raises(GraphError) as e:
        compile_plan({"name": "p", "nodes": [{"id": "a", "fn": "fetch", "aftr": []}]}, REG)
    assert "nodes[0] ('a').aftr" in str(e.value)


def test_plan_can_name_functions_by_import_path():
    plan = {"name": "p", "nodes": [{"id": "f", "fn": "examples.steps:fetch", "args": {"source": "s"}}]}
    assert compile_plan(plan).order == ("f",)


def test_a_compiled_graph_cannot_be_changed():
    g = Graph("g")
    g.add_node("a", noop)
    compiled = g.compile()
    with pytest.raises(AttributeError, match="immutable"):
        compiled.order = ("b",)  # type: ignore[misc]
    with pytest.raises(TypeError):
        compiled.nodes["b"] = compiled.nodes["a"]  # type: ignore[index]


def test_a_plain_function_in_a_fields_annotation_is_refused_not_ignored():
    """``Annotated[list, operator.add]`` (another library's spelling) would leave the field
    last-value: every chat turn would replace the history instead of appending to it."""
    import operator

    class Chat(BaseModel):
        messages: Annotated[list[str], operator.add] = []
        kept: Annotated[list[str], append] = []

    g = Graph("chat", state=Chat)
    g.add_node("reply", noop)
    with pytest.raises(GraphError) as e:
        g.compile()
    (problem,) = e.value.problems
    assert problem.location == "state Chat.messages" and "write reducer(add)" in problem.message
