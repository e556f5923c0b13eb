"""Nested loops, on every store: a loop inside a loop's body, declared in one graph or
as a subgraph with a loop of its own (a supervisor calling a ReAct sub-agent). An
instance inside the inner loop carries one iteration per loop around it, outermost
first (``step``, ``step#0.1``, ``step#1.0``, ``work#1.2[0]``); the inner loop starts
afresh in every outer iteration and its bound counts per outer iteration; exceeding
either bound fails the run with ``limit_exceeded`` naming that loop's entry. State
folds outer iteration by outer iteration, inner iterations in order. Resume, interrupts,
forks, replays and export/import work as they do for one loop. Nested cycles that are
not nested loops are refused at compile time."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from runtime import (EffectStatus, ErrorClass, Graph, GraphError, InvalidRequest, NodeStatus, RunKind, RunStatus,
                     Runtime, append)
from runtime.store.base import CheckpointStore

from integration.harness_checks import assert_instance_trace_consistent


class S(BaseModel):
    plan: list[int] = [2, 3]     # how many inner iterations each outer iteration wants
    outer: int = 0               # outer iterations begun (1-based once begun)
    inner: int = 0               # inner iterations done in this outer iteration
    log: Annotated[list[str], append] = []


class Agent(BaseModel):
    """The sub-agent's view of ``S``."""

    plan: list[int] = [2, 3]
    outer: int = 0
    inner: int = 0
    log: Annotated[list[str], append] = []


def recorded(calls: list[str] | None, instance: str, result: str) -> str:
    """An effect reaching the outside world: counted by instance name."""
    if calls is not None:
        calls.append(instance)
    return result


def nested(calls: list[str] | None = None, *, outer_bound: int = 4, inner_bound: int = 3,
           fail_once: set[str] | None = None, ask_at: str | None = None, changed_at: str | None = None,
           side_delay: float | None = None, inner_loop: bool = True) -> Graph:
    """begin (outer entry) → [step (inner entry) ⇄ more] → tally → again ⇢ begin; finish.

    Outer iteration o (1-based in the state) runs ``plan[o - 1]`` inner iterations; each
    ``step`` calls the effect ``tool`` (counted in ``calls``) whose result is its log line.
    ``fail_once``: those instances fail after their effect, the first time; ``ask_at``:
    that instance asks a question after its effect; ``changed_at``: that instance logs
    something else (a code change); ``side_delay``: a node ``side`` beside the inner loop
    in the outer body, taking that long; ``inner_loop=False``: one ``step`` per outer
    iteration, no loop inside."""
    g = Graph("nested", S)

    @g.node(after=["again"], max_iterations=outer_bound)
    def begin(s: S) -> dict[str, Any]:
        return {"outer": s.outer + 1, "inner": 0, "log": [f"begin {s.outer + 1}"]}

    @g.node(after=["begin", "more"] if inner_loop else ["begin"],
            max_iterations=inner_bound if inner_loop else None)
    def step(s: S, ctx: Any) -> dict[str, Any]:
        n = s.inner + 1
        reply = ctx.effect("tool", lambda: recorded(calls, ctx.node, f"step {s.outer}.{n}"),
                           request={"outer": s.outer, "inner": n})
        if ctx.node == ask_at:
            question = {"question": f"go on after {s.outer}.{n}?"}
            reply += " " + str(ctx.interrupt(question))
        if fail_once is not None and ctx.node in fail_once:
            fail_once.discard(ctx.node)
            raise ValueError(f"{ctx.node} broke")
        if ctx.node == changed_at:
            reply = "changed"
        return {"inner": n, "log": [reply]}

    if inner_loop:
        @g.node(after=["step"], when=lambda s: s.inner < s.plan[s.outer - 1])
        def more(s: S) -> None:
            return None

    @g.node(after=["step"])
    def tally(s: S) -> dict[str, Any]:
        return {"log": [f"tally {s.outer} after {s.inner}"]}

    if side_delay is not None:
        @g.node(after=["begin"])
        async def side(s: S) -> dict[str, Any]:
            await asyncio.sleep(side_delay)
            return {"log": [f"side {s.outer}"]}

    @g.node(after=["tally", "side"] if side_delay is not None else ["tally"],
            when=lambda s: s.outer < len(s.plan))
    def again(s: S) -> None:
        return None

    @g.node(after=["begin"])
    def finish(s: S) -> dict[str, Any]:
        return {"log": [f"finish after {s.outer}"]}

    return g


def expected_log(plan: list[int]) -> list[str]:
    """The log of a finished ``nested`` run: outer iteration by outer iteration."""
    log: list[str] = []
    for o, steps in enumerate(plan, 1):
        log += [f"begin {o}", *(f"step {o}.{n}" for n in range(1, steps + 1)), f"tally {o} after {steps}"]
    return [*log, f"finish after {len(plan)}"]


