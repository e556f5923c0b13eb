"""A loop must be able to end before its bound.

A loop goes round again when any way back to its entry succeeded, and ends when every
one was skipped. A way back that no outcome of the ``when=`` conditions can skip makes
every iteration lead to another, so the run could only end failed with
``limit_exceeded``: such a graph is refused at compile time, naming the cycle and the way
back that always runs. A node is skipped when its own ``when=`` is false or when all it
runs after was skipped; a map succeeds even over an empty list, and a subgraph once
entered always ends.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from runtime import (ErrorClass, ExecutableGraph, Graph, GraphError, MemoryStore, Registry, RunStatus, Runtime,
                     append, compile_plan)
from runtime.graph import validate


class S(BaseModel):
    turns: int = 0
    items: list[int] = []
    off: list[str] = []   # the nodes whose when= is false (the random shapes below)
    log: Annotated[list[str], append] = []


def noop(s: Any) -> None:
    return None


def turn(s: S) -> dict[str, Any]:
    return {"turns": s.turns + 1, "log": [f"model {s.turns + 1}"]}


def more(s: S) -> bool:
    return s.turns < 2


def problems(g: Graph) -> list[str]:
    with pytest.raises(GraphError) as e:
        g.compile()
    return [str(p) for p in e.value.problems]


def react(*, ask_when: bool = False, ask_after: tuple[str, ...] = ("model",)) -> Graph:
    """model ⇄ tool (when more) and model ⇄ ask: two ways back, one with a condition."""
    g = Graph("react", S)
    g.add_node("setup", noop)
    g.add_node("model", turn, after=["setup", "tool", "ask"], max_iterations=5)
    g.add_node("tool", noop, after=["model"], when=more)
    g.add_node("ask", noop, after=list(ask_after), when=more if ask_when else None)
    g.add_node("finish", lambda s: {"log": ["finish"]}, after=["model"])
    return g


def unchecked(g: Graph) -> ExecutableGraph:
    """``g`` built without the check that its loops can end before their bound, to see how
    it would run."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(validate, "endless_loops", lambda *args: [])
        return validate.build(g.name, g.state, g._expanded([], (g,)))


def test_a_way_back_without_a_condition_is_refused_naming_it() -> None:
    [problem] = problems(react())
    assert problem == ("node 'model': cycle: model → ask → model can only end at its bound: the way back through "
                       "'ask' is never skipped ('ask' runs whenever 'model' does, and 'model' starts every "
                       "iteration), so every iteration leads to another; give 'ask' a when= condition, or give one "
                       "to each node it runs after (a node is skipped when its when= is false, or when all it runs "
                       "after was skipped)")


async def test_such_a_loop_could_only_fail_at_its_bound(rt: Runtime) -> None:
    run = await rt.start(unchecked(react()), {})
    assert run.status == RunStatus.FAILED
    assert run.error is not None and run.error["class"] == ErrorClass.LIMIT_EXCEEDED
    assert run.error["message"] == "loop 'model' reached max_iterations=5: 'ask#4' led back to it again"


async def test_the_same_loop_with_a_condition_on_each_way_back_ends_before_its_bound(rt: Runtime) -> None:
    run = await rt.start(react(ask_when=True), {})
    assert run.status == RunStatus.SUCCEEDED, run.error
    state = await rt.state_at((await rt.history(run.id))[-1].id)
    assert state.log == ["model 1", "model 2", "finish"]


def test_a_way_back_after_a_condition_can_be_skipped() -> None:
    """``ask`` runs after ``tool`` only: skipping ``tool`` skips it too."""
    assert react(ask_after=("tool",)).compile().loops["model"] == ("ask", "model", "tool")


def test_a_way_back_after_a_node_that_always_runs_is_refused() -> None:
    """``ask`` after ``model`` and ``tool``: when ``tool`` is skipped, ``model`` still ran."""
    [problem] = problems(react(ask_after=("model", "tool")))
    assert "the way back through 'ask' is never skipped ('ask' runs whenever 'model' does, and 'model' starts " \
           "every iteration)" in problem


