"""Subgraphs in plans: a plan node may run a registered graph or a nested plan instead of
a function, and then runs exactly as the same graph built with ``Graph.subgraph`` does;
every way such a node can be wrong is refused, located, before anything runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from runtime import ExecutableGraph, Graph, GraphError, NodeStatus, Registry, RunStatus, Runtime, append, compile_plan
from server.cli import main


class Parent(BaseModel):
    log: Annotated[list[str], append] = []
    topic: str = "x"


class Child(BaseModel):
    log: Annotated[list[str], append] = []
    topic: str = ""


class Clash(BaseModel):
    topic: int = 0
    missing: str = ""


def start(s: Any) -> dict[str, Any]:
    return {"log": ["start"]}


def search(s: Any) -> dict[str, Any]:
    # which model it sees shows whose state view the subgraph's nodes got
    return {"log": [f"search {s.topic} as {type(s).__name__}"]}


def summarise(s: Any) -> dict[str, Any]:
    return {"log": [f"summary of {len(s.log)}"]}


def write(s: Any) -> dict[str, Any]:
    return {"log": [f"write with {len(s.log)}"]}


def ask(s: Any, ctx: Any) -> dict[str, Any]:
    answer = ctx.interrupt({"question": f"publish {s.topic}?"})
    return {"log": [f"answer {answer}"]}


def step(s: Any) -> dict[str, Any]:
    return {"log": [f"step {len(s.log)}"]}


def short(s: Any) -> bool:
    return len(s.log) < 4


REG = Registry()
for fn in (start, search, summarise, write, ask, step, short):
    REG.function()(fn)
for model in (Parent, Child, Clash):
    REG.state(model)

CHILD_NODES = [{"id": "search", "fn": "search"}, {"id": "summarise", "fn": "summarise", "after": ["search"]}]


def python_child(state: type[BaseModel] | None) -> Graph:
    c = Graph("research", state)
    c.add_node("search", search)
    c.add_node("summarise", summarise, after=["search"])
    return c


def python_parent(child: Graph) -> Graph:
    p = Graph("parent", Parent)
    p.add_node("start", start)
    p.subgraph("research", child, after=["start"])
    p.add_node("write", write, after=["research"])
    return p


def plan_around(subgraph: Any, **node: Any) -> dict[str, Any]:
    """start → ``research`` (the subgraph) → write, as ``python_parent`` builds it."""
    return {"name": "parent", "state": "Parent", "nodes": [
        {"id": "start", "fn": "start"},
        {"id": "research", "subgraph": subgraph, "after": ["start"], **node},
        {"id": "write", "fn": "write", "after": ["research"]}]}


async def trace(rt: Runtime, graph: ExecutableGraph | Graph) -> tuple[RunStatus, list[Any], dict[str, Any]]:
    """What a run leaves: its status, each checkpoint's folded nodes and node states, its final state."""
    run = await rt.start(graph, {"topic": "tides"}, max_concurrency=1)
    history = await rt.history(run.id)
    steps = [(cp.nodes, dict(cp.node_states)) for cp in history]
    return run.status, steps, (await rt.state_at(history[-1].id)).model_dump()


def registry_with(name: str, graph: Any) -> Registry:
    reg = Registry()
    reg.functions, reg.states = REG.functions, REG.states
    reg.graph(graph, name)
    return reg


