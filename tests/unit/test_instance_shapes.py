"""A node in one loop answers from its shape (``Placement.flat``): what it runs after and
what may follow it are the node's own iteration suffix on the other nodes' names. Those
answers must be exactly the general path's, for every instance of real runs and of any
set of iterations, whatever else the graph holds (maps, loops inside loops, subgraphs,
nodes after a loop, a loop entered from a branch)."""

from __future__ import annotations

from typing import Annotated, Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from runtime import ExecutableGraph, Graph, MemoryStore, NodeStatus, RunStatus, Runtime, append
from runtime.engine.instances import Instances
from test_instance_properties import rounds, side_by_side


class W(BaseModel):
    log: Annotated[list[str], append] = []
    turns: int = 0


def wide() -> Graph:
    """plan → [a → (b | c) → d ⇢ a] (b only on even turns), then e and f after the loop;
    side runs beside the loop and joins f."""
    g = Graph("wide", W)

    @g.node()
    async def plan(s: W) -> dict[str, Any]:
        return {"log": ["plan"]}

    @g.node(after=["plan", "d"], max_iterations=5)
    async def a(s: W, ctx: Any) -> dict[str, Any]:
        return {"turns": s.turns + 1, "log": [ctx.node]}

    @g.node(after=["a"], when=lambda s: s.turns % 2 == 0)
    async def b(s: W, ctx: Any) -> dict[str, Any]:
        return {"log": [ctx.node]}

    @g.node(after=["a"])
    async def c(s: W, ctx: Any) -> dict[str, Any]:
        return {"log": [ctx.node]}

    @g.node(after=["b", "c"], when=lambda s: s.turns < 4)
    async def d(s: W, ctx: Any) -> dict[str, Any]:
        return {"log": [ctx.node]}

    @g.node(after=["plan"])
    async def side(s: W) -> dict[str, Any]:
        return {"log": ["side"]}

    @g.node(after=["a"])
    async def e(s: W) -> dict[str, Any]:
        return {"log": ["e"]}

    @g.node(after=["c", "side"])
    async def f(s: W) -> dict[str, Any]:
        return {"log": ["f"]}

    return g


def nested_in_subgraph() -> Graph:
    """The ``wide`` graph as a subgraph node between two plain nodes."""
    g = Graph("outer", W)

    @g.node()
    async def first(s: W) -> dict[str, Any]:
        return {"log": ["first"]}

    g.subgraph("sub", wide(), after=["first"])

    @g.node(after=["sub"])
    async def last(s: W) -> dict[str, Any]:
        return {"log": ["last"]}

    return g


GRAPHS = {"side_by_side": lambda: side_by_side({}), "rounds": lambda: rounds(lambda _: 0.0),
          "wide": wide, "sub": nested_in_subgraph}


async def instances_of(graph: Graph) -> list[str]:
    rt = Runtime(store=MemoryStore(), max_concurrency=3)
    try:
        run = await rt.start(graph, {})
        assert run.status == RunStatus.SUCCEEDED, run.error
        return list((await rt.history(run.id))[-1].node_states)
    finally:
        rt.close()


def assert_same_answers(graph: ExecutableGraph, names: list[str], statuses: list[NodeStatus] | None = None) -> int:
    """Every instance's successors, dependencies and next iteration (under ``statuses``,
    taken in turn), from shapes and from the general path; returns how many instances
    answered from a shape."""
    shaped, general = Instances(graph, names), Instances(graph, names, shapes=False)
    assert shaped.order == general.order
    states = {n: (statuses or [NodeStatus.SUCCEEDED])[i % len(statuses or [1])] for i, n in enumerate(shaped.order)}
    answered = 0
    for name in shaped.order:
        assert shaped.next_iteration(name, states) == general.next_iteration(name, states), name
        assert shaped.children(name) == general.children(name), name
        fixed, plan = shaped._planned(name)
        want_fixed, want_plan = general._planned(name)
        assert fixed == want_fixed, name
        assert [(list(m), w) for m, w in plan] == [(list(m), w) for m, w in want_plan], name
        node = name.split("[")[0].split("#")[0]
        answered += shaped._where.flat(node) is not None and "[" not in name
    return answered


@settings(max_examples=8, deadline=None)
@given(which=st.sampled_from(sorted(GRAPHS)))
async def test_shapes_answer_as_the_general_path_for_every_instance_of_a_run(which: str) -> None:
    graph = GRAPHS[which]().compile()
    assert_same_answers(graph, await instances_of(GRAPHS[which]()))


@settings(max_examples=40, deadline=None)
@given(which=st.sampled_from(["side_by_side", "wide", "sub"]), turns=st.integers(0, 6),
       data=st.data())
def test_shapes_answer_as_the_general_path_for_any_iterations(which: str, turns: int, data: Any) -> None:
    """Instances of some iterations of each member (not only what a run would make: a
    branch may inherit a later iteration, a crash may leave one half made)."""
    graph = GRAPHS[which]().compile()
    names = list(graph.order)
    for member in [m for ms in graph.loops.values() for m in ms]:
        made = data.draw(st.sets(st.integers(1, turns), max_size=turns) if turns else st.just(set()))
        names += [f"{member}#{k}" for k in sorted(made)]
    statuses = data.draw(st.lists(st.sampled_from(list(NodeStatus)), min_size=1, max_size=5))
    assert assert_same_answers(graph, names, statuses) > 0


@settings(max_examples=30, deadline=None)
@given(which=st.sampled_from(["side_by_side", "wide", "sub"]), steps=st.lists(st.integers(0, 6), max_size=8))
def test_a_loop_grows_the_same_from_its_shape(which: str, steps: list[int]) -> None:
    """Iterations created in any order (some again, some skipped) give the same instances,
    positions, and what each loop and node holds, with or without shapes."""
    graph = GRAPHS[which]().compile()
    shaped, general = Instances(graph, ()), Instances(graph, (), shapes=False)
    for k in steps:
        for entry in graph.loops:
            assert shaped.add_iteration(entry, (k,)) == general.add_iteration(entry, (k,))
    assert shaped.order == general.order and shaped.index == general.index
    assert shaped._keys == general._keys and shaped._of == general._of and shaped._in == general._in
    for entry in graph.loops:
        assert shaped.loop_ended(entry, (), {n: NodeStatus.SUCCEEDED for n in shaped.order})


def test_a_node_meeting_a_loop_inside_its_own_has_no_shape() -> None:
    graph = rounds(lambda _: 0.0).compile()
    inst = Instances(graph, ())
    assert inst._where.flat("round") is None    # think is in a loop inside round's
    assert inst._where.flat("side") is not None  # side meets round and tally only
    assert inst._where.flat("think") is None    # in a loop inside another
    assert inst._where.flat("end") is None      # in no loop