def test_a_way_back_after_a_node_before_the_loop_that_always_runs_is_refused() -> None:
    """A condition on the entry skips the rest of the iteration, but not what also runs
    after ``setup``: it ran, so ``ask`` runs and leads back again."""
    g = Graph("g", S)
    g.add_node("setup", noop)
    g.add_node("model", turn, after=["setup", "ask"], max_iterations=5, when=more)
    g.add_node("ask", noop, after=["model", "setup"])
    [problem] = problems(g)
    assert problem.startswith("node 'model': cycle: model → ask → model can only end at its bound: the way back "
                              "through 'ask' is never skipped ('ask' runs whenever 'setup' does, and 'setup', "
                              "before the loop, is never skipped)")
    # with a condition on ``setup`` too, both can be skipped: the loop can end
    g = Graph("g", S)
    g.add_node("setup", noop, when=lambda s: s.turns == 0)
    g.add_node("model", turn, after=["setup", "ask"], max_iterations=5, when=more)
    g.add_node("ask", noop, after=["model", "setup"])
    g.compile()


def test_every_way_back_that_always_runs_is_named() -> None:
    g = Graph("g", S)
    g.add_node("model", turn, after=["tool", "ask", "note"], max_iterations=5)
    g.add_node("tool", noop, after=["model"], when=more)
    g.add_node("ask", noop, after=["model"])
    g.add_node("check", noop, after=["model"])
    g.add_node("note", noop, after=["check"])
    [problem] = problems(g)
    assert problem.startswith("node 'model': cycle: model → ask → model can only end at its bound: the ways back "
                              "through 'ask', 'note' are never skipped ('ask' runs whenever 'model' does, and "
                              "'model' starts every iteration; 'note' runs whenever 'check' does, 'check' whenever "
                              "'model' does, and 'model' starts every iteration)")
    assert "give each of them a when= condition, or give one to each node they run after" in problem


def child() -> Graph:
    c = Graph("child", S)
    c.add_node("look", noop, when=more)
    c.add_node("say", noop, after=["look"])
    return c


async def test_a_subgraph_on_the_way_back_always_ends_so_it_always_leads_back(rt: Runtime) -> None:
    """The when= inside ``review`` skips its nodes, but ``review`` itself, entered, still
    succeeds: the loop goes round until its bound."""
    g = Graph("g", S)
    g.add_node("model", turn, after=["tool", "review"], max_iterations=4)
    g.add_node("tool", noop, after=["model"], when=more)
    g.subgraph("review", child(), after=["model"])
    [problem] = problems(g)
    assert "the way back through 'review' is never skipped ('review' (a subgraph: once entered, it always ends) " \
           "runs whenever 'model' does" in problem
    run = await rt.start(unchecked(g), {})
    assert run.error is not None and run.error["class"] == ErrorClass.LIMIT_EXCEEDED
    # a condition before the subgraph skips it whole: it is never entered
    g = Graph("g", S)
    g.add_node("model", turn, after=["tool", "review"], max_iterations=4)
    g.add_node("tool", noop, after=["model"], when=more)
    g.add_node("gate", noop, after=["model"], when=more)
    g.subgraph("review", child(), after=["gate"])
    run = await rt.start(g, {})
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert (await rt.state_at((await rt.history(run.id))[-1].id)).turns == 2


def test_a_map_over_an_empty_list_succeeds_so_it_leads_back() -> None:
    g = Graph("g", S)
    g.add_node("model", turn, after=["tool", "read"], max_iterations=4)
    g.add_node("tool", noop, after=["model"], when=more)
    g.add_node("read", lambda s, item: None, after=["model"], map_over="items")
    [problem] = problems(g)
    assert "the way back through 'read' is never skipped" in problem
    g = Graph("g", S)
    g.add_node("model", turn, after=["tool", "read"], max_iterations=4)
    g.add_node("tool", noop, after=["model"], when=more)
    g.add_node("read", lambda s, item: None, after=["model"], map_over="items", when=more)
    g.compile()