@pytest.mark.parametrize("form, subgraph, registered, seen_as", [
    ("inline with its own state", {"state": "Child", "nodes": CHILD_NODES}, None, Child),
    ("inline, the parent's state", {"nodes": CHILD_NODES}, None, Parent),
    ("a registered Graph", "research", python_child(Child), Child),
    ("a registered Graph with no state", "research", python_child(None), Parent),
    ("a registered ExecutableGraph", "research", python_child(Child).compile(), Child),
    ("a registered plan", "research", {"name": "research", "state": "Child", "nodes": CHILD_NODES}, Child),
    ("a registered plan, the parent's state", "research", {"name": "research", "nodes": CHILD_NODES}, Parent),
])
async def test_a_plan_subgraph_runs_as_the_same_graph_built_in_python(
        rt: Runtime, form: str, subgraph: Any, registered: Any, seen_as: type[BaseModel]) -> None:
    reg = registry_with("research", registered) if registered is not None else REG
    plan = compile_plan(plan_around(subgraph), reg)
    python = python_parent(python_child(seen_as)).compile()
    assert plan.order == python.order == ("start", "research/search", "research/summarise", "research", "write")

    status, steps, state = await trace(rt, plan)
    assert (status, steps, state) == await trace(rt, python)
    assert status == RunStatus.SUCCEEDED
    assert all(s == NodeStatus.SUCCEEDED for s in steps[-1][1].values())
    assert state["log"] == ["start", f"search tides as {seen_as.__name__}", "summary of 2", "write with 3"]


async def test_a_nested_plan_keeps_its_loops_and_its_own_subgraphs(rt: Runtime) -> None:
    inner = {"nodes": [{"id": "step", "fn": "step", "after": ["more"], "max_iterations": 5},
                       {"id": "more", "fn": "summarise", "after": ["step"], "when": "short"}]}
    plan = compile_plan({"name": "parent", "state": "Parent", "nodes": [
        {"id": "start", "fn": "start"},
        {"id": "outer", "after": ["start"], "subgraph": {"nodes": [{"id": "count", "subgraph": inner}]}}]}, REG)
    status, steps, state = await trace(rt, plan)
    assert status == RunStatus.SUCCEEDED
    assert [n for n in steps[-1][1] if n.startswith("outer/count/step")] == [
        "outer/count/step", "outer/count/step#1"]
    assert state["log"] == ["start", "step 1", "summary of 2", "step 3"]   # then "more" is skipped: 4 is not < 4


async def test_an_interrupt_inside_a_plan_subgraph_pauses_the_parent_and_the_answer_continues_both(
        rt: Runtime) -> None:
    plan = compile_plan(plan_around({"nodes": [{"id": "ask", "fn": "ask"}]}), REG)
    run = await rt.start(plan, {"topic": "tides"}, max_concurrency=1)
    assert run.status == RunStatus.INTERRUPTED
    (pending,) = await rt.interrupts(run.id)
    assert pending.node == "research/ask" and pending.payload["value"] == {"question": "publish tides?"}
    states = (await rt.history(run.id))[-1].node_states
    assert states["research"] == NodeStatus.PENDING and states["write"] == NodeStatus.PENDING

    run = await rt.resume(run.id, "yes")
    assert run.status == RunStatus.SUCCEEDED
    state = await rt.state_at((await rt.history(run.id))[-1].id)
    assert state.log == ["start", "answer yes", "write with 2"]


# --- bad input -----------------------------------------------------------------------------

def problems_of(plan: dict[str, Any], registry: Registry = REG) -> list[str]:
    with pytest.raises(GraphError) as e:
        compile_plan(plan, registry)
    return [str(p) for p in e.value.problems]


def test_an_unknown_subgraph_name_lists_the_registered_ones() -> None:
    assert problems_of(plan_around("reserch"), registry_with("research", python_child(Child))) == [
        "nodes[1] ('research').subgraph: unknown subgraph 'reserch' (known: research; or use module:attribute)"]


def test_a_subgraph_that_names_something_else_is_refused() -> None:
    assert problems_of(plan_around("os:sep")) == ["nodes[1] ('research').subgraph: 'os:sep' is a str, not a graph: '/'"]
    assert problems_of(plan_around(5)) == [
        "nodes[1] ('research').subgraph: must name a graph (registered, or module:attribute) "
        "or be a plan (an object with its nodes), got 5"]


def test_a_node_with_both_fn_and_subgraph_is_refused_and_its_function_still_checked() -> None:
    assert problems_of(plan_around({"nodes": CHILD_NODES}, fn="no_such")) == [
        "nodes[1] ('research'): names both a function (fn) and a subgraph; a node runs one or the other",
        "nodes[1] ('research').fn: unknown function 'no_such' (known: ask, search, short, start, step, "
        "summarise, write; or use module:attribute)"]