def inner_name(node: str, outer: int, inner: int) -> str:
    """The name of ``node``'s instance in inner iteration ``inner`` of outer iteration ``outer``."""
    return node if outer == inner == 0 else f"{node}#{outer}.{inner}"


async def final_state(rt: Runtime, run_id: str) -> Any:
    return await rt.state_at((await rt.history(run_id))[-1].id)


async def checkpoint_after(rt: Runtime, run_id: str, instance: str) -> str:
    return next(c.id for c in await rt.history(run_id) if instance in c.nodes)


async def attempted(rt: Runtime, run_id: str) -> list[str]:
    return [a.node for a in await rt.attempts(run_id)]


#: every instance of a ``nested`` run with plan [2, 3], in canonical order
INSTANCES_2_3 = ["begin", "step", "more", "step#0.1", "more#0.1", "tally", "again",
                 "begin#1", "step#1.0", "more#1.0", "step#1.1", "more#1.1", "step#1.2", "more#1.2", "tally#1",
                 "again#1", "finish"]


# --------------------------------------------------------------------------- running


async def test_nested_loops_in_one_graph_name_instances_by_both_iterations_and_fold_in_order(rt: Runtime) -> None:
    calls: list[str] = []
    run = await rt.start(nested(calls), {"plan": [2, 3]})
    assert run.status == RunStatus.SUCCEEDED, run.error
    history = await rt.history(run.id)
    final = dict(history[-1].node_states)
    skipped = {"more#0.1", "more#1.2", "again#1"}   # the ways back not taken: each loop ended there
    assert final == {n: NodeStatus.SKIPPED if n in skipped else NodeStatus.SUCCEEDED for n in INSTANCES_2_3}
    assert "step#0.0" not in final and "begin#0" not in final   # all zero: the plain name
    # every inner iteration's effect reached the world once, the inner loop afresh in each outer iteration
    assert calls == ["step", "step#0.1", "step#1.0", "step#1.1", "step#1.2"]
    for name in calls:
        assert sum(name in cp.nodes for cp in history) == 1   # its own checkpoint
    folded = [n for cp in history for n in cp.nodes]
    order = ["step", "step#0.1", "tally", "begin#1", "step#1.0", "step#1.1", "step#1.2", "tally#1", "finish"]
    assert [folded.index(n) for n in order] == sorted(folded.index(n) for n in order)
    # nodes after the inner loop ran once it ended; after the outer loop, once that ended
    assert (await final_state(rt, run.id)).log == [
        "begin 1", "step 1.1", "step 1.2", "tally 1 after 2",
        "begin 2", "step 2.1", "step 2.2", "step 2.3", "tally 2 after 3", "finish after 2"]
    await assert_instance_trace_consistent(rt, run.id)


async def test_a_branch_beside_the_inner_loop_folds_the_same_whatever_the_timing(rt: Runtime) -> None:
    """``side`` runs in the outer body in parallel with the inner loop: its place in the
    fold is canonical (inside its outer iteration), not the moment it finished."""
    logs = []
    for delay in (0.0, 0.05):
        run = await rt.start(nested(side_delay=delay), {"plan": [2, 2]})
        assert run.status == RunStatus.SUCCEEDED, run.error
        final = (await rt.history(run.id))[-1].node_states
        assert final["side"] == final["side#1"] == NodeStatus.SUCCEEDED and "side#0.1" not in final
        logs.append((await final_state(rt, run.id)).log)
    assert logs[0] == logs[1]
    log = logs[0]
    assert log.index("begin 1") < log.index("side 1") < log.index("begin 2") < log.index("side 2")
    assert [x for x in log if not x.startswith("side")] == expected_log([2, 2])


def supervisor(calls: list[str] | None = None, *, inner_bound: int = 3) -> Graph:
    """A supervisor loop (begin → agent → tally → again) whose body calls a ReAct
    sub-agent: the subgraph ``agent``, a loop of its own (step ⇄ more)."""
    child = Graph("react", Agent)

    @child.node(after=["more"], max_iterations=inner_bound)
    def step(s: Agent, ctx: Any) -> dict[str, Any]:
        n = s.inner + 1
        reply = ctx.effect("llm", lambda: recorded(calls, ctx.node, f"agent {s.outer}.{n}"),
                           request={"outer": s.outer, "inner": n})
        return {"inner": n, "log": [reply]}

    @child.node(after=["step"], when=lambda s: s.inner < s.plan[s.outer - 1])
    def more(s: Agent) -> None:
        return None

    g = Graph("supervisor", S)

    @g.node(after=["again"], max_iterations=4)
    def begin(s: S) -> dict[str, Any]:
        return {"outer": s.outer + 1, "inner": 0, "log": [f"begin {s.outer + 1}"]}

    g.subgraph("agent", child, after=["begin"])

    @g.node(after=["agent"])
    def tally(s: S) -> dict[str, Any]:
        return {"log": [f"tally {s.outer} after {s.inner}"]}

    @g.node(after=["tally"], when=lambda s: s.outer < len(s.plan))
    def again(s: S) -> None:
        return None

    @g.node(after=["begin"])
    def finish(s: S) -> dict[str, Any]:
        return {"log": [f"finish after {s.outer}"]}

    return g


