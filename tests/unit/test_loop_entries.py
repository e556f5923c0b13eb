"""Every loop has its own bound, on the node where the loop is entered.

A loop's first iteration starts at its entry, the node with ``max_iterations``. When
something outside a cycle leads into it, the entry is a node it leads into: a bound only
on a node the cycle reaches later (the entry of a loop inside it, or a node further round)
would be read as a loop starting there, running before the nodes it was declared after,
and, for a loop around another whose own bound was left out, counting both loops'
iterations as one. Such graphs are refused at compile time, naming the cycle and the node
that needs ``max_iterations``; nothing is created.
"""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from runtime import Graph, GraphError, RunStatus, Runtime, append


class S(BaseModel):
    log: Annotated[list[str], append] = []
    plans: int = 0
    acts: int = 0


def noop(s: Any) -> None:
    return None


def problems(g: Graph) -> list[str]:
    with pytest.raises(GraphError) as e:
        g.compile()
    return [str(p) for p in e.value.problems]


def agent(*, plan_bound: int | None = 3, act_bound: int | None = 4, check_bound: int | None = None) -> Graph:
    """start → [plan → [act ⇄ tool] → check ⇢ plan] (outer loop around an inner one); finish."""
    g = Graph("agent", S)
    g.add_node("start", lambda s: {"log": ["start"]})
    g.add_node("plan", lambda s: {"plans": s.plans + 1, "acts": 0, "log": [f"plan {s.plans + 1}"]},
               after=["start", "check"], max_iterations=plan_bound)
    g.add_node("act", lambda s: {"acts": s.acts + 1, "log": [f"act {s.plans}.{s.acts + 1}"]},
               after=["plan", "tool"], max_iterations=act_bound)
    g.add_node("tool", noop, after=["act"], when=lambda s: s.acts < 2)
    g.add_node("check", noop, after=["act"], when=lambda s: s.plans < 2, max_iterations=check_bound)
    g.add_node("finish", lambda s: {"log": ["finish"]}, after=["plan"])
    return g


async def test_nested_loops_with_a_bound_each_run_the_outer_entry_first(rt: Runtime) -> None:
    graph = agent().compile()
    assert graph.loops == {"plan": ("act", "check", "plan", "tool"), "act": ("act", "tool")}
    run = await rt.start(graph, {})
    assert run.status == RunStatus.SUCCEEDED, run.error
    state = await rt.state_at((await rt.history(run.id))[-1].id)
    assert state.log == ["start", "plan 1", "act 1.1", "act 1.2", "plan 2", "act 2.1", "act 2.2", "finish"]


async def test_an_outer_loop_without_its_own_bound_is_refused_naming_its_entry(rt: Runtime) -> None:
    """Left out on ``plan``, the bound on ``act`` would make one loop starting at ``act``,
    before ``plan`` ever ran, bounded by ``act``'s number across both loops."""
    [problem, *_] = problems(agent(plan_bound=None))
    assert problem.startswith("node 'plan': cycle: plan → act → check → plan has no iteration bound of its own")
    assert "entered at 'plan' (after 'start')" in problem
    assert "the bound on 'act' is only for the loop inside it (act → tool → act)" in problem
    assert "set max_iterations on 'plan' too" in problem
    # refused before anything is created
    with pytest.raises(GraphError):
        await rt.start(agent(plan_bound=None), {})
    assert await rt.runs() == []


def test_an_inner_loop_without_its_own_bound_is_refused_naming_its_entry() -> None:
    [problem, *_] = problems(agent(act_bound=None))
    assert problem.startswith("node 'act': cycle: act → tool → act has no iteration bound")
    assert "set max_iterations on 'act', the node each iteration starts at: where it is entered (after 'plan')" \
        in problem


def test_an_outer_bound_on_a_node_later_in_the_outer_loop_is_refused_naming_its_entry() -> None:
    [problem, *_] = problems(agent(plan_bound=None, check_bound=3))
    assert problem.startswith("node 'plan': cycle: plan → act → check → plan is entered at 'plan' (after 'start')")
    assert "set max_iterations on 'plan', the node each iteration starts at, instead of on 'check'" in problem
    assert "the bound on 'act' is only for the loop inside it (act → tool → act)" in problem


def react(*, bound_on: str | None, side_input: bool = False) -> Graph:
    g = Graph("react", S)
    g.add_node("prep", noop)
    g.add_node("config", noop, after=["prep"])
    g.add_node("model", noop, after=["prep", "tool"], max_iterations=4 if bound_on == "model" else None)
    g.add_node("tool", noop, after=["model", "config"] if side_input else ["model"], when=lambda s: True,
               max_iterations=4 if bound_on == "tool" else None)
    g.add_node("finish", noop, after=["model"])
    return g


