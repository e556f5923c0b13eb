"""A checkpoint's ``ready``: what a branch from it starts first, as the engine decides it.

People click a checkpoint and read "ready" as what runs next if they fork or resume
from there, so it must agree with the run: a ``when=`` that is false there is not
ready (what its skip makes due is), skips propagate, a loop grows its next iteration,
and a map is its items. Each case is checked against what a fork really starts, and a
property checks random guarded graphs against the recorded trace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Annotated, Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from test_properties import DELAY, Dag, dags

from runtime import ExecutableGraph, Graph, MemoryStore, NodeContext, Runtime, RunStatus, add, append, merge
from runtime.core.records import EventType, TraceEvent
from runtime.core.states import NodeStatus
from runtime.graph.instances import parse_instance

#: a node instance's first attempt ended (or will be retried): what follows is no longer the first step
OUTCOMES = {EventType.NODE_SUCCEED, EventType.NODE_FAIL, EventType.NODE_RETRY, EventType.NODE_INTERRUPT,
            EventType.NODE_CANCEL}


def started_first(graph: ExecutableGraph, events: Sequence[TraceEvent], after_seq: int = 0) -> set[str]:
    """The instances started after event ``after_seq`` and before any outcome: the run's
    first scheduling step from there (a map's group record is not run: its items are)."""
    out: set[str] = set()
    for ev in events:
        if ev.seq <= after_seq or ev.node is None or group_record(graph, ev.node):
            continue   # a map's group record starts and settles while the run schedules
        if ev.type in OUTCOMES:
            break
        if ev.type == EventType.NODE_START:
            out.add(ev.node)
    return out


def group_record(graph: ExecutableGraph, name: str) -> bool:
    p = parse_instance(name)
    return p.item is None and graph.nodes[p.node].map_over is not None


async def checkpoint_after(rt: Runtime, run_id: str, instance: str) -> str:
    return next(c.id for c in await rt.history(run_id) if instance in c.nodes)


async def fork_starts(rt: Runtime, graph: ExecutableGraph, checkpoint_id: str) -> set[str]:
    """What an unpatched fork from the checkpoint started first."""
    fork = await rt.fork(checkpoint_id)
    return started_first(graph, await rt.events(fork.id))


async def ready_as_forked(rt: Runtime, graph: ExecutableGraph, checkpoint_id: str) -> list[str]:
    """The view's ``ready``, checked against what a fork from there really starts first."""
    ready = (await rt.checkpoint(checkpoint_id)).ready
    assert set(ready) == await fork_starts(rt, graph, checkpoint_id)
    return ready


# --------------------------------------------------------------------------- a ReAct loop


class Chat(BaseModel):
    messages: Annotated[list[str], append] = []


def react(iterations: int) -> ExecutableGraph:
    """model → tool (while a tool is needed) → model …, and finish after the last model."""
    def tool_needed(s: Chat) -> bool:
        return len(s.messages) < 2 * iterations - 1

    g = Graph("react", state=Chat)
    g.add_node("model", lambda s: {"messages": [f"model {len(s.messages)}"]}, after=["tool"],
               max_iterations=10 * iterations)
    g.add_node("tool", lambda s: {"messages": [f"tool {len(s.messages)}"]}, after=["model"], when=tool_needed)
    g.add_node("finish", lambda s: {"messages": ["done"]}, after=["model"])
    return g.compile()


def instance(node: str, iteration: int) -> str:
    return node if iteration == 0 else f"{node}#{iteration}"


async def test_in_a_react_loop_the_last_model_checkpoint_has_finish_ready_not_the_tool(rt: Runtime):
    graph = react(4)
    run = await rt.start(graph, {})
    assert run.status == RunStatus.SUCCEEDED
    assert (await rt.history(run.id))[-1].node_states["tool#3"] == NodeStatus.SKIPPED
    for j in range(3):   # a middle iteration: the tool runs, then the model again
        assert await ready_as_forked(rt, graph, await checkpoint_after(rt, run.id, instance("model", j))) \
            == [instance("tool", j)]
        assert await ready_as_forked(rt, graph, await checkpoint_after(rt, run.id, instance("tool", j))) \
            == [f"model#{j + 1}"]
    # the last: tool_needed is false there, so tool#3 is skipped and the loop ends
    last = await checkpoint_after(rt, run.id, "model#3")
    assert await ready_as_forked(rt, graph, last) == ["finish"]
    assert (await rt.checkpoint(last)).to_json()["ready"] == ["finish"]


# --------------------------------------------------------------------------- skips


class Flags(BaseModel):
    go: bool = False
    flag: bool = False
    log: Annotated[list[str], append] = []


def step(name: str, delay: float = 0.0, **writes: Any):
    async def node(s: Flags, ctx: NodeContext) -> dict:
        await asyncio.sleep(delay)
        return {"log": [name], **writes}
    return node


def cascade() -> ExecutableGraph:
    """a → b (when go) → c, and j after a and c: without go, b and c are skipped and j runs."""
    g = Graph("cascade", state=Flags)
    g.add_node("a", step("a"))
    g.add_node("b", step("b"), after=["a"], when=lambda s: s.go)
    g.add_node("c", step("c"), after=["b"])
    g.add_node("j", step("j"), after=["a", "c"])
    return g.compile()


async def test_a_skip_cascade_shows_what_it_makes_ready(rt: Runtime):
    graph = cascade()
    run = await rt.start(graph, {})
    head = (await rt.history(run.id))[-1].node_states
    assert head["b"] == head["c"] == NodeStatus.SKIPPED and head["j"] == NodeStatus.SUCCEEDED
    assert await ready_as_forked(rt, graph, await checkpoint_after(rt, run.id, "a")) == ["j"]

    run = await rt.start(graph, {"go": True})
    assert await ready_as_forked(rt, graph, await checkpoint_after(rt, run.id, "a")) == ["b"]


def parallel() -> ExecutableGraph:
    """a (slow) and b (sets flag) in parallel; c after a when flag; d after a. c is given
    a's writes only (b is not its ancestor): it never sees the flag and is skipped."""
    g = Graph("parallel", state=Flags)
    g.add_node("a", step("a", delay=0.05))
    g.add_node("b", step("b", flag=True))
    g.add_node("c", step("c"), after=["a"], when=lambda s: s.flag)
    g.add_node("d", step("d"), after=["a"])
    return g.compile()


async def test_a_when_sees_its_ancestors_writes_not_the_whole_checkpoint_state(rt: Runtime):
    graph = parallel()
    run = await rt.start(graph, {})
    head = (await rt.history(run.id))[-1].node_states
    assert head["c"] == NodeStatus.SKIPPED and head["d"] == NodeStatus.SUCCEEDED
    after_a = await checkpoint_after(rt, run.id, "a")
    view = await rt.checkpoint(after_a)
    assert view.state["flag"] is True and view.checkpoint.node_states["b"] == NodeStatus.SUCCEEDED
    assert await ready_as_forked(rt, graph, after_a) == ["d"]


def raising() -> ExecutableGraph:
    def boom(s: Flags) -> bool:
        raise RuntimeError("the predicate's own bug")

    g = Graph("raising", state=Flags)
    g.add_node("a", step("a"))
    g.add_node("b", step("b"), after=["a"], when=boom)
    return g.compile()


async def test_a_when_that_raises_shows_its_node_as_ready_and_the_view_still_reads(rt: Runtime):
    graph = raising()
    run = await rt.start(graph, {})
    assert run.status == RunStatus.FAILED
    after_a = await checkpoint_after(rt, run.id, "a")
    # the engine tries b (it starts, then fails on its predicate): it is what runs next
    assert started_first(graph, await rt.events(run.id),
                         next(c for c in await rt.history(run.id) if c.id == after_a).event_seq) == {"b"}
    assert (await rt.checkpoint(after_a)).ready == ["b"]


def failing_then_asking(fail: set[str]) -> ExecutableGraph:
    """a → ask (a question) → z; a fails the first time while ``fail`` holds it."""
    g = Graph("asking", state=Flags)

    async def a(s: Flags, ctx: NodeContext) -> dict:
        if "a" in fail:
            fail.discard("a")
            raise PermissionError("refused, once")
        return {"log": ["a"]}

    async def ask(s: Flags, ctx: NodeContext) -> dict:
        answer = await ctx.interrupt({"question": "go on?"})
        return {"log": [f"ask {answer}"]}

    g.add_node("a", a)
    g.add_node("ask", ask, after=["a"])
    g.add_node("z", step("z"), after=["ask"])
    return g.compile()


async def test_a_failed_or_paused_node_is_ready_where_it_stopped_since_resuming_runs_it_again(rt: Runtime):
    graph = failing_then_asking({"a"})
    run = await rt.start(graph, {})
    assert run.status == RunStatus.FAILED
    failed_at = (await rt.history(run.id))[-1]
    assert (await rt.checkpoint(failed_at.id)).ready == ["a"]
    paused = await rt.resume(run.id)   # a continuation: a runs again, then ask pauses
    assert paused.status == RunStatus.INTERRUPTED
    assert started_first(graph, await rt.events(paused.id)) == {"a"}
    view = await rt.checkpoint((await rt.history(paused.id))[-1].id)
    assert view.interrupted == ["ask"] and view.ready == ["ask"]
    resumed = await rt.resume(paused.id, "yes")
    assert resumed.status == RunStatus.SUCCEEDED
    assert started_first(graph, await rt.events(resumed.id), view.checkpoint.event_seq) == {"ask"}


# --------------------------------------------------------------------------- maps


class Work(BaseModel):
    count: int = 3
    items: list[int] = []
    out: Annotated[list[int], append] = []
    total: int = 0


def mapped() -> ExecutableGraph:
    g = Graph("mapped", state=Work)
    g.add_node("plan", lambda s: {"items": list(range(s.count))})
    g.add_node("work", lambda s, item: {"out": [item * 10]}, after=["plan"], map_over="items")
    g.add_node("collect", lambda s: {"total": sum(s.out)}, after=["work"])
    return g.compile()


async def test_a_map_due_at_a_checkpoint_shows_its_items(rt: Runtime):
    graph = mapped()
    run = await rt.start(graph, {})
    assert await ready_as_forked(rt, graph, await checkpoint_after(rt, run.id, "plan")) \
        == ["work[0]", "work[1]", "work[2]"]
    # over an empty list the map settles at once: what follows it is next
    empty = await rt.start(graph, {"count": 0})
    assert empty.status == RunStatus.SUCCEEDED
    assert await ready_as_forked(rt, graph, await checkpoint_after(rt, empty.id, "plan")) == ["collect"]


# --------------------------------------------------------------------------- property


class R(BaseModel):
    log: Annotated[list[str], append] = []
    total: Annotated[int, add] = 0
    seen: Annotated[dict[str, int], merge] = {}


#: a node's guard: none, "total" (its input's total modulo 3 is not k) or "seen"/"unseen"
#: (whether a node, any node, is among the writes it was given)
Guard = tuple[str, Any] | None


@st.composite
def guarded_dags(draw: st.DrawFn) -> tuple[Dag, dict[str, Guard], dict[str, float]]:
    dag = draw(dags(max_nodes=8))
    guards: dict[str, Guard] = {}
    for n in dag.names:
        kind = draw(st.sampled_from(["none", "none", "total", "seen", "unseen"]), label=f"guard {n}")
        guards[n] = (None if kind == "none" else (kind, draw(st.integers(0, 2))) if kind == "total"
                     else (kind, draw(st.sampled_from(dag.names))))
    delays = draw(st.fixed_dictionaries({n: DELAY for n in dag.names}), label="delays")
    return dag, guards, delays


def predicate(guard: Guard):
    if guard is None:
        return None
    kind, arg = guard
    if kind == "total":
        return lambda s: (s.total + arg) % 3 != 0
    if kind == "seen":
        return lambda s: arg in s.seen
    return lambda s: arg not in s.seen


def guarded_graph(dag: Dag, guards: dict[str, Guard], delays: dict[str, float]) -> ExecutableGraph:
    g = Graph("guarded", state=R)
    for name in dag.names:
        async def node(s: R, ctx: NodeContext, name: str = name) -> dict:
            await asyncio.sleep(delays[name])
            return {"log": [name], "total": len(name), "seen": {name: 1}}
        g.add_node(name, node, after=dag.deps[name], when=predicate(guards[name]))
    return g.compile()


async def guarded_scenario(dag: Dag, guards: dict[str, Guard], delays: dict[str, float], pick: int) -> None:
    graph = guarded_graph(dag, guards, delays)
    rt = Runtime(MemoryStore(), max_concurrency=16)   # room for every node at once: nothing waits for a slot
    try:
        run = await rt.start(graph, {}, max_concurrency=16)
        assert run.status == RunStatus.SUCCEEDED, run.error
        events = await rt.events(run.id)
        history = await rt.history(run.id)
        for cp in history:
            view = await rt.checkpoint(cp.id)
            # in flight when it was taken: no outcome in it, so a branch from there runs them again
            running = {n for n, s in cp.node_states.items() if s == NodeStatus.RUNNING}
            assert set(view.ready) == running | started_first(graph, events, cp.event_seq), cp.seq
            assert view.ready == graph.canonical(view.ready)
        base = history[pick % len(history)]
        assert set((await rt.checkpoint(base.id)).ready) == await fork_starts(rt, graph, base.id)
    finally:
        rt.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=guarded_dags(), pick=st.integers(0, 20))
def test_ready_is_what_the_run_started_next_from_each_checkpoint(case, pick: int):
    dag, guards, delays = case
    asyncio.run(asyncio.wait_for(guarded_scenario(dag, guards, delays, pick), 30))