async def test_a_subgraph_with_a_loop_inside_a_parent_loop(rt: Runtime) -> None:
    calls: list[str] = []
    run = await rt.start(supervisor(calls), {"plan": [2, 3]})
    assert run.status == RunStatus.SUCCEEDED, run.error
    final = (await rt.history(run.id))[-1].node_states
    steps = ["agent/step", "agent/step#0.1", "agent/step#1.0", "agent/step#1.1", "agent/step#1.2"]
    assert calls == steps
    assert all(final[n] == NodeStatus.SUCCEEDED for n in steps)
    assert final["agent/more#0.1"] == final["agent/more#1.2"] == NodeStatus.SKIPPED
    assert "agent/step#0.2" not in final and "agent/step#1.3" not in final
    # the subgraph is one step of each outer iteration
    assert final["agent"] == final["agent#1"] == NodeStatus.SUCCEEDED and "agent#2" not in final
    assert final["tally#1"] == final["finish"] == NodeStatus.SUCCEEDED
    assert (await final_state(rt, run.id)).log == [
        "begin 1", "agent 1.1", "agent 1.2", "tally 1 after 2",
        "begin 2", "agent 2.1", "agent 2.2", "agent 2.3", "tally 2 after 3", "finish after 2"]
    await assert_instance_trace_consistent(rt, run.id)


# --------------------------------------------------------------------------- bounds


async def test_the_inner_bound_counts_per_outer_iteration(rt: Runtime) -> None:
    """Three inner iterations in each of four outer iterations, with an inner bound of
    three and an outer bound of four: every bound is met, none exceeded."""
    calls: list[str] = []
    plan = [3, 3, 3, 3]
    run = await rt.start(nested(calls, outer_bound=4, inner_bound=3), {"plan": plan})
    assert run.status == RunStatus.SUCCEEDED, run.error
    final = (await rt.history(run.id))[-1].node_states
    steps = [inner_name("step", o, i) for o in range(4) for i in range(3)]
    assert calls == steps
    assert all(final[n] == NodeStatus.SUCCEEDED for n in steps)
    assert all(final[inner_name("more", o, 2)] == NodeStatus.SKIPPED for o in range(4))
    assert "step#3.3" not in final and "begin#4" not in final
    assert final["begin#3"] == NodeStatus.SUCCEEDED and final["again#3"] == NodeStatus.SKIPPED
    assert (await final_state(rt, run.id)).log == expected_log(plan)


async def test_exceeding_the_inner_bound_fails_the_run_naming_the_inner_entry(rt: Runtime) -> None:
    """Outer iteration 0 stays within the inner bound; outer iteration 1 wants one inner
    iteration more than it allows."""
    run = await rt.start(nested(inner_bound=3), {"plan": [2, 4]})
    assert run.status == RunStatus.FAILED
    assert run.error is not None and run.error["class"] == ErrorClass.LIMIT_EXCEEDED.value
    message = str(run.error["message"])
    assert "loop 'step'" in message and "max_iterations=3" in message and "loop 'begin'" not in message
    final = (await rt.history(run.id))[-1]
    assert final.node_states["step#1.2"] == NodeStatus.SUCCEEDED and "step#1.3" not in final.node_states
    assert final.node_states["tally"] == NodeStatus.SUCCEEDED
    # never "succeeded with the work unfinished": nothing after the inner loop ran in outer iteration 1
    assert final.node_states.get("tally#1") != NodeStatus.SUCCEEDED
    assert final.node_states["finish"] != NodeStatus.SUCCEEDED
    assert (await rt.state_at(final.id)).log == [
        "begin 1", "step 1.1", "step 1.2", "tally 1 after 2", "begin 2", "step 2.1", "step 2.2", "step 2.3"]


async def test_exceeding_the_outer_bound_fails_the_run_naming_the_outer_entry(rt: Runtime) -> None:
    run = await rt.start(nested(outer_bound=2, inner_bound=3), {"plan": [1, 1, 1]})
    assert run.status == RunStatus.FAILED
    assert run.error is not None and run.error["class"] == ErrorClass.LIMIT_EXCEEDED.value
    message = str(run.error["message"])
    assert "loop 'begin'" in message and "max_iterations=2" in message and "loop 'step'" not in message
    final = (await rt.history(run.id))[-1]
    assert final.node_states["tally#1"] == NodeStatus.SUCCEEDED and "begin#2" not in final.node_states
    assert final.node_states["finish"] != NodeStatus.SUCCEEDED
    assert (await rt.state_at(final.id)).log == [
        "begin 1", "step 1.1", "tally 1 after 1", "begin 2", "step 2.1", "tally 2 after 1"]