def test_a_bound_on_a_node_the_loop_reaches_after_its_entry_is_refused() -> None:
    """Read from ``tool``, the loop would start at ``tool``, beside ``prep``, before ``model``."""
    [problem, *_] = problems(react(bound_on="tool"))
    assert problem == ("node 'model': cycle: model → tool → model is entered at 'model' (after 'prep'): set "
                       "max_iterations on 'model', the node each iteration starts at, instead of on 'tool', which "
                       "comes after it in each iteration")
    assert react(bound_on="model").compile().loops == {"model": ("model", "tool")}


def test_a_member_may_also_wait_for_a_node_beside_the_loop() -> None:
    """The entry is one of the nodes the cycle is entered at: a member waiting for a node
    outside the loop as well (``tool`` for ``config``) does not move it."""
    assert react(bound_on="model", side_input=True).compile().loops == {"model": ("model", "tool")}
    [problem, *_] = problems(react(bound_on=None, side_input=True))
    assert "set max_iterations on the node each iteration starts at: one of 'model', 'tool', where it is entered" \
        in problem


def test_a_bound_that_starts_no_loop_of_its_own_is_refused() -> None:
    g = Graph("extra")
    g.add_node("start", noop)
    g.add_node("a", noop, after=["start", "c"], max_iterations=3)
    g.add_node("b", noop, after=["a"], max_iterations=3)
    g.add_node("c", noop, after=["b"], when=lambda s: True)
    [problem, *_] = problems(g)
    assert problem.startswith("node 'b': cycle: a → b → c → a starts at 'a', where it is entered, and 'b' runs "
                              "later in each iteration, on no loop of its own")


def plan_act(*, entered: bool) -> Graph:
    """[plan → [act ⇄ tool] → check ⇢ plan] with a bound on ``act`` only; ``entered``:
    after ``start``."""
    g = Graph("plan_act")
    if entered:
        g.add_node("start", noop)
    g.add_node("plan", noop, after=["start", "check"] if entered else ["check"])
    g.add_node("act", noop, after=["plan", "tool"], max_iterations=4)
    g.add_node("tool", noop, after=["act"], when=lambda s: True)
    g.add_node("check", noop, after=["act"], when=lambda s: True)
    return g


def test_a_loop_around_another_that_starts_the_run_reads_as_one_loop_when_its_bound_is_left_out() -> None:
    """Nothing outside leads into the cycle: without a bound on ``plan`` the graph cannot
    tell a loop around ``act``'s from one loop at ``act`` with two ways back (``tool`` and
    ``plan``), and reads it as that, as it reads a loop with two ways back written as such.
    Once something leads into it, the loop entered at ``plan`` needs its own bound."""
    graph = plan_act(entered=False).compile()
    assert graph.loops == {"act": ("act", "check", "plan", "tool")}
    assert graph.back_sources["act"] == ("plan", "tool")
    assert "set max_iterations on 'plan' too" in problems(plan_act(entered=True))[0]


# --------------------------------------------------------------------------- property


def nest(depth: int, bounds: list[str | None]) -> Graph:
    """Loops ``depth`` deep, each inside the one before: level k is E{k} → [level k+1] →
    T{k} → D{k} ⇢ E{k}, entered from ``start`` (level 0) or from E{k-1}; ``bounds[k]``
    names the node of level k with ``max_iterations`` (None: none)."""
    g = Graph("nest")
    g.add_node("start", noop)
    for k in range(depth):
        g.add_node(f"E{k}", noop, after=["start" if k == 0 else f"E{k - 1}", f"D{k}"],
                   max_iterations=3 if bounds[k] == f"E{k}" else None)
        g.add_node(f"T{k}", noop, after=[f"E{k + 1}" if k + 1 < depth else f"E{k}"],
                   max_iterations=3 if bounds[k] == f"T{k}" else None)
        g.add_node(f"D{k}", noop, after=[f"T{k}"], when=lambda s: True)
    g.add_node("finish", noop, after=["E0"])
    return g


@settings(max_examples=60, deadline=None)
@given(depth=st.integers(1, 4), data=st.data())
def test_every_loop_of_a_nest_needs_its_own_bound_on_its_entry(depth: int, data: st.DataObject) -> None:
    entries: list[str | None] = [f"E{k}" for k in range(depth)]
    graph = nest(depth, entries).compile()
    assert graph.loop_path[f"E{depth - 1}"] == tuple(entries)
    wrong = data.draw(st.integers(0, depth - 1), label="level")
    misplaced = data.draw(st.booleans(), label="misplaced")
    bounds = list(entries)
    bounds[wrong] = f"T{wrong}" if misplaced else None
    with pytest.raises(GraphError) as e:
        nest(depth, bounds).compile()
    [problem, *_] = e.value.problems
    assert problem.location == f"node 'E{wrong}'"
    assert f"set max_iterations on 'E{wrong}'" in problem.message
    if misplaced:
        assert f"instead of on 'T{wrong}'" in problem.message