def test_a_way_back_from_after_a_loop_inside_is_never_skipped_when_that_loop_always_runs() -> None:
    """``act``, the inner loop's entry, starts in every outer iteration: ``note`` after it
    runs in every one and leads back to ``plan``."""
    g = Graph("g", S)
    g.add_node("plan", turn, after=["check", "note"], max_iterations=3)
    g.add_node("act", noop, after=["plan", "tool"], max_iterations=3)
    g.add_node("tool", noop, after=["act"], when=more)
    g.add_node("check", noop, after=["act"], when=more)
    g.add_node("note", noop, after=["act"])
    [problem] = problems(g)
    assert problem.startswith("node 'plan': cycle: plan → act → note → plan can only end at its bound: the way "
                              "back through 'note' is never skipped ('note' runs whenever 'act' does, 'act' "
                              "whenever 'plan' does, and 'plan' starts every iteration)")


async def test_a_way_back_from_after_a_loop_inside_is_skipped_when_that_loop_never_ran(rt: Runtime) -> None:
    """With a condition on ``act``, the inner loop's entry, ``note`` after it is skipped
    when ``act`` was, at the inner loop's first iteration: the outer loop ends."""
    g = Graph("g", S)
    g.add_node("plan", turn, after=["note"], max_iterations=4)
    g.add_node("act", lambda s: {"log": [f"act {s.turns}"]}, after=["plan", "tool"], max_iterations=3, when=more)
    g.add_node("tool", noop, after=["act"], when=lambda s: False)
    g.add_node("note", noop, after=["act"])
    run = await rt.start(g, {})
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert (await rt.state_at((await rt.history(run.id))[-1].id)).log == ["model 1", "act 1", "model 2"]


async def test_a_loop_inside_another_is_read_as_it_runs_with_the_outer_entry_run(rt: Runtime) -> None:
    """``check`` waits for ``tool`` and for ``side``: when the inner loop runs, ``plan``
    ran, and so did ``side`` after it, however ``start`` went: ``check`` always runs."""
    g = Graph("g", S)
    g.add_node("start", noop, when=more)
    g.add_node("plan", turn, after=["start", "again"], max_iterations=3)
    g.add_node("side", noop, after=["plan"])
    g.add_node("act", noop, after=["plan", "check"], max_iterations=3)
    g.add_node("tool", noop, after=["act"], when=more)
    g.add_node("check", noop, after=["tool", "side"])
    g.add_node("again", noop, after=["check"], when=more)
    [problem] = problems(g)
    assert problem.startswith("node 'act': cycle: act → tool → check → act can only end at its bound: the way "
                              "back through 'check' is never skipped ('check' runs whenever 'side' does, 'side' "
                              "whenever 'plan' does, and 'plan' starts every iteration of the loop around it)")
    run = await rt.start(unchecked(g), {})
    assert run.error is not None and run.error["class"] == ErrorClass.LIMIT_EXCEEDED
    assert run.error["message"].startswith("loop 'act' reached max_iterations=3")


def test_a_plan_is_checked_the_same_way() -> None:
    reg = Registry()
    for fn in (noop, turn, more):
        reg.function()(fn)
    plan = {"name": "p", "nodes": [
        {"id": "model", "fn": "turn", "after": ["tool", "ask"], "max_iterations": 5},
        {"id": "tool", "fn": "noop", "after": ["model"], "when": "more"},
        {"id": "ask", "fn": "noop", "after": ["model"]},
    ]}
    with pytest.raises(GraphError) as e:
        compile_plan(plan, reg)
    [problem] = e.value.problems
    assert "the way back through 'ask' is never skipped" in str(problem)


def test_a_way_back_after_something_already_wrong_is_not_also_called_endless() -> None:
    """What ``ask`` runs after is unknown (a typo, a plan node that failed to parse): it is
    not known to always run."""
    g = Graph("g", S)
    g.add_node("model", turn, after=["tool", "ask"], max_iterations=5)
    g.add_node("tool", noop, after=["model"], when=more)
    g.add_node("ask", noop, after=["model", "nope"])
    [problem] = problems(g)
    assert "unknown dependency 'nope'" in problem
    reg = Registry()
    for fn in (noop, turn, more):
        reg.function()(fn)
    plan = {"name": "p", "nodes": [
        {"id": "check", "fn": "noop", "whn": "more"},
        {"id": "model", "fn": "turn", "after": ["check", "tool", "ask"], "max_iterations": 5},
        {"id": "tool", "fn": "noop", "after": ["model"], "when": "more"},
        {"id": "ask", "fn": "noop", "after": ["tool", "check"]},
    ]}
    with pytest.raises(GraphError) as e:
        compile_plan(plan, reg)
    assert [str(p) for p in e.value.problems] == ["nodes[0] ('check').whn: Extra inputs are not permitted"]