async def test_exceeding_a_sub_agents_bound_names_its_entry_inside_the_subgraph(rt: Runtime) -> None:
    run = await rt.start(supervisor(inner_bound=2), {"plan": [2, 3]})
    assert run.status == RunStatus.FAILED
    assert run.error is not None and run.error["class"] == ErrorClass.LIMIT_EXCEEDED.value
    message = str(run.error["message"])
    assert "loop 'agent/step'" in message and "max_iterations=2" in message
    final = (await rt.history(run.id))[-1].node_states
    assert final["agent"] == NodeStatus.SUCCEEDED   # outer iteration 0 stayed within the bound
    assert final["agent/step#1.1"] == NodeStatus.SUCCEEDED and "agent/step#1.2" not in final
    assert final.get("agent#1") != NodeStatus.SUCCEEDED and final["finish"] != NodeStatus.SUCCEEDED


# --------------------------------------------------------------------------- failures and pauses


async def test_resume_after_a_failure_in_an_inner_iteration_reruns_only_what_failed(rt: Runtime) -> None:
    calls: list[str] = []
    graph = nested(calls, fail_once={"step#1.1"})
    run = await rt.start(graph, {"plan": [2, 3]})
    assert run.status == RunStatus.FAILED
    assert run.error is not None and run.error["node"] == "step#1.1"
    head = (await rt.history(run.id))[-1].node_states
    assert head["step#1.1"] == NodeStatus.FAILED
    assert all(head[n] == NodeStatus.SUCCEEDED for n in ("step", "step#0.1", "tally", "begin#1", "step#1.0"))
    assert calls == ["step", "step#0.1", "step#1.0", "step#1.1"]   # its effect happened before it broke

    cont = await rt.resume(run.id)
    assert cont.status == RunStatus.SUCCEEDED, cont.error
    assert cont.id != run.id
    assert await attempted(rt, cont.id) == ["step#1.1", "more#1.1", "step#1.2", "tally#1", "finish"]
    # step#1.1's effect was served from the journal, not repeated; every effect happened once
    assert calls == ["step", "step#0.1", "step#1.0", "step#1.1", "step#1.2"]
    assert (await final_state(rt, cont.id)).log == expected_log([2, 3])
    await assert_instance_trace_consistent(rt, cont.id)


async def test_an_interrupt_inside_the_inner_loop_pauses_the_run_and_the_answer_continues_it(rt: Runtime) -> None:
    calls: list[str] = []
    run = await rt.start(nested(calls, ask_at="step#1.1"), {"plan": [1, 2]})
    assert run.status == RunStatus.INTERRUPTED
    (pending,) = await rt.interrupts(run.id)
    assert pending.node == "step#1.1" and pending.payload["value"] == {"question": "go on after 2.2?"}
    head = (await rt.history(run.id))[-1].node_states
    assert head["step#1.1"] == NodeStatus.INTERRUPTED and head["step#1.0"] == NodeStatus.SUCCEEDED
    assert head.get("tally#1") != NodeStatus.SUCCEEDED and head["finish"] != NodeStatus.SUCCEEDED
    assert calls == ["step", "step#1.0", "step#1.1"]

    resumed = await rt.resume(run.id, "yes")
    assert resumed.status == RunStatus.SUCCEEDED and resumed.id == run.id
    assert calls == ["step", "step#1.0", "step#1.1"]   # the asking instance's effect was not repeated
    assert await rt.interrupts(run.id) == []
    assert (await final_state(rt, run.id)).log == [
        "begin 1", "step 1.1", "tally 1 after 1", "begin 2", "step 2.1", "step 2.2 yes", "tally 2 after 2",
        "finish after 2"]


# --------------------------------------------------------------------------- time travel