def test_a_subgraph_node_takes_only_what_graph_subgraph_takes() -> None:
    assert problems_of(plan_around({"nodes": CHILD_NODES}, when="short", retry={"max_attempts": 2}, color=1)) == [
        "nodes[1] ('research').when: 'when' is an option of a function node; "
        "a subgraph node takes only id, subgraph and after",
        "nodes[1] ('research').retry: 'retry' is an option of a function node; "
        "a subgraph node takes only id, subgraph and after",
        "nodes[1] ('research').color: Extra inputs are not permitted"]


def test_a_nested_plans_problems_are_located_by_path_and_listed_with_the_parents() -> None:
    plan = plan_around({"nodes": [{"id": "search", "fn": "serch"},
                                  {"id": "summarise", "fn": "summarise", "after": ["search", "ghost"]},
                                  {"id": "deeper", "subgraph": {"nodes": [{"id": "x", "fn": "start", "timeout": 0}]}}]})
    plan["nodes"][2]["fn"] = "rite"
    found = problems_of(plan)
    assert found == [
        "nodes[1] ('research').subgraph.nodes[0] ('search').fn: unknown function 'serch' "
        "(known: ask, search, short, start, step, summarise, write; or use module:attribute)",
        "nodes[1] ('research').subgraph.nodes[2] ('deeper').subgraph.nodes[0] ('x').timeout: "
        "Input should be greater than 0",
        "nodes[1] ('research').subgraph.nodes[1] ('summarise') after[1]: unknown dependency 'ghost'; "
        "known nodes: deeper, search, summarise",
        "nodes[2] ('write').fn: unknown function 'rite' "
        "(known: ask, search, short, start, step, summarise, write; or use module:attribute)"]


def test_a_nested_plan_that_is_not_a_plan_is_located() -> None:
    assert problems_of(plan_around({"state": "Nope"})) == [
        "nodes[1] ('research').subgraph.nodes: Field required"]
    assert problems_of(plan_around({"state": "Nope", "nodes": CHILD_NODES})) == [
        "nodes[1] ('research').subgraph.state: unknown state 'Nope' "
        "(known: Child, Clash, Parent; or use module:attribute)"]


def builder_view_messages() -> list[str]:
    clash = Graph("research", Clash)
    clash.add_node("search", search)
    with pytest.raises(GraphError) as e:
        python_parent(clash).compile()
    return [p.message for p in e.value.problems]


def test_a_subgraph_whose_state_is_no_view_of_the_parents_is_refused_as_the_builder_refuses_it() -> None:
    messages = builder_view_messages()
    assert messages == ["state field 'topic' is <class 'int'> in Clash but <class 'str'> in Parent",
                        "state field 'missing' of Clash is not a field of Parent"]
    inline = problems_of(plan_around({"state": "Clash", "nodes": [{"id": "search", "fn": "search"}]}))
    assert inline == [f"nodes[1] ('research').subgraph.state: {m}" for m in messages]
    clash = Graph("research", Clash)
    clash.add_node("search", search)
    named = problems_of(plan_around("research"), registry_with("research", clash))
    assert named == [f"nodes[1] ('research').subgraph: {m}" for m in messages]


def test_a_registered_graph_with_problems_of_its_own_is_refused_with_them() -> None:
    broken = Graph("broken", Child)
    broken.add_node("n", search, after=["ghost"])
    (found,) = problems_of(plan_around("research"), registry_with("research", broken))
    assert found.startswith("nodes[1] ('research').subgraph 'research': node 'n' (")
    assert found.endswith(" after[0]: unknown dependency 'ghost'; known nodes: n")


def test_a_plan_that_contains_itself_is_refused() -> None:
    reg = registry_with("a", {"name": "a", "nodes": [{"id": "inner", "subgraph": "b"}]})
    reg.graph({"name": "b", "nodes": [{"id": "again", "subgraph": "a"}]})
    assert problems_of(plan_around("a"), reg) == [
        "nodes[1] ('research').subgraph 'a': nodes[0] ('inner').subgraph 'b': "
        "nodes[0] ('again').subgraph: subgraph 'a' contains itself: 'a' → 'b' → 'a'"]


