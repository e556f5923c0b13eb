"""Loops, on every store: each iteration is its own instance (``model``, ``model#1``, …)
with its own checkpoint; a node after the loop waits for it to end and sees every
iteration; the iteration bound and ``max_steps`` end the run failed with
``limit_exceeded`` naming the loop; cycles that are not loops are refused."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from runtime import ErrorClass, Graph, GraphError, NodeStatus, RunStatus, Runtime, append
from runtime.graph.instances import base_node, parse_instance


class S(BaseModel):
    messages: Annotated[list[str], append] = []
    turns: int = 0
    goal: int = 3
    side: Annotated[list[str], append] = []


def react(max_iterations: int = 10, calls: list[str] | None = None) -> Graph:
    """model → tool → model … until ``turns`` reaches ``goal``; then finish."""
    g = Graph("react", S)

    @g.node()
    def prep(s: S) -> dict[str, Any]:
        return {"messages": ["user: go"]}

    @g.node(after=["prep", "tool"], max_iterations=max_iterations)
    def model(s: S, ctx: Any) -> dict[str, Any]:
        n = s.turns + 1
        return {"turns": n, "messages": [f"model {n} saw {len(s.messages)}"]}

    @g.node(after=["model"], when=lambda s: s.turns < s.goal)
    def tool(s: S, ctx: Any) -> dict[str, Any]:
        result = ctx.effect("search", lambda: f"result {s.turns}", request={"turn": s.turns})
        if calls is not None:
            calls.append(ctx.node)
        return {"messages": [f"tool: {result}"]}

    @g.node(after=["model"])
    def finish(s: S) -> dict[str, Any]:
        return {"messages": [f"done after {s.turns}"]}

    return g


async def test_each_iteration_is_an_instance_with_its_own_checkpoint(rt: Runtime) -> None:
    calls: list[str] = []
    run = await rt.start(react(calls=calls), {"goal": 4})
    assert run.status == RunStatus.SUCCEEDED
    history = await rt.history(run.id)
    final = history[-1].node_states
    assert [n for n in final if base_node(n) == "model"] == ["model", "model#1", "model#2", "model#3"]
    assert [n for n in final if base_node(n) == "tool"] == ["tool", "tool#1", "tool#2", "tool#3"]
    assert final["tool#3"] == NodeStatus.SKIPPED   # the way back was not taken: the loop ended
    assert calls == ["tool", "tool#1", "tool#2"]
    # every iteration's model step is folded into a checkpoint of its own
    for name in ("model", "model#1", "model#2", "model#3"):
        assert sum(name in cp.nodes for cp in history) == 1
    folded = [n for cp in history for n in cp.nodes]
    assert folded.index("model#1") < folded.index("model#2") < folded.index("finish")
    state = await rt.state_at(history[-1].id)
    assert state.messages == [
        "user: go", "model 1 saw 1", "tool: result 1", "model 2 saw 3", "tool: result 2",
        "model 3 saw 5", "tool: result 3", "model 4 saw 7", "done after 4"]


async def test_a_loop_that_ends_at_once_runs_its_entry_once(rt: Runtime) -> None:
    run = await rt.start(react(), {"goal": 1})
    assert run.status == RunStatus.SUCCEEDED
    final = (await rt.history(run.id))[-1].node_states
    assert final == {"prep": NodeStatus.SUCCEEDED, "model": NodeStatus.SUCCEEDED,
                     "tool": NodeStatus.SKIPPED, "finish": NodeStatus.SUCCEEDED}


async def test_the_iteration_bound_fails_the_run_naming_the_loop(rt: Runtime) -> None:
    run = await rt.start(react(max_iterations=3), {"goal": 50})
    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert run.error["class"] == ErrorClass.LIMIT_EXCEEDED.value
    assert "loop 'model'" in str(run.error["message"]) and "max_iterations=3" in str(run.error["message"])
    final = (await rt.history(run.id))[-1].node_states
    assert final["model#2"] == NodeStatus.SUCCEEDED and "model#3" not in final
    assert final["finish"] == NodeStatus.PENDING   # never "succeeded with the work unfinished"


async def test_max_steps_ends_a_loop_failed_too(rt: Runtime) -> None:
    run = await rt.start(react(max_iterations=100), {"goal": 50}, max_steps=7)
    assert run.status == RunStatus.FAILED
    assert run.error is not None and run.error["class"] == ErrorClass.LIMIT_EXCEEDED.value
    assert "max_steps=7" in str(run.error["message"])


async def test_a_branch_beside_the_loop_folds_the_same_whatever_the_timing(rt: Runtime) -> None:
    """A node running in parallel with the loop appends to the same list: its place in
    the fold is canonical, not the moment it finished."""
    states = []
    for side_delay in (0.0, 0.05):
        g = react()

        @g.node(after=["prep"])
        async def side(s: S) -> dict[str, Any]:
            await asyncio.sleep(side_delay)
            return {"messages": ["side"], "side": ["x"]}

        run = await rt.start(g, {"goal": 3})
        assert run.status == RunStatus.SUCCEEDED
        states.append((await rt.state_at((await rt.history(run.id))[-1].id)).messages)
    assert states[0] == states[1]


async def test_an_interrupt_inside_an_iteration_pauses_and_resumes_the_loop(rt: Runtime) -> None:
    g = Graph("ask", S)

    @g.node(after=["check"], max_iterations=5)
    def ask(s: S, ctx: Any) -> dict[str, Any]:
        answer = ctx.interrupt({"question": f"continue after {s.turns}?"})
        return {"turns": s.turns + 1, "messages": [str(answer)]}

    @g.node(after=["ask"], when=lambda s: s.turns < 2)
    def check(s: S) -> None:
        return None

    run = await rt.start(g, {})
    assert run.status == RunStatus.INTERRUPTED
    run = await rt.resume(run.id, "yes")
    assert run.status == RunStatus.INTERRUPTED
    pending = await rt.interrupts(run.id)
    assert [i.node for i in pending] == ["ask#1"]
    run = await rt.resume(run.id, "again")
    assert run.status == RunStatus.SUCCEEDED
    assert (await rt.state_at((await rt.history(run.id))[-1].id)).messages == ["yes", "again"]


def test_cycles_that_are_not_loops_are_refused_with_the_cycle_named() -> None:
    def noop(s: Any) -> None:
        return None

    g = Graph("no_exit")
    g.add_node("a", noop, after=["b"], max_iterations=3)
    g.add_node("b", noop, after=["a"])
    with pytest.raises(GraphError) as e:
        g.compile()
    assert "cycle: a → b → a has no exit" in str(e.value)

    g = Graph("no_bound")
    g.add_node("a", noop, after=["b"])
    g.add_node("b", noop, after=["a"], when=lambda s: True)
    with pytest.raises(GraphError) as e:
        g.compile()
    assert "no iteration bound" in str(e.value)

    g = Graph("two_bounds")
    g.add_node("a", noop, after=["b"], max_iterations=2)
    g.add_node("b", noop, after=["a"], when=lambda s: True, max_iterations=2)
    with pytest.raises(GraphError) as e:
        g.compile()
    assert "max_iterations on 'a', 'b'" in str(e.value)

    g = Graph("not_a_loop")
    g.add_node("a", noop, max_iterations=2)
    with pytest.raises(GraphError) as e:
        g.compile()
    assert "'a' is in no cycle" in str(e.value)

    g = Graph("bad_bound")
    g.add_node("a", noop, after=["b"], max_iterations=0)
    g.add_node("b", noop, after=["a"], when=lambda s: True)
    with pytest.raises(GraphError) as e:
        g.compile()
    assert "max_iterations" in str(e.value) and "got 0" in str(e.value)


def test_instance_names_parse_and_order_canonically() -> None:
    graph = react().compile()
    assert graph.order == ("prep", "model", "tool", "finish")
    assert parse_instance("model#12") == ("model", 12, None, ())
    assert parse_instance("work#2[7]") == ("work", 2, 7, ())
    assert parse_instance("sub/inner") == ("sub/inner", 0, None, ())
    assert parse_instance("step#1.0") == ("step", 0, None, (1,))      # a loop inside another
    assert parse_instance("work#0.2[3]") == ("work", 2, 3, (0,))
    names = ["finish", "tool#1", "model#2", "model", "tool", "model#1", "prep"]
    assert graph.canonical(names) == ["prep", "model", "tool", "model#1", "tool#1", "model#2", "finish"]


async def test_a_plan_declares_loops_and_maps_too(rt: Runtime) -> None:
    from runtime.graph.plan import Registry, compile_plan

    reg = Registry()
    reg.state(S)

    @reg.function()
    def bump(s: S) -> dict[str, Any]:
        return {"turns": s.turns + 1, "messages": [f"turn {s.turns + 1}"]}

    @reg.function()
    def again(s: S) -> bool:
        return s.turns < s.goal

    @reg.function()
    def noop(s: S) -> None:
        return None

    plan = {"name": "planned", "state": "S", "nodes": [
        {"id": "bump", "fn": "bump", "after": ["check"], "max_iterations": 5},
        {"id": "check", "fn": "noop", "after": ["bump"], "when": "again"}]}
    run = await rt.start(compile_plan(plan, reg), {"goal": 3})
    assert run.status == RunStatus.SUCCEEDED
    assert (await rt.state_at((await rt.history(run.id))[-1].id)).messages == ["turn 1", "turn 2", "turn 3"]
    with pytest.raises(GraphError) as e:
        compile_plan({**plan, "nodes": [{**plan["nodes"][0], "max_iterations": 0}, plan["nodes"][1]]}, reg)
    assert "max_iterations" in str(e.value)
    # a condition the registry does not know is that one problem, not also a loop with no exit
    with pytest.raises(GraphError) as e:
        compile_plan({**plan, "nodes": [plan["nodes"][0], {**plan["nodes"][1], "when": "agian"}]}, reg)
    assert len(e.value.problems) == 1 and "unknown predicate 'agian'" in str(e.value)


async def test_streaming_a_loop_yields_every_instance_in_trace_order(rt: Runtime) -> None:
    events = [ev async for ev in rt.stream(react(), {"goal": 3})]
    run_id = events[0].run_id
    trace = await rt.events(run_id)
    streamed = [e for e in events if e.type != "checkpoint" and not e.ephemeral]
    assert [(e.seq, e.type, e.node) for e in streamed] == [(t.seq, str(t.type), t.node) for t in trace]
    outputs = [e.node for e in events if e.type == "node.succeed"]
    assert outputs == ["prep", "model", "tool", "model#1", "tool#1", "model#2", "finish"]


async def test_who_answered_is_recorded_in_the_trace(rt: Runtime) -> None:
    g = Graph("ask_once", S)

    @g.node()
    def ask(s: S, ctx: Any) -> dict[str, Any]:
        return {"messages": [str(ctx.interrupt({"q": "ok?"}))]}

    run = await rt.start(g, {})
    run = await rt.resume(run.id, "yes", answered_by="alice")
    assert run.status == RunStatus.SUCCEEDED
    answered = [e for e in await rt.events(run.id) if e.type == "interrupt.answered"]
    assert [e.data.get("by") for e in answered] == ["alice"]


async def test_null_is_an_answer_like_any_other(rt: Runtime) -> None:
    g = Graph("ask_null", S)

    @g.node()
    async def ask(s: S, ctx: Any) -> dict[str, Any]:
        return {"messages": [repr(await ctx.interrupt({"q": "anything?"}))]}

    run = await rt.start(g, {})
    run = await rt.resume(run.id, None)
    assert run.status == RunStatus.SUCCEEDED
    assert (await rt.state_at((await rt.history(run.id))[-1].id)).messages == ["None"]
    assert len(await rt.interrupts(run.id, pending=False)) == 1


async def test_a_node_after_the_loop_entry_sees_the_members_of_the_last_iteration_too(rt: Runtime) -> None:
    """``read`` hangs off the loop's entry, but waits for the loop's end: the last
    iteration's ``search`` ran before the loop ended, so its source is read too."""
    class R(BaseModel):
        sources: Annotated[list[str], append] = []
        notes: Annotated[list[str], append] = []

    g = Graph("research", R)

    @g.node(after=["decide"], max_iterations=5)
    def model(s: R) -> dict[str, Any]:
        return {}

    @g.node(after=["model"])
    def search(s: R) -> dict[str, Any]:
        return {"sources": [f"src{len(s.sources)}"]}

    @g.node(after=["search"], when=lambda s: len(s.sources) < 3)
    def decide(s: R) -> dict[str, Any]:
        return {}

    @g.node(after=["model"], map_over="sources")
    async def read(s: R, ctx: Any, item: str) -> dict[str, Any]:
        return {"notes": [f"read {item}"]}

    @g.node(after=["model"])
    def count(s: R) -> dict[str, Any]:
        return {"notes": [f"{len(s.sources)} sources"]}

    run = await rt.start(g, {})
    assert run.status == RunStatus.SUCCEEDED
    state = await rt.state_at((await rt.history(run.id))[-1].id)
    assert state.sources == ["src0", "src1", "src2"]
    assert [n for n in state.notes if n.startswith("read")] == ["read src0", "read src1", "read src2"]
    assert "3 sources" in state.notes


