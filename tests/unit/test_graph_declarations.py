"""Mistakes in declaring a graph in Python (the state's kind, the decorator's form, a
reducer that cannot hold its field's type) are refused at compile time, naming what to
fix, before any run is created."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any, Optional, TypedDict

import pytest
from pydantic import BaseModel

from runtime import Graph, GraphError, Runtime, add, append, merge, reducer
from server.cli import main


class Typed(TypedDict):
    n: int


@dataclasses.dataclass
class Plain:
    n: int = 0


class Model(BaseModel):
    n: int = 0


def bump(state: Any) -> dict[str, int]:
    return {"n": 1}


#: a graph the command line loads by reference: a LangGraph-style TypedDict state
typed_graph = Graph("typed", state=Typed)
typed_graph.add_node("bump", bump)


def compile_problems(g: Graph) -> list[str]:
    with pytest.raises(GraphError) as e:
        g.compile()
    return [str(p) for p in e.value.problems]


# --- a state that is not a pydantic model ------------------------------------------------

@pytest.mark.parametrize("state, named", [
    (Typed, "TypedDict 'Typed'"), (Plain, "dataclass 'Plain'"), (dict, "'dict'"),
    (Model(), "an instance of Model"),
])
def test_a_state_that_is_not_a_pydantic_model_class_is_a_graph_error_naming_it(state: Any, named: str):
    g = Graph("g", state=state)
    g.add_node("bump", bump)
    found = compile_problems(g)
    assert len(found) == 1 and "state" in found[0] and named in found[0], found
    assert "BaseModel" in found[0]


def test_a_subgraph_in_a_graph_whose_state_is_not_a_model_is_reported_at_compile():
    child = Graph("child", state=Model)
    child.add_node("bump", bump)
    g = Graph("g", state=Typed)
    g.add_node("first", bump)
    g.subgraph("sub", child, after=["first"])   # declaring does not raise
    found = compile_problems(g)
    assert any("TypedDict 'Typed'" in p for p in found), found


async def test_starting_a_graph_whose_state_is_not_a_model_creates_no_run(rt: Runtime):
    g = Graph("g", state=Model())
    g.add_node("bump", bump)
    with pytest.raises(GraphError, match="an instance of Model"):
        await rt.start(g, {})
    assert await rt.runs() == []


def test_cli_run_of_a_graph_whose_state_is_a_typeddict_says_so_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    db = tmp_path / "runs.db"
    assert main(["run", f"{__name__}:typed_graph", "--input", '{"n": 1}', "--db", str(db)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "TypedDict 'Typed'" in err
    assert main(["runs", "--db", str(db)]) == 0
    assert capsys.readouterr().out.strip() == "no runs"


# --- @g.node without parentheses --------------------------------------------------------

async def test_node_decorator_without_parentheses_declares_the_node(rt: Runtime):
    g = Graph("g", state=Model)

    @g.node
    def first(state: Model) -> dict[str, int]:
        return {"n": state.n + 1}

    @g.node(after=["first"])
    def second(state: Model) -> dict[str, int]:
        return {"n": state.n * 10}

    assert first(Model(n=1)) == {"n": 2}   # the function itself stays usable
    assert g.compile().order == ("first", "second")
    run = await rt.start(g, {"n": 1})
    assert run.status == "succeeded"
    assert (await rt.state_at((await rt.history(run.id))[-1].id)).n == 20


# --- a reducer that cannot hold its field's type -------------------------------------------

class Misfit(BaseModel):
    count: Annotated[int, append] = 0
    title: Annotated[Optional[str], append] = None
    tags: Annotated[list[str], merge] = []
    meta: Annotated[dict[str, int], add] = {}   # dicts have no +


class Fits(BaseModel):
    log: Annotated[Optional[list[str]], append] = None
    seen: Annotated[tuple[str, ...], append] = ()
    meta: Annotated[dict[str, Any], merge] = {}
    inner: Annotated[Model, merge] = Model()
    total: Annotated[float, add] = 0.0
    steps: Annotated[Optional[int], add] = None
    words: Annotated[list[str], add] = []      # + concatenates, from an empty list too
    text: Annotated[str, add] = ""
    anything: Annotated[Any, append] = None
    mine: Annotated[int, reducer(lambda a, b: [a, b])] = 0   # a custom reducer is its own business


def test_a_builtin_reducer_on_a_field_type_it_can_never_produce_is_refused_naming_each_field():
    g = Graph("g", state=Misfit)
    g.add_node("bump", lambda s: None)
    found = compile_problems(g)
    assert len(found) == 4, found
    for field, name in (("count", "append"), ("title", "append"), ("tags", "merge"), ("meta", "add")):
        assert any(f"Misfit.{field}" in p and f"{name!r}" in p for p in found), (field, found)


async def test_builtin_reducers_on_the_types_they_produce_compile_and_run(rt: Runtime):
    g = Graph("g", state=Fits)
    g.add_node("a", lambda s: {"log": ["x"], "seen": ["y"], "meta": {"k": 1}, "inner": {"n": 2},
                               "total": 1.5, "steps": 2, "words": ["w"], "text": "t"})
    g.add_node("b", lambda s: {"words": ["v"], "text": "u", "total": 1.0, "steps": 1}, after=["a"])
    run = await rt.start(g, {})
    assert run.status == "succeeded", run.error
    state = await rt.state_at((await rt.history(run.id))[-1].id)
    assert (state.words, state.text, state.total, state.steps) == (["w", "v"], "tu", 2.5, 3)


async def test_starting_a_graph_with_a_misfit_reducer_creates_no_run(rt: Runtime):
    g = Graph("g", state=Misfit)
    g.add_node("bump", lambda s: None)
    with pytest.raises(GraphError, match="count"):
        await rt.start(g, {})
    assert await rt.runs() == []


@pytest.mark.parametrize("given", ["not a graph", None, 3])
def test_a_subgraph_that_is_not_a_graph_is_reported_at_compile(given: Any):
    g = Graph("g", state=Model)
    g.add_node("a", lambda s: None)
    g.subgraph("inner", given, after=["a"])   # declaring never raises
    with pytest.raises(GraphError) as raised:
        g.compile()
    assert "subgraph 'inner'" in str(raised.value) and "must be a Graph or a compiled graph" in str(raised.value)
