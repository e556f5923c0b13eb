"""Shapes against the general path over random graphs, not only the few written by hand
(``test_instance_shapes``): chains and joins with one or two ways back (loops side by
side, one inside another, loops sharing nodes), ``when=`` on random members, maps
anywhere. Whatever the graph, growing its loops in any order gives the same instances
with or without shapes, and every instance answers its successors, its dependencies
and its loop's next iteration the same way, under any statuses."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import ExecutableGraph, Graph, NodeStatus
from runtime.core.errors import GraphError
from runtime.engine.instances import Instances
from test_instance_properties import S
from test_instance_shapes import assert_same_answers


async def _step(s: S) -> None:
    return None


async def _work(s: S, item: object) -> None:
    return None


def _declare(r: random.Random) -> Graph:
    """Three to eight nodes, each after one or two earlier ones; one or two ways back (the
    second often inside the first's span, for a loop inside another), each bounded, with
    ``when=`` on its source and on random members; a few maps over a list field."""
    k = r.randint(3, 8)
    names = [f"n{i}" for i in range(k)]
    after: dict[str, list[str]] = {n: r.sample(names[:i], r.randint(1, min(2, i))) if i else []
                                   for i, n in enumerate(names)}
    bounds: dict[str, int] = {}
    whens: set[str] = set()
    lo, hi = 0, k - 1
    for _ in range(r.randint(1, 2)):
        i = r.randint(lo, hi)
        j = r.randint(i, hi)
        for m in range(i + 1, j + 1):   # a way from i to j, so that j leading back makes a cycle
            if names[m - 1] not in after[names[m]]:
                after[names[m]].append(names[m - 1])
        if names[j] not in after[names[i]]:
            after[names[i]].append(names[j])
        bounds[names[i]] = 3
        whens.add(names[j])
        whens.update(n for n in names[i:j + 1] if r.random() < 0.4)
        if j - i >= 2 and r.random() < 0.6:
            lo, hi = i + 1, j - 1   # the next way back strictly inside this loop
    maps = {n for n in names[1:] if r.random() < 0.15 and n not in bounds}   # an entry cannot be a map
    g = Graph(f"random-{r.random():.6f}", S)
    for n in names:
        g.add_node(n, _work if n in maps else _step, after=after[n], max_iterations=bounds.get(n),
                   when=(lambda s: True) if n in whens else None, map_over="items" if n in maps else None)
    return g


def random_graph(seed: int) -> ExecutableGraph:
    """The first graph from ``seed`` on that compiles (about half do: the rest have a cycle
    without a way out, or a map where a loop leads back)."""
    r = random.Random(seed)
    while True:
        try:
            graph = _declare(r).compile()
        except GraphError:
            continue
        if graph.loops:
            return graph


def grow(graph: ExecutableGraph, inst: Instances, draws: list[tuple[str, list[int]]]) -> None:
    """Create iterations as ``draws`` say: for each, a loop (by position among the graph's)
    and the iterations of the loops around it and of its own (cut to how deep it is)."""
    entries = sorted(graph.loops)
    for pick, its in draws:
        entry = entries[int(pick) % len(entries)]
        depth = len(graph.loop_path[entry])
        inst.add_iteration(entry, tuple((its + [0] * depth)[:depth]))


draws_st = st.lists(st.tuples(st.sampled_from("0123"), st.lists(st.integers(0, 3), max_size=3)), max_size=8)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32), draws=draws_st)
def test_random_loops_grow_the_same_from_their_shapes(seed: int, draws: list[tuple[str, list[int]]]) -> None:
    graph = random_graph(seed)
    shaped, general = Instances(graph, ()), Instances(graph, (), shapes=False)
    grow(graph, shaped, draws)
    grow(graph, general, draws)
    assert shaped.order == general.order and shaped.index == general.index
    assert shaped._keys == general._keys and shaped._of == general._of and shaped._in == general._in


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32), draws=draws_st,
       statuses=st.lists(st.sampled_from(list(NodeStatus)), min_size=1, max_size=5))
def test_random_instances_answer_the_same_from_their_shapes(seed: int, draws: list[tuple[str, list[int]]],
                                                            statuses: list[NodeStatus]) -> None:
    graph = random_graph(seed)
    inst = Instances(graph, (), shapes=False)
    grow(graph, inst, draws)
    assert_same_answers(graph, list(inst.order), statuses)


def test_random_graphs_cover_what_shapes_must_agree_on() -> None:
    """The generator makes what the properties above need: loops that have shapes and
    loops that do not, two loops, one loop inside another, maps."""
    seen: dict[str, Any] = {"shaped": 0, "unshaped": 0, "two": 0, "nested": 0, "map": 0}
    for seed in range(150):
        graph = random_graph(seed)
        inst = Instances(graph, ())
        members = [m for ms in graph.loops.values() for m in ms]
        seen["shaped"] += any(inst._where.flat(m) is not None for m in members)
        seen["unshaped"] += any(inst._where.flat(m) is None for m in members)
        seen["two"] += len(graph.loops) > 1
        seen["nested"] += any(len(p) > 1 for p in graph.loop_path.values())
        seen["map"] += any(spec.map_over for spec in graph.nodes.values())
    assert all(count >= 5 for count in seen.values()), seen
