"""Subgraphs, on every store: a compiled graph used as a node runs inside its parent's
run (``sub/<node>`` instances, the parent's checkpoints and concurrency budget, so no
deadlock at ``max_concurrency=1``); an interrupt inside pauses the parent and the
answer continues both; its nodes see their own state model; bad views are refused."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict

from runtime import Graph, GraphError, NodeStatus, RunStatus, Runtime, append


class Parent(BaseModel):
    log: Annotated[list[str], append] = []
    topic: str = "x"
    approved: bool = False


class Child(BaseModel):
    log: Annotated[list[str], append] = []
    topic: str = ""


def child_graph(seen: list[str]) -> Graph:
    c = Graph("research", Child)

    @c.node()
    def search(s: Child) -> dict[str, Any]:
        seen.append(type(s).__name__)
        return {"log": [f"search {s.topic}"]}

    @c.node(after=["search"])
    def summarise(s: Child) -> dict[str, Any]:
        return {"log": [f"summary of {len(s.log)}"]}

    return c


def parent_graph(child: Graph) -> Graph:
    p = Graph("parent", Parent)

    @p.node()
    def start(s: Parent) -> dict[str, Any]:
        return {"log": ["start"]}

    p.subgraph("research", child, after=["start"])

    @p.node(after=["research"])
    def write(s: Parent) -> dict[str, Any]:
        return {"log": [f"write with {len(s.log)}"]}

    return p


async def test_a_subgraph_runs_inside_its_parent_at_max_concurrency_one(rt: Runtime) -> None:
    seen: list[str] = []
    graph = parent_graph(child_graph(seen)).compile()
    assert graph.order == ("start", "research/search", "research/summarise", "research", "write")
    run = await rt.start(graph, {"topic": "tides"}, max_concurrency=1)
    assert run.status == RunStatus.SUCCEEDED
    history = await rt.history(run.id)
    assert set(history[-1].node_states) == {"start", "research/search", "research/summarise", "research", "write"}
    assert all(s == NodeStatus.SUCCEEDED for s in history[-1].node_states.values())
    assert any("research/search" in cp.nodes for cp in history)   # the child's checkpoints are the parent's
    assert (await rt.state_at(history[-1].id)).log == ["start", "search tides", "summary of 2", "write with 3"]
    assert seen == ["Child"]   # the child's nodes see the child's state model


def around(child: Graph, gate: bool = True, name: str = "write") -> Graph:
    """start (when ``gate``) → subgraph ``name`` → publish."""
    p = Graph("publisher", Parent)

    @p.node(when=lambda s: gate)
    def start(s: Parent) -> dict[str, Any]:
        return {"log": ["start"]}

    p.subgraph(name, child, after=["start"])

    @p.node(after=[name])
    def publish(s: Parent) -> dict[str, Any]:
        return {"log": ["published"]}

    return p


async def test_an_interrupt_inside_a_subgraph_pauses_the_parent_and_the_answer_continues_both(rt: Runtime) -> None:
    c = Graph("review", Child)

    @c.node()
    def ask(s: Child, ctx: Any) -> dict[str, Any]:
        answer = ctx.interrupt({"question": f"publish {s.topic}?"})
        return {"log": [f"answer {answer}"]}

    p = around(c, name="review")
    run = await rt.start(p, {"topic": "tides"}, max_concurrency=1)
    assert run.status == RunStatus.INTERRUPTED
    (pending,) = await rt.interrupts(run.id)
    assert pending.node == "review/ask" and pending.payload["value"] == {"question": "publish tides?"}
    run = await rt.resume(run.id, "yes")
    assert run.status == RunStatus.SUCCEEDED
    state = await rt.state_at((await rt.history(run.id))[-1].id)
    assert state.log == ["start", "answer yes", "published"]


def counting(step_log: Any) -> Graph:
    """A child that is a loop from its first node: ``step`` until the log holds three."""
    c = Graph("count", Child)

    @c.node(after=["more"], max_iterations=5)
    def step(s: Child) -> dict[str, Any]:
        return {"log": [step_log(s)]}

    @c.node(after=["step"], when=lambda s: len(s.log) < 3)
    def more(s: Child) -> None:
        return None

    return c


async def test_a_subgraph_with_a_loop_inside(rt: Runtime) -> None:
    c = counting(lambda s: f"step {len(s.log)}")
    p = Graph("parent", Parent)
    p.subgraph("count", c)

    @p.node(after=["count"])
    def done(s: Parent) -> dict[str, Any]:
        return {"log": ["done"]}

    run = await rt.start(p, {})
    assert run.status == RunStatus.SUCCEEDED
    final = (await rt.history(run.id))[-1]
    assert [n for n in final.node_states if n.startswith("count/step")] == ["count/step", "count/step#1", "count/step#2"]
    assert (await rt.state_at(final.id)).log == ["step 0", "step 1", "step 2", "done"]


def test_a_child_state_that_is_not_a_view_of_the_parent_is_refused() -> None:
    class Other(BaseModel):
        topic: int = 0
        missing: str = ""

    c = Graph("other", Other)
    c.add_node("n", lambda s: None)
    p = Graph("parent", Parent)
    p.subgraph("sub", c)
    with pytest.raises(GraphError) as e:
        p.compile()
    text = str(e.value)
    assert "state field 'topic'" in text and "state field 'missing'" in text


async def test_a_child_that_declares_no_state_sees_its_parents(rt: Runtime) -> None:
    c = Graph("stateless")
    c.add_node("n", lambda s: {"topic": f"{s.topic}!"})
    p = Graph("parent", Parent)
    p.subgraph("sub", c)
    run = await rt.start(p, {"topic": "tides"})
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert (await rt.state_at((await rt.history(run.id))[-1].id)).topic == "tides!"


def test_a_child_with_a_state_under_a_parent_that_declares_none_is_refused_once() -> None:
    c = Graph("typed", Child)
    c.add_node("n", lambda s: None)
    p = Graph("untyped")
    p.subgraph("sub", c)
    with pytest.raises(GraphError) as e:
        p.compile()
    assert len(e.value.problems) == 1
    assert "the graph declares no state, and this subgraph's state Child needs" in str(e.value)
    assert "AnyState" not in str(e.value)


def test_a_broken_subgraph_is_reported_by_its_parent() -> None:
    c = Graph("broken", Child)
    c.add_node("n", lambda s: None, after=["ghost"])
    p = Graph("parent", Parent)
    p.subgraph("sub", c)
    with pytest.raises(GraphError) as e:
        p.compile()
    assert "subgraph 'sub'" in str(e.value) and "unknown dependency 'ghost'" in str(e.value)


async def test_a_child_is_taken_as_it_is_when_its_parent_compiles(rt: Runtime) -> None:
    """Nodes added to a child after ``subgraph()`` (later in the module, say) run in the
    parent as they do in the child alone; a child with no nodes yet at that call is fine."""
    c = Graph("research", Child)
    p = Graph("parent", Parent)
    p.subgraph("research", c)

    @c.node()
    def search(s: Child) -> dict[str, Any]:
        return {"log": ["search"]}

    @c.node(after=["search"])
    def notify(s: Child) -> dict[str, Any]:
        return {"log": ["notify"]}

    assert list(p.compile().nodes) == ["research/search", "research/notify", "research"]
    run = await rt.start(p, {})
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert (await rt.state_at((await rt.history(run.id))[-1].id)).log == ["search", "notify"]


def test_a_graph_that_is_its_own_subgraph_is_refused_in_words() -> None:
    a, b = Graph("a", Parent), Graph("b", Parent)
    a.add_node("n", lambda s: None)
    b.add_node("m", lambda s: None)
    a.subgraph("inner", b)
    b.subgraph("outer", a)
    with pytest.raises(GraphError) as e:
        a.compile()
    assert "graph 'a': it is a subgraph of itself" in str(e.value)
    with pytest.raises(GraphError, match="subgraph of itself"):
        b.compile()
    with pytest.raises(GraphError, match="subgraph 'one': subgraph 'outer': subgraph 'inner'"):
        c = Graph("c", Parent)   # a graph holding the loop is refused in words too
        c.subgraph("one", b)
        c.compile()
    leaf, c = Graph("leaf", Parent), Graph("c", Parent)   # the same child twice, side by side, is no loop
    leaf.add_node("x", lambda s: None)
    c.subgraph("one", leaf)
    c.subgraph("two", leaf, after=["one"])
    assert list(c.compile().nodes) == ["one/x", "one", "two/x", "two"]


def test_threads_compiling_one_graph_at_once_all_get_it() -> None:
    """A graph defined once in a module and compiled by several threads at a time (each
    ``start``, say) is no subgraph of itself."""
    child = Graph("child", Parent)
    for i in range(300):
        child.add_node(f"n{i}", lambda s: None, after=[f"n{i - 1}"] if i else [])
    parent = Graph("parent", Parent)
    parent.subgraph("a", child)
    parent.subgraph("b", child, after=["a"])
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)   # threads take turns inside compile()
    try:
        with ThreadPoolExecutor(4) as pool:
            compiled = list(pool.map(lambda _: parent.compile(), range(16)))
    finally:
        sys.setswitchinterval(switch)
    assert {g.version for g in compiled} == {compiled[0].version} and len(compiled[0].nodes) == 602


def test_slashes_are_reserved_for_subgraph_paths() -> None:
    g = Graph("slash")
    g.add_node("a/b", lambda s: None)
    with pytest.raises(GraphError):
        g.compile()


def optional_polish(first_when: bool = True) -> Graph:
    """draft (when ``first_when``) → polish, only when asked (``approved``)."""
    c = Graph("write", Child)

    @c.node(when=lambda s: first_when)
    def draft(s: Child) -> dict[str, Any]:
        return {"log": ["draft"]}

    @c.node(after=["draft"], when=lambda s: False)
    def polish(s: Child) -> dict[str, Any]:
        return {"log": ["polished"]}

    return c


async def test_a_subgraph_is_one_step_of_its_parent_whatever_its_own_when_skipped(rt: Runtime) -> None:
    """Once entered, a subgraph ends (and its parent goes on) even when its last nodes,
    or all of them, were skipped by their own ``when``."""
    for first_when, log in ((True, ["start", "draft", "published"]), (False, ["start", "published"])):
        run = await rt.start(around(optional_polish(first_when)), {})
        assert run.status == RunStatus.SUCCEEDED
        final = (await rt.history(run.id))[-1]
        assert final.node_states["write/polish"] == NodeStatus.SKIPPED
        assert final.node_states["write"] == final.node_states["publish"] == NodeStatus.SUCCEEDED
        assert (await rt.state_at(final.id)).log == log


async def test_a_subgraph_never_entered_is_skipped_and_so_is_what_follows_it(rt: Runtime) -> None:
    run = await rt.start(around(optional_polish(), gate=False), {})
    assert run.status == RunStatus.SUCCEEDED
    states = (await rt.history(run.id))[-1].node_states
    assert {n: s for n, s in states.items()} == {n: NodeStatus.SKIPPED for n in
                                                  ("start", "write/draft", "write/polish", "write", "publish")}


async def test_a_subgraph_that_starts_with_a_loop_waits_for_what_it_runs_after(rt: Runtime) -> None:
    c = counting(lambda s: f"step after {s.log[0] if s.log else 'nothing'}")
    p = Graph("parent", Parent)

    @p.node()
    async def start(s: Parent) -> dict[str, Any]:
        return {"log": ["start"]}

    p.subgraph("count", c, after=["start"])
    run = await rt.start(p, {})
    assert run.status == RunStatus.SUCCEEDED
    assert (await rt.state_at((await rt.history(run.id))[-1].id)).log == [
        "start", "step after start", "step after start"]


async def test_a_subgraphs_node_writes_only_the_fields_of_its_own_state(rt: Runtime) -> None:
    """Its state model is a view of the parent's: writing a parent field outside that view
    fails the node as it would in the child alone, and the field keeps its value."""
    c = Graph("solver", Child)

    @c.node()
    def solve(s: Child) -> dict[str, Any]:
        return {"log": ["solved"], "approved": True}

    p = Graph("parent", Parent)
    p.subgraph("solver", c)
    run = await rt.start(p, {})
    assert run.status == RunStatus.FAILED and run.error is not None
    assert run.error["node"] == "solver/solve" and "unknown state field(s) 'approved'" in str(run.error["message"])
    assert (await rt.state_at((await rt.history(run.id))[-1].id)).approved is False


async def test_a_child_that_takes_extra_fields_cannot_give_them_to_a_parent_that_does_not(rt: Runtime) -> None:
    class Loose(BaseModel):
        model_config = ConfigDict(extra="allow")
        log: Annotated[list[str], append] = []

    c = Graph("loose", Loose)

    @c.node()
    def a(s: Loose) -> dict[str, Any]:
        return {"log": ["a"], "zzz": 1}

    p = Graph("parent", Parent)
    p.subgraph("sub", c)
    run = await rt.start(p, {})
    assert run.status == RunStatus.FAILED and "unknown state field(s) 'zzz'" in str((run.error or {})["message"])