async def test_fork_from_inside_the_inner_loop_of_a_later_outer_iteration(rt: Runtime) -> None:
    calls: list[str] = []
    run = await rt.start(nested(calls), {"plan": [2, 3]})
    assert run.status == RunStatus.SUCCEEDED
    recorded_journal = rt.store.journal([run.id])
    base = await checkpoint_after(rt, run.id, "step#1.1")
    assert (await rt.checkpoint(base)).ready == ["more#1.1"]

    fork = await rt.fork(base)   # effects mocked
    assert fork.status == RunStatus.SUCCEEDED and fork.kind == RunKind.FORK
    assert await attempted(rt, fork.id) == ["more#1.1", "step#1.2", "tally#1", "finish"]
    served = rt.store.journal([fork.id])
    assert [(e.node, e.name, e.status) for e in served] == [("step#1.2", "tool", EffectStatus.MOCKED)]
    assert served[0].source == f"run:{run.id}"
    assert len(calls) == 5 and rt.store.journal([run.id]) == recorded_journal   # nothing reached the world
    assert await final_state(rt, fork.id) == await final_state(rt, run.id)
    head = (await rt.history(fork.id))[-1].node_states
    assert head["more#1.2"] == head["again#1"] == NodeStatus.SKIPPED and "step#1.3" not in head
    await assert_instance_trace_consistent(rt, fork.id)

    # a patch that wants fewer inner iterations ends the inner loop right there
    shorter = await rt.fork(base, {"plan": [2, 2]})
    assert shorter.status == RunStatus.SUCCEEDED, shorter.error
    assert await attempted(rt, shorter.id) == ["tally#1", "finish"]
    head = (await rt.history(shorter.id))[-1].node_states
    assert head["more#1.1"] == NodeStatus.SKIPPED and "step#1.2" not in head
    assert (await final_state(rt, shorter.id)).log == expected_log([2, 2])
    assert len(calls) == 5


def verdicts(report: Any) -> dict[str, str]:
    return {n.node: str(n.verdict) for n in report.nodes}


async def test_replay_of_nested_loops_reports_every_instance(rt: Runtime) -> None:
    calls: list[str] = []
    run = await rt.start(nested(calls), {"plan": [2, 3]})
    report = await rt.replay(run.id)
    assert [n.node for n in report.nodes] == INSTANCES_2_3
    assert set(verdicts(report).values()) == {"same"} and report.same
    assert report.node("more#1.2").replay_status == "skipped"
    assert len(calls) == 5                                  # every effect was served

    changed = await rt.replay(run.id, graph=nested(calls, changed_at="step#1.1"))
    assert not changed.same
    assert [n.node for n in changed.differences()] == ["step#1.1"]
    [change] = changed.node("step#1.1").write_changes
    assert (change.dotted(), change.old, change.new) == ("log[0]", "step 2.2", "changed")
    assert len(calls) == 5


async def test_export_and_import_keep_nested_loop_histories(rt: Runtime, other_store: CheckpointStore) -> None:
    calls: list[str] = []
    graph = nested(calls)
    run = await rt.start(graph, {"plan": [2, 3]})
    fork = await rt.fork(await checkpoint_after(rt, run.id, "step#1.0"))
    replay = await rt.replay(await checkpoint_after(rt, run.id, "step#0.1"))
    assert fork.status == RunStatus.SUCCEEDED and replay.same
    doc = json.loads(json.dumps(await rt.export_thread(run.id)))
    other = Runtime(other_store)
    try:
        imported = await other.import_thread(doc)
        assert {r.id for r in imported} == {run.id, fork.id, replay.run_id}
        for rid in (run.id, fork.id, replay.run_id):
            history = await other.history(rid)
            assert history == await rt.history(rid)
            assert [dict(c.node_states) for c in history] == [dict(c.node_states) for c in await rt.history(rid)]
            assert "step#1.2" in history[-1].node_states
            assert other.store.journal([rid]) == rt.store.journal([rid])
            for c in history:
                assert (await other.state_at(c.id)).model_dump() == (await rt.state_at(c.id)).model_dump()
            await assert_instance_trace_consistent(other, rid)
        other.register(graph)
        again = await other.replay(run.id)
        assert again.same and [n.node for n in again.nodes] == INSTANCES_2_3
        assert len(calls) == 5
    finally:
        other.close()


# --------------------------------------------------------------------------- maps


class M(BaseModel):
    plan: list[int] = [2, 3]
    outer: int = 0
    inner: int = 0
    calls: list[str] = []
    results: Annotated[list[str], append] = []


