"""A cycle with no ``when=`` is refused at compile time, named from where each iteration
starts, with where a condition can go: not inside a subgraph on the cycle (a subgraph once
entered always ends), and ``max_iterations`` asked for only when no member has it."""

from __future__ import annotations

from pydantic import BaseModel
from test_loop_entries import noop, problems

from runtime import Graph


class S(BaseModel):
    n: int = 0




def child() -> Graph:
    c = Graph("child", S)
    c.add_node("step", noop)
    c.add_node("note", noop, after=["step"])
    return c


def test_a_cycle_through_a_subgraph_asks_for_a_condition_outside_it() -> None:
    g = Graph("supervise", S)
    g.add_node("sup", noop, after=["route"], max_iterations=4)
    g.subgraph("agent", child(), after=["sup"])
    g.add_node("route", noop, after=["agent"])
    [problem] = problems(g)
    assert problem == ("node 'sup': cycle: sup → agent/step → agent/note → agent → route → sup has no exit: give "
                       "one of its nodes outside subgraph 'agent' ('route', 'sup') a when= condition to make it a "
                       "loop (a condition inside subgraph 'agent' is no exit: a subgraph once entered always ends)")


def test_an_unbounded_cycle_through_a_subgraph_asks_for_the_bound_where_it_is_entered() -> None:
    g = Graph("supervise", S)
    g.add_node("start", noop)
    g.add_node("sup", noop, after=["route", "start"])
    g.subgraph("agent", child(), after=["sup"])
    g.add_node("route", noop, after=["agent"])
    [problem] = problems(g)
    assert problem.startswith("node 'sup': cycle: sup → agent/step → agent/note → agent → route → sup has no exit")
    assert problem.endswith("it needs max_iterations too, on 'sup', the node each iteration starts at: where it "
                            "is entered (after 'start')")


def test_a_bounded_cycle_without_a_condition_is_not_asked_for_a_bound() -> None:
    g = Graph("no_exit", S)
    g.add_node("a", noop, after=["b"], max_iterations=3)
    g.add_node("b", noop, after=["a"])
    [problem] = problems(g)
    assert problem == "node 'a': cycle: a → b → a has no exit: give one of its nodes a when= condition to make it a loop"