async def test_continuing_a_run_stopped_by_the_iteration_bound_fails_it_again(rt: Runtime) -> None:
    """The bound is part of the graph: a continuation meets it at once and never runs
    what comes after the loop as if the loop had ended."""
    calls: list[str] = []
    run = await rt.start(react(max_iterations=3, calls=calls), {"goal": 50})
    assert run.status == RunStatus.FAILED
    cont = await rt.resume(run.id)
    assert cont.status == RunStatus.FAILED and cont.id != run.id
    assert cont.error == run.error
    final = (await rt.history(cont.id))[-1].node_states
    assert final["finish"] != NodeStatus.SUCCEEDED and "model#3" not in final
    assert len(calls) == 3   # the tools of the first run, none again


async def test_a_loop_that_meets_its_bound_through_an_empty_map_runs_nothing_after_it(rt: Runtime) -> None:
    """The way back is a map over an empty list: it settles as it starts, the bound stops
    the run there, and the node after the loop must not start on the unfinished work."""
    class M(BaseModel):
        items: list[str] = []
        log: Annotated[list[str], append] = []
        done: str = ""

    g = Graph("empty_map_loop", M)

    @g.node(after=["tool"], max_iterations=3)
    def model(s: M) -> dict[str, Any]:
        return {"log": ["model"]}

    @g.node(after=["model"], when=lambda s: True, map_over="items")
    def tool(s: M, item: str) -> dict[str, Any]:
        return {"log": [f"tool {item}"]}

    @g.node(after=["model"])
    def after(s: M) -> dict[str, Any]:
        return {"done": "ran"}

    run = await rt.start(g, {"items": []})
    assert run.status == RunStatus.FAILED and run.error is not None
    assert run.error["class"] == ErrorClass.LIMIT_EXCEEDED.value
    final = (await rt.history(run.id))[-1]
    assert final.node_states["after"] != NodeStatus.SUCCEEDED
    assert (await rt.state_at(final.id)).done == ""


async def test_a_timeout_in_an_iteration_names_that_iteration(rt: Runtime) -> None:
    async def step(s: S) -> dict[str, Any]:
        if s.turns == 2:
            await asyncio.sleep(5)
        return {"turns": s.turns + 1}

    g = Graph("slow-turn", S)   # step leads back to itself through `again`
    g.add_node("step", step, after=["again"], max_iterations=5, timeout=0.2)
    g.add_node("again", lambda s: None, after=["step"], when=lambda s: s.turns < 4)
    run = await rt.start(g, {})
    assert run.status == RunStatus.FAILED and run.error is not None
    assert run.error["node"] == "step#2"
    assert "node 'step#2' attempt 1 passed its deadline" in run.error["message"]