async def test_a_map_inside_the_inner_loop_names_its_items_by_both_iterations(rt: Runtime) -> None:
    """Inner iteration n of outer iteration o maps over n tool calls (``work#o.n[k]``);
    the items finish in reverse order, and their results fold in item order."""
    g = Graph("nested_map", M)
    seen: list[str] = []

    @g.node(after=["again"], max_iterations=3)
    def begin(s: M) -> dict[str, Any]:
        return {"outer": s.outer + 1, "inner": 0}

    @g.node(after=["begin", "more"], max_iterations=4)
    def step(s: M) -> dict[str, Any]:
        n = s.inner + 1
        return {"inner": n, "calls": [f"{s.outer}.{n}.{k}" for k in range(n)]}

    @g.node(after=["step"], map_over="calls")
    async def work(s: M, ctx: Any, item: str) -> dict[str, Any]:
        await asyncio.sleep(0.003 * (len(s.calls) - int(item.rsplit(".", 1)[1])))
        result = await ctx.effect("tool", lambda: recorded(seen, ctx.node, f"r{item}"), request={"call": item})
        return {"results": [result]}

    @g.node(after=["work"], when=lambda s: s.inner < s.plan[s.outer - 1])
    def more(s: M) -> None:
        return None

    @g.node(after=["step"], when=lambda s: s.outer < len(s.plan))
    def again(s: M) -> None:
        return None

    run = await rt.start(g, {"plan": [2, 3]})
    assert run.status == RunStatus.SUCCEEDED, run.error
    final = (await rt.history(run.id))[-1].node_states
    items = [f"{inner_name('work', o, n)}[{k}]" for o, steps in enumerate([2, 3]) for n in range(steps)
             for k in range(n + 1)]
    assert items[:4] == ["work[0]", "work#0.1[0]", "work#0.1[1]", "work#1.0[0]"]
    assert {n for n in final if "[" in n} == set(items)
    assert all(final[n] == NodeStatus.SUCCEEDED for n in items)
    assert final["work#1.2"] == NodeStatus.SUCCEEDED and final["work#1.2[2]"] == NodeStatus.SUCCEEDED
    assert "work#1.2[3]" not in final and "work#0.2" not in final
    assert sorted(seen) == sorted(items)                    # each item's effect once, under its own name
    assert (await final_state(rt, run.id)).results == [
        "r1.1.0", "r1.2.0", "r1.2.1",
        "r2.1.0", "r2.2.0", "r2.2.1", "r2.3.0", "r2.3.1", "r2.3.2"]


# --------------------------------------------------------------------------- validation


def noop(s: Any) -> None:
    return None


def test_two_bounds_on_one_cycle_that_are_not_nested_are_refused() -> None:
    """alpha → beta → gamma → alpha is one cycle: with max_iterations on alpha and on beta,
    neither loop lies inside the other."""
    g = Graph("two_bounds")
    g.add_node("alpha", noop, after=["gamma"], max_iterations=3)
    g.add_node("beta", noop, after=["alpha"], max_iterations=3)
    g.add_node("gamma", noop, after=["beta"], when=lambda s: True)
    with pytest.raises(GraphError) as e:
        g.compile()
    text = str(e.value)
    assert "max_iterations" in text and "'alpha'" in text and "'beta'" in text

    fine = Graph("one_bound")   # the same cycle with one bound is a loop
    fine.add_node("alpha", noop, after=["gamma"], max_iterations=3)
    fine.add_node("beta", noop, after=["alpha"])
    fine.add_node("gamma", noop, after=["beta"], when=lambda s: True)
    fine.compile()


def nested_shape(name: str, *, inner_exit_to_outer: bool = False, inner_when: bool = True) -> Graph:
    """boss (outer entry) → [worker (inner entry) ⇄ worker_more] → again ⇢ boss."""
    g = Graph(name)
    g.add_node("boss", noop, after=["again", "worker_more"] if inner_exit_to_outer else ["again"],
               max_iterations=3)
    g.add_node("worker", noop, after=["boss", "worker_more"], max_iterations=3)
    g.add_node("worker_more", noop, after=["worker"], when=(lambda s: True) if inner_when else None)
    g.add_node("again", noop, after=["worker"], when=lambda s: True)
    return g


def test_an_edge_back_to_the_outer_entry_from_inside_the_inner_loop_is_refused() -> None:
    nested_shape("well_nested").compile()
    with pytest.raises(GraphError) as e:
        nested_shape("jumps_out", inner_exit_to_outer=True).compile()
    text = str(e.value)
    assert "boss" in text and "worker_more" in text


def test_an_inner_cycle_without_a_when_is_refused_as_having_no_exit() -> None:
    with pytest.raises(GraphError) as e:
        nested_shape("no_inner_exit", inner_when=False).compile()
    text = str(e.value)
    assert "has no exit" in text and "worker_more" in text


def branching(name: str, *, jump_back_from_inside: bool = False) -> Graph:
    """O (outer entry) → pre → [X ⇄ x_more] → tail → again ⇢ O, with ``side`` beside the
    inner loop in the outer body (O → side → tail)."""
    g = Graph(name, S)

    def line(label: str) -> Any:
        return lambda s: {"log": [label]}

    g.add_node("O", line("O"), after=["again", "x_more"] if jump_back_from_inside else ["again"], max_iterations=3)
    g.add_node("pre", line("pre"), after=["O"])
    g.add_node("X", line("X"), after=["pre", "x_more"], max_iterations=3)
    g.add_node("x_more", noop, after=["X"], when=lambda s: s.log.count("X") % 2 == 1)
    g.add_node("side", line("side"), after=["O"])
    g.add_node("tail", line("tail"), after=["X", "side"])
    g.add_node("again", noop, after=["tail"], when=lambda s: s.log.count("O") < 2)
    return g