def chain_of_plans(depth: int) -> Registry:
    """Plans p0 … p{depth-1}, each running the next as a subgraph; the last runs ``search``."""
    reg = registry_with("p0", {"nodes": [{"id": "n", "subgraph": "p1"}]})
    for i in range(1, depth):
        reg.graph({"nodes": [{"id": "n", "subgraph": f"p{i + 1}"}] if i < depth - 1 else CHILD_NODES}, f"p{i}")
    return reg


def test_a_chain_of_registered_plans_too_deep_to_run_is_refused_not_a_crash() -> None:
    from runtime.graph.plan import MAX_SUBGRAPH_DEPTH
    problems = problems_of(plan_around("p0"), chain_of_plans(300))
    assert len(problems) == 1 and problems[0].endswith(f"subgraphs nested more than {MAX_SUBGRAPH_DEPTH} plans deep")
    nodes = compile_plan(plan_around("p0"), chain_of_plans(5)).nodes
    assert "research/n/n/n/n/search" in nodes


def test_a_subgraph_nodes_dependencies_are_checked_at_the_node() -> None:
    plan = plan_around({"nodes": CHILD_NODES})
    plan["nodes"][1]["after"] = ["start", "ghost", "start"]
    assert problems_of(plan) == [
        "nodes[1] ('research') after[1]: unknown dependency 'ghost'; known nodes: research, "
        "research/search, research/summarise, start, write",
        "nodes[1] ('research') after[2]: dependency 'start' listed twice"]


def test_a_broken_subgraph_node_keeps_its_id_known_to_its_dependents() -> None:
    found = problems_of(plan_around("nowhere"))
    assert len(found) == 1 and "unknown subgraph 'nowhere'" in found[0]   # write's after is fine


def test_a_plan_registered_without_a_name_is_refused_at_registration() -> None:
    from runtime.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="needs a name"):
        Registry().graph({"nodes": CHILD_NODES})


# --- the command line ------------------------------------------------------------------------

def file_plan(subgraph: Any) -> dict[str, Any]:
    """``plan_around`` naming this module's functions as a plan file must (no registry there)."""
    def ref(node: dict[str, Any]) -> dict[str, Any]:
        return {**node, "fn": f"{__name__}:{node['fn']}"} if "fn" in node else node
    sub = {**subgraph, "nodes": [ref(n) for n in subgraph["nodes"]]}
    plan = plan_around(sub)
    plan["state"] = f"{__name__}:Parent"
    plan["nodes"] = [ref(n) for n in plan["nodes"]]
    return plan


def harness(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_harness_runs_and_resumes_a_plan_file_with_a_nested_plan(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, db = tmp_path / "plan.json", str(tmp_path / "runs.db")
    path.write_text(json.dumps(file_plan({"state": f"{__name__}:Child",
                                          "nodes": [*CHILD_NODES, {"id": "ask", "fn": "ask", "after": ["summarise"]}]})))
    code, out, err = harness(capsys, "run", str(path), "--input", '{"topic": "tides"}', "--db", db, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["run"]["status"] == "interrupted" and doc["interrupts"][0]["node"] == "research/ask"

    code, out, err = harness(capsys, "resume", doc["run"]["id"], "--response", '"yes"', "--db", db, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["run"]["status"] == "succeeded"
    assert doc["state"]["log"] == ["start", "search tides as Child", "summary of 2", "answer yes", "write with 4"]


def test_harness_refuses_a_plan_file_whose_nested_plan_is_wrong_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, db = tmp_path / "plan.json", tmp_path / "runs.db"
    plan = file_plan({"nodes": [{"id": "search", "fn": "serch"}]})
    path.write_text(json.dumps(plan))
    code, out, err = harness(capsys, "run", str(path), "--db", str(db))
    assert code == 2 and out == ""
    assert f"nodes[1] ('research').subgraph.nodes[0] ('search').fn: '{__name__}' has no attribute 'serch'" in err
    assert not db.exists()