# --------------------------------------------------------------------------- a property


@st.composite
def loop_shapes(draw: st.DrawFn) -> dict[str, Any]:
    """A loop entered at ``model`` from ``start``; ``pre`` before it (which nodes in it may
    also wait for); body nodes each after some of the entry, earlier body nodes and
    ``pre``; each plain, a map or a subgraph; some with a when=; some leading back."""
    n = draw(st.integers(1, 4), label="body nodes")
    body = []
    for i in range(n):
        earlier = ["model", *(f"b{j}" for j in range(i))]
        after = draw(st.lists(st.sampled_from(earlier), min_size=1, unique=True), label=f"b{i} after")
        if draw(st.booleans(), label=f"b{i} after pre"):
            after.append("pre")
        kind = draw(st.sampled_from(["plain", "plain", "map", "subgraph"]), label=f"b{i} kind")
        when = draw(st.booleans(), label=f"b{i} when") if kind != "subgraph" else False
        body.append({"name": f"b{i}", "after": after, "kind": kind, "when": when})
    back = draw(st.lists(st.sampled_from([b["name"] for b in body]), min_size=1, unique=True), label="back")
    return {"body": body, "back": back, "model_when": draw(st.booleans(), label="model when"),
            "pre_when": draw(st.booleans(), label="pre when"), "items": draw(st.sampled_from([[], [1]]))}


def off(name: str) -> Any:
    return lambda s: name not in s.off


def shape_graph(shape: dict[str, Any]) -> tuple[Graph, list[str]]:
    """The graph, and the names of its conditions (``off`` in the input turns them false)."""
    conditions = []

    def cond(name: str, has: bool) -> Any:
        if not has:
            return None
        conditions.append(name)
        return off(name)

    g = Graph("shape", S)
    g.add_node("start", noop)
    g.add_node("pre", noop, after=["start"], when=cond("pre", shape["pre_when"]))
    g.add_node("model", turn, after=["start", *shape["back"]], max_iterations=3,
               when=cond("model", shape["model_when"]))
    for b in shape["body"]:
        name, after = b["name"], b["after"]
        if b["kind"] == "subgraph":
            c = Graph(name, S)
            c.add_node("x", noop, when=cond(f"{name}/x", True))
            c.add_node("y", noop, after=["x"])
            g.subgraph(name, c, after=after)
        elif b["kind"] == "map":
            g.add_node(name, lambda s, item: None, after=after, map_over="items", when=cond(name, b["when"]))
        else:
            g.add_node(name, noop, after=after, when=cond(name, b["when"]))
    return g, conditions


async def ends_before_bound(shape: dict[str, Any], graph: Any, conditions: list[str]) -> bool:
    """Whether some outcome of the conditions (each the same in every iteration) ends the
    run before the loop's bound. Enough: the iteration where a loop ends can be its first."""
    rt = Runtime(MemoryStore())
    try:
        for k in range(len(conditions) + 1):
            for false in itertools.combinations(conditions, k):
                run = await rt.start(graph, {"off": list(false), "items": shape["items"]})
                if run.status == RunStatus.SUCCEEDED:
                    return True
                assert run.error is not None and run.error["class"] == ErrorClass.LIMIT_EXCEEDED, run.error
        return False
    finally:
        rt.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=loop_shapes())
def test_a_loop_is_accepted_exactly_when_some_run_of_it_ends_before_its_bound(shape: dict[str, Any]) -> None:
    g, conditions = shape_graph(shape)
    try:
        graph: Any = g.compile()
    except GraphError as e:
        accepted, why = False, str(e)
    else:
        accepted, why = True, ""
    if not accepted:
        try:   # run it all the same
            graph = unchecked(g)
        except GraphError:
            event("refused: no condition, or only inside a subgraph")
            return   # refused by another loop rule (no condition, or only inside a subgraph): not run
    event("accepted" if accepted else "refused: a way back always runs")
    assert asyncio.run(ends_before_bound(shape, graph, conditions)) == accepted, why