async def test_an_inner_loop_after_a_step_with_a_branch_beside_it_is_nested_in_the_outer_loop(rt: Runtime) -> None:
    graph = branching("branching").compile()
    assert graph.loop_path["X"] == ("O", "X") and graph.loop_path["side"] == ("O",)
    run = await rt.start(graph, {})
    assert run.status == RunStatus.SUCCEEDED, run.error
    final = (await rt.history(run.id))[-1]
    assert (await rt.state_at(final.id)).log == ["O", "pre", "X", "X", "side", "tail"] * 2   # canonical order
    assert final.node_states["X#1.1"] == NodeStatus.SUCCEEDED and "X#1.2" not in final.node_states


@pytest.mark.parametrize("side", [False, True])
def test_an_edge_back_from_inside_the_inner_loop_is_refused_with_or_without_a_branch_beside_it(side: bool) -> None:
    """x_more leads back to O from inside X's loop. With ``side`` beside the inner loop, X
    could be read as the outer entry, holding a loop O → side → tail → again entered at tail
    from X, beside its entry O: that reading is not taken either, and the way back from
    inside is named."""
    g = branching("jump", jump_back_from_inside=True)
    if not side:
        g = Graph("jump_alone", S)
        g.add_node("O", noop, after=["again", "x_more"], max_iterations=3)
        g.add_node("pre", noop, after=["O"])
        g.add_node("X", noop, after=["pre", "x_more"], max_iterations=3)
        g.add_node("x_more", noop, after=["X"], when=lambda s: True)
        g.add_node("tail", noop, after=["X"])
        g.add_node("again", noop, after=["tail"], when=lambda s: True)
    with pytest.raises(GraphError) as e:
        g.compile()
    assert "'x_more' leads back to 'O' from inside the loop of 'X'" in str(e.value)


def test_a_condition_on_a_sub_agents_first_node_is_no_exit_of_the_loop_around_it() -> None:
    """Skipped, the sub-agent's first node leaves the subgraph entered and ended: the
    supervisor would go round until its bound. The same condition on an inner entry
    declared in the parent ends the outer loop, and compiles."""
    child = Graph("react", S)
    child.add_node("step", noop, after=["more"], max_iterations=3, when=lambda s: True)
    child.add_node("more", noop, after=["step"], when=lambda s: True)
    g = Graph("supervise", S)
    g.add_node("sup", noop, after=["route"], max_iterations=4)
    g.subgraph("agent", child, after=["sup"])
    g.add_node("route", noop, after=["agent"])
    with pytest.raises(GraphError) as e:
        g.compile()
    assert "has no exit of its own" in str(e.value) and "unless it starts a subgraph" in str(e.value)

    flat = Graph("supervise_flat", S)
    flat.add_node("sup", noop, after=["route"], max_iterations=4)
    flat.add_node("step", noop, after=["sup", "more"], max_iterations=3, when=lambda s: True)
    flat.add_node("more", noop, after=["step"], when=lambda s: True)
    flat.add_node("route", noop, after=["step"])
    assert flat.compile().loop_path["step"] == ("sup", "step")


async def test_a_condition_inside_a_subgraph_without_a_loop_is_no_exit_of_the_loop_around_it(rt: Runtime) -> None:
    """``check`` skipping ``step`` (and ``note`` after it) leaves ``agent`` entered: it ends
    and ``route`` leads back to ``sup`` again, so the loop could only end at its bound. The
    same condition on ``route``, after the subgraph, ends it."""
    def child(when: Any) -> Graph:
        c = Graph("child", S)
        c.add_node("step", lambda s: {"inner": s.inner + 1, "log": [f"step {s.inner + 1}"]}, when=when)
        c.add_node("note", noop, after=["step"])
        return c

    def supervise(*, on_route: bool) -> Graph:
        more = lambda s: s.inner < 2   # noqa: E731
        g = Graph("supervise", S)
        g.add_node("sup", noop, after=["route"], max_iterations=4)
        g.subgraph("agent", child(None if on_route else more), after=["sup"])
        g.add_node("route", noop, after=["agent"], when=more if on_route else None)
        return g

    with pytest.raises(GraphError) as e:
        supervise(on_route=False).compile()
    [problem] = e.value.problems
    assert str(problem).startswith("node 'sup': cycle: sup → agent/step → agent/note → agent → route → sup has no "
                                   "exit of its own: its when= conditions are inside subgraph 'agent', which once "
                                   "entered always ends")
    run = await rt.start(supervise(on_route=True), {})
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert (await final_state(rt, run.id)).log == ["step 1", "step 2"]


class Deep(BaseModel):
    log: Annotated[list[str], append] = []
    a: int = 0
    b: int = 0
    c: int = 0


def three_deep() -> Graph:
    """A ⊃ B ⊃ C, each going round twice; ``again_a`` waits on B's loop (as a subgraph's end
    waits on its child's outer entry)."""
    inner = Graph("inner", Deep)
    inner.add_node("B", lambda s: {"b": s.b + 1, "c": 0, "log": [f"B{s.a}.{s.b + 1}"]},
                   after=["again_b"], max_iterations=3)
    inner.add_node("C", lambda s: {"c": s.c + 1, "log": [f"C{s.a}.{s.b}.{s.c + 1}"]},
                   after=["B", "more_c"], max_iterations=3)
    inner.add_node("more_c", noop, after=["C"], when=lambda s: s.c < 2)
    inner.add_node("again_b", noop, after=["C"], when=lambda s: s.b < 2)
    g = Graph("three_deep", Deep)
    g.add_node("A", lambda s: {"a": s.a + 1, "b": 0, "log": [f"A{s.a + 1}"]}, after=["again_a"], max_iterations=3)
    g.subgraph("sub", inner, after=["A"])
    g.add_node("again_a", noop, after=["sub"], when=lambda s: s.a < 2)
    return g


async def test_a_subgraph_holding_two_loops_inside_a_loop_is_three_loops_deep(rt: Runtime) -> None:
    graph = three_deep().compile()
    assert graph.loop_path["sub/C"] == ("A", "sub/B", "sub/C")
    run = await rt.start(graph, {})
    assert run.status == RunStatus.SUCCEEDED, run.error
    final = (await rt.history(run.id))[-1]
    assert (await rt.state_at(final.id)).log == [
        "A1", "B1.1", "C1.1.1", "C1.1.2", "B1.2", "C1.2.1", "C1.2.2",
        "A2", "B2.1", "C2.1.1", "C2.1.2", "B2.2", "C2.2.1", "C2.2.2"]
    assert final.node_states["sub/C#1.1.1"] == NodeStatus.SUCCEEDED and "sub/C#1.1.2" not in final.node_states


def test_an_outer_loop_whose_only_exits_are_inside_its_inner_loop_is_refused() -> None:
    g = Graph("no_outer_exit")
    g.add_node("O", noop, after=["again"], max_iterations=3)
    g.add_node("I", noop, after=["O", "imore"], max_iterations=3)
    g.add_node("imore", noop, after=["I"], when=lambda s: True)
    g.add_node("tail", noop, after=["I"])
    g.add_node("again", noop, after=["tail"])
    with pytest.raises(GraphError) as e:
        g.compile()
    text = str(e.value)
    assert "O → I → tail → again → O has no exit of its own" in text and "inside the loop of 'I'" in text


async def test_a_node_after_the_outer_loop_may_wait_on_a_node_of_the_inner_loop(rt: Runtime) -> None:
    g = nested([])
    g.add_node("post", lambda s: {"log": [f"post after {len(s.log)}"]}, after=["step"])
    run = await rt.start(g, {"plan": [2, 3]})
    assert run.status == RunStatus.SUCCEEDED, run.error
    log = (await final_state(rt, run.id)).log
    # it waited for the outer loop's end and saw all its writes (not finish's, a sibling)
    assert log[:-1] == expected_log([2, 3]) and log[-1] == f"post after {len(log) - 2}"


async def test_a_replay_of_code_that_nests_a_node_in_another_loop_is_refused_from_a_later_iteration(
        rt: Runtime) -> None:
    """``step#1`` (outer iteration 1) would read as inner iteration 1 of outer iteration 0
    under the nested code: refused before anything is created. From the run's start,
    where no instance names an iteration, the new code replays."""
    calls: list[str] = []
    run = await rt.start(nested(calls, inner_loop=False), {"plan": [1, 1]})
    assert run.status == RunStatus.SUCCEEDED, run.error
    later = next(cp for cp in await rt.history(run.id) if "step#1" in cp.nodes)
    runs_before = len(await rt.runs())
    with pytest.raises(InvalidRequest) as e:
        await rt.replay(later.id, graph=nested(calls))
    assert "'step'" in str(e.value) and "'step#1'" in str(e.value) and "'begin'" in str(e.value)
    assert len(await rt.runs()) == runs_before
    whole = await rt.replay(run.id, graph=nested(calls))
    # step (0, 0) is served the recorded effect; step#1.0 is an instance the recording never
    # had, so its effect is asked about rather than run
    assert whole.run.status == RunStatus.INTERRUPTED and len(calls) == 2
    [question] = await rt.interrupts(whole.run.id)
    assert question.node == "step#1.0"
