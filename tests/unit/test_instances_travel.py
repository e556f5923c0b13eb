"""Time travel on runs with loops, maps and subgraphs, on every store: forks from
inside a loop, a map or a subgraph; replays and their per-instance reports; diffs;
export and import; the state at every checkpoint of a long loop."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from runtime import (EffectStatus, ExecutableGraph, Graph, InvalidRequest, NodeContext, NotFound, RunKind,
                     RunStatus, Runtime, append)
from runtime.core.states import NodeStatus
from runtime.graph import FoldShape, NodeOrder
from runtime.graph.reducers import Reducer
from runtime.store.base import CheckpointStore

from integration.harness_checks import assert_instance_trace_consistent


class S(BaseModel):
    n: int = 0
    log: Annotated[list[str], append] = []
    items: list[int] = []


class Sub(BaseModel):
    """The subgraph's view of ``S``."""

    log: Annotated[list[str], append] = []


class World:
    """What effects did to the outside world, per effect name."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def of(self, name: str) -> list[Any]:
        return [arg for n, arg in self.calls if n == name]

    def call(self, name: str, arg: Any, result: Any) -> Any:
        self.calls.append((name, arg))
        return result


# --------------------------------------------------------------------------- graphs


def loop_graph(world: World, *, stop: int = 5, max_iterations: int = 60, changed_at: int | None = None,
               pad: str = "") -> ExecutableGraph:
    """prep → (model ⇄ tool) → finish. Iteration i: ``model#i`` asks an effect and writes
    ``n = i + 1``; ``tool#i`` goes round again while ``n < stop``. ``changed_at``: in that
    iteration model writes something else (a code change); ``pad`` makes writes bigger."""
    g = Graph("loop", state=S)

    @g.node()
    def prep(s: S) -> dict:
        return {"log": ["prep"]}

    @g.node(after=["prep", "tool"], max_iterations=max_iterations)
    async def model(s: S, ctx: NodeContext) -> dict:
        reply = await ctx.effect("llm", lambda: world.call("llm", s.n, f"r{s.n}"), request={"n": s.n})
        if s.n == changed_at:
            reply = "changed"
        return {"n": s.n + 1, "log": [reply + pad]}

    @g.node(after=["model"], when=lambda s: s.n < stop)
    def tool(s: S) -> dict:
        return {"log": [f"t{s.n}" + pad]}

    @g.node(after=["model"])
    def finish(s: S) -> dict:
        return {"log": ["finish"]}

    return g.compile()


def map_graph(world: World, *, count: int = 5, changed_item: int | None = None,
              reverse: bool = False, fail_once: set[int] | None = None) -> ExecutableGraph:
    """plan → work[i] per item (an effect each) → collect. ``reverse``: the items finish in
    reverse order (each waits for the next one), so completion order is not item order;
    ``fail_once``: those items fail after their effect, the first time."""
    g = Graph("map", state=S)
    done = {i: asyncio.Event() for i in range(count + 1)}
    done[count].set()

    @g.node()
    def plan(s: S) -> dict:
        return {"items": list(range(count))}

    @g.node(after=["plan"], map_over="items")
    async def work(s: S, ctx: NodeContext, item: int) -> dict:
        if reverse:
            await done[item + 1].wait()
        reply = await ctx.effect("svc", lambda: world.call("svc", item, f"w{item}"), request={"item": item})
        if item == changed_item:
            reply = "changed"
        if reverse:
            done[item].set()
        if fail_once and item in fail_once:
            fail_once.discard(item)
            raise PermissionError(f"item {item} refused")
        return {"log": [reply]}

    @g.node(after=["work"])
    def collect(s: S) -> dict:
        return {"n": len(s.log)}

    return g.compile()


def sub_graph(world: World, *, changed: bool = False) -> ExecutableGraph:
    """a → sub (first → inner: an effect) → z."""
    child = Graph("child", state=Sub)

    @child.node()
    def first(s: Sub) -> dict:
        return {"log": ["first"]}

    @child.node(after=["first"])
    async def inner(s: Sub, ctx: NodeContext) -> dict:
        reply = await ctx.effect("sub.svc", lambda: world.call("sub.svc", len(s.log), "sec"),
                                 request={"seen": list(s.log)})
        return {"log": ["other" if changed else reply]}

    g = Graph("parent", state=S)

    @g.node()
    def a(s: S) -> dict:
        return {"log": ["a"]}

    g.subgraph("sub", child, after=["a"])

    @g.node(after=["sub"])
    def z(s: S) -> dict:
        return {"log": ["z"], "n": len(s.log)}

    return g.compile()


def everything_graph(world: World) -> ExecutableGraph:
    """A loop, then a map, then a subgraph, in one run."""
    child = Graph("child", state=Sub)

    @child.node()
    def first(s: Sub) -> dict:
        return {"log": ["first"]}

    @child.node(after=["first"])
    async def inner(s: Sub, ctx: NodeContext) -> dict:
        return {"log": [await ctx.effect("sub.svc", lambda: world.call("sub.svc", 0, "sec"))]}

    g = Graph("everything", state=S)

    @g.node(after=["tool"], max_iterations=10)
    async def model(s: S, ctx: NodeContext) -> dict:
        reply = await ctx.effect("llm", lambda: world.call("llm", s.n, f"r{s.n}"), request={"n": s.n})
        return {"n": s.n + 1, "log": [reply]}

    @g.node(after=["model"], when=lambda s: s.n < 3)
    def tool(s: S) -> dict:
        return {"log": [f"t{s.n}"]}

    @g.node(after=["model"])
    def plan(s: S) -> dict:
        return {"items": list(range(s.n))}

    @g.node(after=["plan"], map_over="items")
    async def work(s: S, ctx: NodeContext, item: int) -> dict:
        return {"log": [await ctx.effect("svc", lambda: world.call("svc", item, f"w{item}"), request={"item": item})]}

    g.subgraph("sub", child, after=["work"])

    @g.node(after=["sub"])
    def finish(s: S) -> dict:
        return {"log": ["finish"]}

    return g.compile()


def loop_of_maps(world: World, *, stop: int = 3, max_iterations: int = 10) -> ExecutableGraph:
    """A map inside a loop: iteration i maps over i + 1 items (``work#i[k]``)."""
    g = Graph("loop-of-maps", state=S)

    @g.node(after=["tool"], max_iterations=max_iterations)
    def model(s: S) -> dict:
        return {"n": s.n + 1, "items": list(range(s.n + 1))}

    @g.node(after=["model"], map_over="items")
    async def work(s: S, ctx: NodeContext, item: int) -> dict:
        reply = await ctx.effect("svc", lambda: world.call("svc", (s.n, item), f"w{s.n}.{item}"),
                                 request={"n": s.n, "item": item})
        return {"log": [reply]}

    @g.node(after=["work"], when=lambda s: s.n < stop)
    def tool(s: S) -> dict:
        return {"log": [f"t{s.n}"]}

    @g.node(after=["work"])
    def finish(s: S) -> dict:
        return {"log": ["finish"]}

    return g.compile()


def sub_with_loop_and_map(world: World, *, changed_at: int | None = None) -> ExecutableGraph:
    """a → sub (a loop, then a map) → z: instances ``sub/model#2``, ``sub/work[1]``."""
    child = Graph("child", state=S)

    @child.node(after=["tool"], max_iterations=10)
    async def model(s: S, ctx: NodeContext) -> dict:
        reply = await ctx.effect("llm", lambda: world.call("llm", s.n, f"r{s.n}"), request={"n": s.n})
        return {"n": s.n + 1, "log": ["changed" if s.n == changed_at else reply]}

    @child.node(after=["model"], when=lambda s: s.n < 3)
    def tool(s: S) -> dict:
        return {"log": [f"t{s.n}"]}

    @child.node(after=["model"])
    def plan(s: S) -> dict:
        return {"items": list(range(s.n))}

    @child.node(after=["plan"], map_over="items")
    async def work(s: S, ctx: NodeContext, item: int) -> dict:
        return {"log": [await ctx.effect("svc", lambda: world.call("svc", item, f"w{item}"), request={"item": item})]}

    g = Graph("outer", state=S)

    @g.node()
    def a(s: S) -> dict:
        return {"log": ["a"]}

    g.subgraph("sub", child, after=["a"])

    @g.node(after=["sub"])
    def z(s: S) -> dict:
        return {"log": ["z"]}

    return g.compile()


# --------------------------------------------------------------------------- helpers


async def final_state(rt: Runtime, run_id: str) -> S:
    return await rt.state_at((await rt.history(run_id))[-1].id)  # type: ignore[return-value]


async def checkpoint_after(rt: Runtime, run_id: str, instance: str) -> str:
    return next(c.id for c in await rt.history(run_id) if instance in c.nodes)


async def attempted(rt: Runtime, run_id: str) -> list[str]:
    return [a.node for a in await rt.attempts(run_id)]


def loop_log(stop: int) -> list[str]:
    """The log of a finished loop run (``loop_graph`` with ``stop``)."""
    log = ["prep"]
    for i in range(stop):
        log.append(f"r{i}")
        if i + 1 < stop:
            log.append(f"t{i + 1}")
    return [*log, "finish"]


# --------------------------------------------------------------------------- forks


async def test_fork_in_the_middle_of_a_loop_continues_it_with_mocked_effects(rt: Runtime):
    world = World()
    run = await rt.start(loop_graph(world), {})
    assert run.status == RunStatus.SUCCEEDED
    assert world.of("llm") == [0, 1, 2, 3, 4]
    recorded = rt.store.journal([run.id])
    base = await checkpoint_after(rt, run.id, "model#2")

    fork = await rt.fork(base, effects="mock")
    assert fork.status == RunStatus.SUCCEEDED and fork.kind == RunKind.FORK
    assert world.of("llm") == [0, 1, 2, 3, 4]             # nothing reached the outside world
    assert rt.store.journal([run.id]) == recorded          # the original's records are untouched
    # the loop goes on from iteration 2's tool, and its instances keep counting
    assert await attempted(rt, fork.id) == ["tool#2", "model#3", "tool#3", "model#4", "finish"]
    served = rt.store.journal([fork.id])
    assert [(e.node, e.status) for e in served] == [("model#3", EffectStatus.MOCKED),
                                                    ("model#4", EffectStatus.MOCKED)]
    by_node = {e.node: e for e in recorded if e.status == EffectStatus.SUCCEEDED}
    assert all(e.source == f"run:{run.id}" and e.key == by_node[e.node].key and e.result == by_node[e.node].result
               for e in served)
    assert await final_state(rt, fork.id) == await final_state(rt, run.id)
    head = (await rt.history(fork.id))[-1].node_states
    assert head["tool#4"] == NodeStatus.SKIPPED and "model#5" not in head
    await assert_instance_trace_consistent(rt, fork.id)


async def test_a_patched_fork_in_a_loop_can_end_it_early(rt: Runtime):
    world = World()
    run = await rt.start(loop_graph(world), {})
    base = await checkpoint_after(rt, run.id, "model#2")
    fork = await rt.fork(base, {"n": 99})
    assert fork.status == RunStatus.SUCCEEDED
    assert await attempted(rt, fork.id) == ["finish"]      # tool#2's when= now says stop
    head = (await rt.history(fork.id))[-1].node_states
    assert head["tool#2"] == NodeStatus.SKIPPED and "model#3" not in head
    assert (await final_state(rt, fork.id)).log == ["prep", "r0", "t1", "r1", "t2", "r2", "finish"]
    assert len(world.calls) == 5


async def test_forks_of_a_loop_that_hit_its_bound(rt: Runtime):
    world = World()
    run = await rt.start(loop_graph(world, stop=10, max_iterations=3), {})
    assert run.status == RunStatus.FAILED and run.error["class"] == "limit_exceeded"
    assert "tool#2" in run.error["message"]
    again = await rt.fork(await checkpoint_after(rt, run.id, "model#1"))
    assert again.status == RunStatus.FAILED and again.error["class"] == "limit_exceeded"
    assert await attempted(rt, again.id) == ["tool#1", "model#2", "tool#2"]
    ended = await rt.fork(await checkpoint_after(rt, run.id, "model#2"), {"n": 10})
    assert ended.status == RunStatus.SUCCEEDED and await attempted(rt, ended.id) == ["finish"]
    assert (await final_state(rt, ended.id)).log == ["prep", "r0", "t1", "r1", "t2", "r2", "finish"]
    assert world.of("llm") == [0, 1, 2]


async def test_the_checkpoint_where_a_loop_hit_its_bound_has_nothing_ready_next(rt: Runtime):
    world = World()
    run = await rt.start(loop_graph(world, stop=10, max_iterations=3), {})
    last = await checkpoint_after(rt, run.id, "tool#2")
    assert (await rt.checkpoint(last)).ready == []      # not `finish`: the loop did not end
    again = await rt.fork(last)
    assert again.error["class"] == "limit_exceeded" and await attempted(rt, again.id) == []
    assert (await rt.checkpoint(await checkpoint_after(rt, run.id, "model#2"))).ready == ["tool#2"]


async def test_fork_inside_a_subgraph_serves_the_inner_effect_from_the_journal(rt: Runtime):
    world = World()
    run = await rt.start(sub_graph(world), {})
    assert run.status == RunStatus.SUCCEEDED and world.of("sub.svc") == [2]
    base = next(c for c in await rt.history(run.id) if "sub/first" in c.nodes)
    assert base.node_states["sub/inner"] == NodeStatus.PENDING

    fork = await rt.fork(base.id, effects="mock")
    assert fork.status == RunStatus.SUCCEEDED
    assert world.of("sub.svc") == [2]                      # served, not called
    assert await attempted(rt, fork.id) == ["sub/inner", "sub", "z"]
    [served] = rt.store.journal([fork.id])
    assert (served.node, served.name, served.status, served.result) == ("sub/inner", "sub.svc",
                                                                         EffectStatus.MOCKED, "sec")
    assert served.source == f"run:{run.id}"
    assert (await final_state(rt, fork.id)).log == ["a", "first", "sec", "z"]
    await assert_instance_trace_consistent(rt, fork.id)


async def test_fork_in_the_middle_of_a_map_runs_only_the_remaining_items(rt: Runtime):
    world = World()
    run = await rt.start(map_graph(world), {}, max_concurrency=1)   # one item per checkpoint
    assert world.of("svc") == [0, 1, 2, 3, 4]
    base = next(c for c in await rt.history(run.id) if "work[1]" in c.nodes)
    assert base.node_states["work"] == NodeStatus.RUNNING
    assert [base.node_states[f"work[{i}]"] for i in range(5)] == [NodeStatus.SUCCEEDED] * 2 + [NodeStatus.PENDING] * 3

    mocked = await rt.fork(base.id)
    assert mocked.status == RunStatus.SUCCEEDED
    assert await attempted(rt, mocked.id) == ["work[2]", "work[3]", "work[4]", "collect"]
    assert [e.node for e in rt.store.journal([mocked.id])] == ["work[2]", "work[3]", "work[4]"]
    assert world.of("svc") == [0, 1, 2, 3, 4]
    assert await final_state(rt, mocked.id) == await final_state(rt, run.id)

    live = await rt.fork(base.id, effects="live")
    assert live.status == RunStatus.SUCCEEDED
    assert world.of("svc") == [0, 1, 2, 3, 4, 2, 3, 4]     # the items done at the base did not run again
    assert (await final_state(rt, live.id)).log == ["w0", "w1", "w2", "w3", "w4"]
    assert (await rt.history(live.id))[-1].node_states["work"] == NodeStatus.SUCCEEDED
    for r in (run, mocked, live):
        await assert_instance_trace_consistent(rt, r.id)


@pytest.mark.parametrize("items, runs, log", [
    ([0, 1], [], ["w0", "w1"]),                                     # fewer items: the rest are gone
    ([0, 1, 2, 3, 4, 5], ["work[2]", "work[3]", "work[4]", "work[5]"], ["w0", "w1", "w2", "w3", "w4", "m"]),
    # a finished item's place is gone, or finished items moved: the map's items run again
    ([0], ["work[0]"], ["w0"]),
    ([1, 0], ["work[0]", "work[1]"], ["m", "m"]),
    ([9, 1], ["work[0]", "work[1]"], ["m", "w1"]),   # its results stay in item order
])
async def test_a_patch_of_a_maps_list_in_the_middle_of_it_decides_the_items_left(rt: Runtime, items, runs, log):
    world = World()
    run = await rt.start(map_graph(world), {}, max_concurrency=1)
    base = await checkpoint_after(rt, run.id, "work[1]")
    fork = await rt.fork(base, {"items": items}, mocks={"svc": "m"})
    assert fork.status == RunStatus.SUCCEEDED, fork.error
    assert await attempted(rt, fork.id) == [*runs, "collect"]
    end = await final_state(rt, fork.id)
    assert end.log == log and end.n == len(log)
    assert {n for n in (await rt.history(fork.id))[-1].node_states if "[" in n} == {f"work[{i}]" for i in range(len(items))}
    assert len(world.calls) == 5
    await assert_instance_trace_consistent(rt, fork.id)


class Loose(BaseModel):
    items: list[Any] = []
    log: Annotated[list[str], append] = []


@pytest.mark.parametrize("first, runs", [(1, ["work[1]"]), (1.0, ["work[1]"]), (True, ["work[0]", "work[1]"])])
async def test_a_patched_item_is_unchanged_only_if_json_equal(rt: Runtime, first, runs):
    """As the diff compares values: ``1.0`` is ``1``, ``True`` is not."""
    g = Graph("loose_map", state=Loose)

    @g.node()
    def plan(s: Loose) -> dict:
        return {"items": [1, 2]}

    @g.node(after=["plan"], map_over="items")
    def work(s: Loose, item: Any) -> dict:
        return {"log": [repr(item)]}

    run = await rt.start(g.compile(), {}, max_concurrency=1)
    base = await checkpoint_after(rt, run.id, "work[0]")
    fork = await rt.fork(base, {"items": [first, 2]})
    assert fork.status == RunStatus.SUCCEEDED, fork.error
    assert await attempted(rt, fork.id) == runs


async def test_editing_items_a_patched_fork_inherited_is_refused_and_writes_nothing(rt: Runtime):
    """A patched fork's input holds the results of the items it inherited: restarting them
    from a fork of that fork would count them twice. Refused, saying where to fork from."""
    world = World()
    run = await rt.start(map_graph(world), {}, max_concurrency=1)
    patched = await rt.fork(await checkpoint_after(rt, run.id, "work[1]"), {"n": 7}, mocks={"svc": "m"})
    before = len(rt.store.list_runs(limit=1000))
    with pytest.raises(InvalidRequest, match="fork from the checkpoint that run branched off"):
        await rt.fork((await rt.history(patched.id))[1].id, {"items": [5, 1, 2]})
    assert len(rt.store.list_runs(limit=1000)) == before


async def test_a_continuation_reruns_the_failed_items_and_its_history_reads_whole(rt: Runtime):
    world = World()
    run = await rt.start(map_graph(world, fail_once={1, 3}), {})
    assert run.status == RunStatus.FAILED
    head = (await rt.history(run.id))[-1].node_states
    done = {n for n, st in head.items() if "[" in n and st == NodeStatus.SUCCEEDED}
    assert head["work[1]"] == head["work[3]"] == NodeStatus.FAILED and done <= {"work[0]", "work[2]", "work[4]"}
    cont = await rt.resume(run.id)
    assert cont.status == RunStatus.SUCCEEDED
    again = sorted({"work[0]", "work[1]", "work[2]", "work[3]", "work[4]"} - done)
    assert sorted(await attempted(rt, cont.id)) == sorted([*again, "collect"])
    assert sorted(world.of("svc")) == [0, 1, 2, 3, 4]           # the failed items' effects were not repeated
    assert (await final_state(rt, cont.id)).log == ["w0", "w1", "w2", "w3", "w4"]
    await assert_instance_trace_consistent(rt, cont.id)
    report = await rt.replay(cont.id)                             # a continued run is replayed whole
    assert report.same and report.status == "succeeded"
    assert [n.node for n in report.nodes] == ["plan", "work", *[f"work[{i}]" for i in range(5)], "collect"]
    assert len(world.calls) == 5


async def test_fork_in_the_middle_of_a_map_inside_a_loop(rt: Runtime):
    world = World()
    run = await rt.start(loop_of_maps(world), {}, max_concurrency=1)
    assert run.status == RunStatus.SUCCEEDED
    assert world.of("svc") == [(1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2)]
    final = await final_state(rt, run.id)

    mocked = await rt.fork(await checkpoint_after(rt, run.id, "work#2[0]"))
    assert await attempted(rt, mocked.id) == ["work#2[1]", "work#2[2]", "finish"]
    assert len(world.calls) == 6
    assert await final_state(rt, mocked.id) == final

    live = await rt.fork(await checkpoint_after(rt, run.id, "work#1[0]"), effects="live")
    assert await attempted(rt, live.id) == ["work#1[1]", "tool#1", "model#2", "work#2[0]", "work#2[1]",
                                            "work#2[2]", "finish"]
    assert world.calls[6:] == [("svc", (2, 1)), ("svc", (3, 0)), ("svc", (3, 1)), ("svc", (3, 2))]
    assert await final_state(rt, live.id) == final
    for r in (run, mocked, live):
        await assert_instance_trace_consistent(rt, r.id)


async def test_fork_inside_a_loop_inside_a_subgraph(rt: Runtime):
    world = World()
    run = await rt.start(sub_with_loop_and_map(world), {}, max_concurrency=1)
    assert run.status == RunStatus.SUCCEEDED and len(world.calls) == 6
    fork = await rt.fork(await checkpoint_after(rt, run.id, "sub/model#1"))
    assert await attempted(rt, fork.id) == ["sub/tool#1", "sub/model#2", "sub/plan", "sub/work[0]", "sub/work[1]",
                                            "sub/work[2]", "sub", "z"]
    assert len(world.calls) == 6
    assert [e.node for e in rt.store.journal([fork.id])] == ["sub/model#2", "sub/work[0]", "sub/work[1]",
                                                             "sub/work[2]"]
    assert (await final_state(rt, fork.id)).log == ["a", "r0", "t1", "r1", "t2", "r2", "w0", "w1", "w2", "z"]
    await assert_instance_trace_consistent(rt, fork.id)


async def test_a_checkpoint_in_a_loop_or_map_shows_the_instances_ready_next(rt: Runtime):
    world = World()
    run = await rt.start(loop_graph(world), {})
    view = await rt.checkpoint(await checkpoint_after(rt, run.id, "model#2"))
    assert view.ready == ["tool#2"] and [w.node for w in view.pending_writes] == ["tool#2"]
    assert (await rt.checkpoint(await checkpoint_after(rt, run.id, "tool#2"))).ready == ["model#3"]
    # the last iteration: tool#4's when= is false there, so it is skipped and the loop ends
    assert (await rt.checkpoint(await checkpoint_after(rt, run.id, "model#4"))).ready == ["finish"]
    maps = await rt.start(map_graph(world), {}, max_concurrency=1)
    view = await rt.checkpoint(await checkpoint_after(rt, maps.id, "work[1]"))
    assert view.ready == ["work[2]", "work[3]", "work[4]"]
    assert view.state["log"] == ["w0", "w1"]
    # items in flight when a checkpoint was taken have no outcome in it: a branch runs them next
    # (four items, each waiting for the next: all four in flight at once, within the Runtime's 4 slots)
    wide = await rt.start(map_graph(world, count=4, reverse=True), {}, max_concurrency=4)
    mid = next(c for c in await rt.history(wide.id) if "work[3]" in c.nodes)
    assert [mid.node_states[f"work[{i}]"] for i in range(4)] == [NodeStatus.RUNNING] * 3 + [NodeStatus.SUCCEEDED]
    assert (await rt.checkpoint(mid.id)).ready == ["work[0]", "work[1]", "work[2]"]


# --------------------------------------------------------------------------- replays


def verdicts(report: Any) -> dict[str, str]:
    return {n.node: str(n.verdict) for n in report.nodes}


async def test_replay_of_a_loop_run_reports_every_iteration(rt: Runtime):
    world = World()
    run = await rt.start(loop_graph(world), {})
    replay = await rt.replay(run.id)
    report = await rt.replay_report(replay.run_id)
    assert report == replay
    instances = ["prep", "model", "tool", *[f"{n}#{i}" for i in range(1, 5) for n in ("model", "tool")], "finish"]
    assert [n.node for n in report.nodes] == instances
    assert set(verdicts(report).values()) == {"same"} and report.same
    assert report.node("tool#4").replay_status == "skipped"
    assert len(world.calls) == 5                           # the replay's effects were all served

    changed = await rt.replay(run.id, graph=loop_graph(world, changed_at=2))
    assert changed.status == "succeeded" and not changed.same
    assert [n.node for n in changed.differences()] == ["model#2"]
    [change] = changed.node("model#2").write_changes
    assert (change.dotted(), change.old, change.new) == ("log[0]", "r2", "changed")
    assert len(world.calls) == 5


async def test_replay_of_a_map_run_reports_every_item(rt: Runtime):
    world = World()
    run = await rt.start(map_graph(world), {})
    report = await rt.replay_report((await rt.replay(run.id)).run_id)
    assert [n.node for n in report.nodes] == ["plan", "work", *[f"work[{i}]" for i in range(5)], "collect"]
    assert set(verdicts(report).values()) == {"same"}

    changed = await rt.replay(run.id, graph=map_graph(world, changed_item=3))
    assert [n.node for n in changed.differences()] == ["work[3]"]
    assert changed.node("work[3]").verdict == "different"
    assert len(world.calls) == 5


async def test_replay_of_a_subgraph_run_reports_its_inner_nodes(rt: Runtime):
    world = World()
    run = await rt.start(sub_graph(world), {})
    report = await rt.replay_report((await rt.replay(run.id)).run_id)
    assert [n.node for n in report.nodes] == ["a", "sub/first", "sub/inner", "sub", "z"]
    assert set(verdicts(report).values()) == {"same"}

    changed = await rt.replay(run.id, graph=sub_graph(world, changed=True))
    assert [n.node for n in changed.differences()] == ["sub/inner"]
    assert [c.new for c in changed.node("sub/inner").write_changes] == ["other"]
    assert len(world.calls) == 1


async def test_replay_from_a_checkpoint_in_a_loop_inherits_the_iterations_before_it(rt: Runtime):
    world = World()
    run = await rt.start(loop_graph(world), {})
    report = await rt.replay(await checkpoint_after(rt, run.id, "model#2"))
    got = verdicts(report)
    assert {n for n, v in got.items() if v == "inherited"} == {"prep", "model", "tool", "model#1", "tool#1",
                                                               "model#2"}
    assert {n for n, v in got.items() if v != "inherited"} == {"tool#2", "model#3", "tool#3", "model#4",
                                                               "tool#4", "finish"}
    assert report.same and len(world.calls) == 5


async def test_replay_with_a_loop_that_now_ends_sooner_reports_the_iterations_not_run(rt: Runtime):
    world = World()
    run = await rt.start(loop_graph(world), {})
    report = await rt.replay(run.id, graph=loop_graph(world, stop=3))
    got = verdicts(report)
    assert got["tool#2"] == "different"                    # skipped now: the loop ends here
    assert {got[n] for n in ("model#3", "tool#3", "model#4", "tool#4")} == {"not run"}
    assert got["model#2"] == "same"


@pytest.mark.parametrize("ref", [None, "agent2_not_importable:graph"])
@pytest.mark.parametrize(("recorded", "replayed", "differences"), [
    (lambda w: loop_graph(w), lambda w: loop_graph(w, changed_at=2, max_iterations=30), ["model#2"]),
    (lambda w: loop_of_maps(w), lambda w: loop_of_maps(w, max_iterations=9), []),
], ids=["loop", "loop-of-maps"])
async def test_a_replays_report_reads_where_its_graph_cannot_be_imported(
        store: CheckpointStore, ref: str | None, recorded: Any, replayed: Any, differences: list[str]):
    # a report is a view of recorded data: a process that has only the recorded graph's code
    # (the replay's code, another version, is not registered there nor importable) reads it too
    world = World()
    rt = Runtime(store)
    try:
        run = await rt.start(recorded(world), {})
        given = replayed(world)
        given.ref = ref   # the replay names its code by this reference, or by nothing at all
        report = await rt.replay(run.id, graph=given)
    finally:
        rt.close()
    assert report.graph_version != report.recorded_graph_version
    assert [n.node for n in report.differences()] == differences
    other = Runtime(store, graphs=[recorded(world)])
    try:
        with pytest.raises((NotFound, InvalidRequest)):
            other.graph_for(await other.get_run(report.run_id))
        again = await other.replay_report(report.run_id)
    finally:
        other.close()
    assert again == report and again.to_json() == report.to_json()
    assert [n.node for n in again.nodes] == [n.node for n in report.nodes]   # canonical instance order


class Longest(BaseModel):
    """A state with a custom reducer: only its code can fold it."""

    best: Annotated[str, Reducer("longest", lambda old, new: max(str(old or ""), str(new), key=len))] = ""


def test_a_stored_description_orders_instances_as_the_code_does_custom_reducers_or_not():
    world = World()
    custom = Graph("longest", state=Longest)

    @custom.node(after=["again"], max_iterations=3)
    def guess(s: Longest) -> dict:
        return {"best": "x" * (len(s.best) + 1)}

    @custom.node(after=["guess"], when=lambda s: len(s.best) < 2)
    def again(s: Longest) -> dict:
        return {}

    graphs = [loop_graph(world), map_graph(world), loop_of_maps(world), sub_with_loop_and_map(world),
              everything_graph(world), custom.compile()]
    rng = random.Random(7)
    for graph in graphs:
        desc = json.loads(json.dumps(graph.describe()))   # as a store gives it back
        nodes = NodeOrder.from_description(desc)
        assert nodes is not None and set(nodes.index) == set(graph.nodes)
        names = [f"{n}{it}{item}" for n in graph.order for it in ("", "#1", "#2", "#1.2")
                 for item in ("", "[0]", "[3]")]
        rng.shuffle(names)
        assert nodes.canonical(names) == graph.canonical(names), graph.name
    assert FoldShape.from_description(custom.compile().describe()) is None   # yet its order is known


# --------------------------------------------------------------------------- diffs


async def test_diff_between_checkpoints_of_a_loop_names_the_fields_its_instances_wrote(rt: Runtime):
    world = World()
    run = await rt.start(loop_graph(world), {})
    a = await checkpoint_after(rt, run.id, "model#1")
    b = await checkpoint_after(rt, run.id, "model#3")
    changes = {c.dotted(): (c.op, c.old, c.new) for c in await rt.diff(a, b)}
    # after model#1: log = prep r0 t1 r1 (n=2); after model#3: + t2 r2 t3 r3 (n=4)
    assert changes == {"n": ("changed", 2, 4), "log[4]": ("added", None, "t2"), "log[5]": ("added", None, "r2"),
                       "log[6]": ("added", None, "t3"), "log[7]": ("added", None, "r3")}


async def test_diff_between_a_loop_checkpoint_and_its_fork(rt: Runtime):
    world = World()
    run = await rt.start(loop_graph(world), {})
    base = await checkpoint_after(rt, run.id, "model#2")
    fork = await rt.fork(base, {"n": 4})
    # model#3 now asks with n=4, which the journal has no record of: the fork asks, naming the instance
    assert fork.status == RunStatus.INTERRUPTED
    [question] = await rt.interrupts(fork.id)
    assert question.node == "model#3"
    assert (question.payload["value"]["request"], question.payload["value"]["recorded_request"]) == ({"n": 4},
                                                                                                     {"n": 3})
    fork = await rt.resume(fork.id, {"action": "mock", "result": "r4-mock"})
    assert fork.status == RunStatus.SUCCEEDED and len(world.calls) == 5
    end = (await rt.history(fork.id))[-1]
    assert end.node_states["tool#3"] == NodeStatus.SKIPPED and "model#4" not in end.node_states
    changes = {c.dotted(): (c.op, c.old, c.new) for c in await rt.diff(base, end.id)}
    # base: prep r0 t1 r1 t2 r2 (n=3); the fork: n patched to 4, then tool#2, model#3, finish
    assert changes == {"n": ("changed", 3, 5), "log[6]": ("added", None, "t4"),
                       "log[7]": ("added", None, "r4-mock"), "log[8]": ("added", None, "finish")}
    original = (await rt.history(run.id))[-1].id
    changes = {c.dotted(): (c.old, c.new) for c in await rt.diff(original, end.id)}
    assert changes == {"log[6]": ("t3", "t4"), "log[7]": ("r3", "r4-mock"), "log[8]": ("t4", "finish"),
                       "log[9]": ("r4", None), "log[10]": ("finish", None)}


# --------------------------------------------------------------------------- export / import


def records(store: CheckpointStore, run_id: str) -> dict[str, Any]:
    """A run's records; the run as exported (an import adds its mark, ``options.imported``)."""
    run = store.get_run(run_id)
    run = run.evolve(options={k: v for k, v in run.options.items() if k != "imported"})
    return {"run": run, "checkpoints": store.checkpoints(run_id),
            "writes": store.pending_writes(run_id), "attempts": store.node_attempts(run_id),
            "journal": store.journal([run_id]), "interrupts": store.interrupts(run_id),
            "events": store.events(run_id)}


#: an instance name each graph's runs record (a loop iteration, a map item, a subgraph node)
MARK = {loop_graph: "model#3", map_graph: "work[4]", sub_graph: "sub/inner", everything_graph: "sub/inner",
        loop_of_maps: "work#2[2]", sub_with_loop_and_map: "sub/work[2]"}


@pytest.mark.parametrize("make", list(MARK), ids=[f.__name__ for f in MARK])
async def test_export_and_import_keep_instance_histories(rt: Runtime, other_store: CheckpointStore, make):
    world = World()
    graph = make(world)
    run = await rt.start(graph, {})
    assert run.status == RunStatus.SUCCEEDED
    cps = await rt.history(run.id)
    fork = await rt.fork(cps[len(cps) // 2].id)               # branches from the middle
    replay = await rt.replay(cps[len(cps) // 3].id)
    assert fork.status == RunStatus.SUCCEEDED and replay.same
    doc = json.loads(json.dumps(await rt.export_thread(run.id)))
    other = Runtime(other_store)
    try:
        imported = await other.import_thread(doc)
        assert {r.id for r in imported} == {run.id, fork.id, replay.run_id} and imported[0].id == run.id
        for rid in (run.id, fork.id, replay.run_id):
            assert records(other.store, rid) == records(rt.store, rid)
            history = await other.history(rid)
            assert history == await rt.history(rid)
            assert [dict(c.node_states) for c in history] == [dict(c.node_states) for c in await rt.history(rid)]
            assert MARK[make] in history[-1].node_states
            for c in history:
                assert (await other.state_at(c.id)).model_dump() == (await rt.state_at(c.id)).model_dump()
            await assert_instance_trace_consistent(other, rid)
        calls = len(world.calls)
        other.register(graph)
        again = await other.replay(run.id)
        assert again.same and len(world.calls) == calls
        assert [n.node for n in again.nodes] == [n.node for n in replay.nodes]
    finally:
        other.close()


async def test_an_imported_run_replays_with_the_graph_given_to_the_replay(rt: Runtime, other_store: CheckpointStore):
    # the importing Runtime never registered the graph: the replay's own code must serve its report too
    world = World()
    graph = everything_graph(world)
    run = await rt.start(graph, {})
    doc = json.loads(json.dumps(await rt.export_thread(run.id)))
    other = Runtime(other_store)
    try:
        await other.import_thread(doc)
        calls = len(world.calls)
        report = await other.replay(run.id, graph=graph)
        assert report.same and report.status == "succeeded" and len(world.calls) == calls
        assert "work[2]" in [n.node for n in report.nodes] and "sub/inner" in [n.node for n in report.nodes]
        assert (await other.replay_report(report.run_id)).same
    finally:
        other.close()


async def test_a_failed_fork_of_an_imported_run_continues_with_the_graph_it_was_given(rt: Runtime,
                                                                                      other_store: CheckpointStore):
    world = World()
    run = await rt.start(map_graph(world), {})
    doc = json.loads(json.dumps(await rt.export_thread(run.id)))
    other = Runtime(other_store)
    try:
        await other.import_thread(doc)
        fork = await other.fork(await checkpoint_after(other, run.id, "plan"), graph=map_graph(world, fail_once={2}))
        assert fork.status == RunStatus.FAILED and fork.error and fork.error["node"] == "work[2]"
        # its checkpoints are read with that code too: what a continuation starts first, the state's own model
        head = (await other.history(fork.id))[-1]
        ready = (await other.checkpoint(head.id)).ready
        assert "work[2]" in ready and set(ready) < {"work[0]", "work[1]", "work[2]", "work[3]", "work[4]"}
        assert type(await other.state_at(head.id)) is S
        calls = len(world.calls)
        cont = await other.resume(fork.id)     # the code given to the fork, not a registered version
        assert cont.kind == RunKind.CONTINUATION and cont.status == RunStatus.SUCCEEDED
        redone = await attempted(other, cont.id)
        assert redone[:len(ready)] == ready
        assert "work[2]" in redone and redone[-1] == "collect" and len(world.calls) == calls
        assert (await final_state(other, cont.id)).log == ["w0", "w1", "w2", "w3", "w4"]
    finally:
        other.close()


# --------------------------------------------------------------------------- state at every checkpoint


def fold_expected(node_states: Mapping[str, NodeStatus], order: Iterable[str],
                  writes: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The state the succeeded instances' writes make, folded in ``order``
    (``n`` keeps the last value, ``log`` and ``items`` as the model says)."""
    state: dict[str, Any] = {"n": 0, "log": [], "items": []}
    for name in order:
        if node_states.get(name) != NodeStatus.SUCCEEDED:
            continue
        for k, v in writes[name].items():
            state[k] = state[k] + v if k == "log" else v
    return state


async def test_state_at_every_checkpoint_of_a_long_loop_is_the_canonical_fold(rt: Runtime):
    world = World()
    stop, pad = 40, "." * 300    # big writes: snapshots now and then, deltas between
    run = await rt.start(loop_graph(world, stop=stop, pad=pad), {})
    assert run.status == RunStatus.SUCCEEDED
    order, writes = ["prep"], {"prep": {"log": ["prep"]}, "finish": {"log": ["finish"]}}
    for i in range(stop):
        model, tool = (f"model#{i}", f"tool#{i}") if i else ("model", "tool")
        order += [model, tool]
        writes[model] = {"n": i + 1, "log": [f"r{i}{pad}"]}
        writes[tool] = {"log": [f"t{i + 1}{pad}"]}
    order.append("finish")
    history = await rt.history(run.id)
    assert len(history) > 2 * stop
    middle = history[1:-1]
    assert any(c.snapshot is not None for c in middle) and sum(c.snapshot is None for c in middle) > stop
    for c in history:
        assert (await rt.state_at(c.id)).model_dump() == fold_expected(c.node_states, order, writes), c.seq
    assert (await final_state(rt, run.id)).log == [x if x in ("prep", "finish") else x + pad for x in loop_log(stop)]
    await assert_instance_trace_consistent(rt, run.id)


async def test_state_at_every_checkpoint_of_a_map_folds_items_in_item_order(rt: Runtime):
    world = World()
    # every item at once (the Runtime runs 4 attempts at a time), the last one finishing first
    run = await rt.start(map_graph(world, count=4, reverse=True), {})
    assert world.of("svc") == [3, 2, 1, 0]
    order = ["plan", "work", *[f"work[{i}]" for i in range(4)], "collect"]
    writes = {"plan": {"items": [0, 1, 2, 3]}, "work": {}, "collect": {"n": 4},
              **{f"work[{i}]": {"log": [f"w{i}"]} for i in range(4)}}
    seen = set()
    for c in await rt.history(run.id):
        expected = fold_expected(c.node_states, order, writes)
        assert (await rt.state_at(c.id)).model_dump() == expected, c.seq
        seen.add(tuple(expected["log"]))
    assert ("w2", "w3") in seen                            # a state where only the last items had finished
    assert ("w0", "w1", "w2", "w3") in seen


async def test_replay_from_inside_a_loop_with_code_that_adds_a_member_to_the_loop(rt: Runtime):
    """The iterations the replay inherits get the new member too, and the loop goes on."""
    def counting(with_alt: bool) -> Graph:
        g = Graph("grow", S)

        @g.node(after=["tool", "alt"] if with_alt else ["tool"], max_iterations=5)
        def model(s: S) -> dict:
            return {"n": s.n + 1, "log": [f"m{s.n + 1}"]}

        @g.node(after=["model"], when=lambda s: s.n < 3)
        def tool(s: S) -> dict:
            return {"log": ["t"]}

        if with_alt:
            @g.node(after=["model"], when=lambda s: False)
            def alt(s: S) -> dict:
                return {"log": ["alt"]}

        @g.node(after=["model"])
        def finish(s: S) -> dict:
            return {"log": ["fin"]}

        return g

    run = await rt.start(counting(False), {})
    report = await rt.replay(await checkpoint_after(rt, run.id, "tool#1"), graph=counting(True))
    replay = await rt.get_run(report.run_id)
    assert replay.status == RunStatus.SUCCEEDED, replay.error
    final = (await rt.history(replay.id))[-1]
    assert final.node_states["alt#1"] == NodeStatus.SKIPPED and final.node_states["model#2"] == NodeStatus.SUCCEEDED
    assert (await final_state(rt, replay.id)).log == (await final_state(rt, run.id)).log


async def test_replay_of_code_that_no_longer_maps_a_node_is_refused_from_a_checkpoint_with_its_items(rt: Runtime):
    """The recorded items (``work[0]``) have no place in a graph that runs ``work`` once:
    refused, naming them, before anything is written (it crashed, leaving the replay running)."""
    def once() -> Graph:
        g = Graph("map", state=S)

        @g.node()
        def plan(s: S) -> dict:
            return {"items": [0, 1, 2]}

        @g.node(after=["plan"])
        def work(s: S) -> dict:
            return {"log": [f"w{i}" for i in s.items]}

        @g.node(after=["work"])
        def collect(s: S) -> dict:
            return {"n": len(s.log)}

        return g

    run = await rt.start(map_graph(World(), count=3), {})
    before = await rt.runs()
    for item in ("work[0]", "collect"):
        with pytest.raises(InvalidRequest, match=r"runs 'work' once.*recorded item 'work\[0\]'"):
            await rt.replay(await checkpoint_after(rt, run.id, item), graph=once())
    assert await rt.runs() == before
    # from before the map ran, the new code replays
    report = await rt.replay(await checkpoint_after(rt, run.id, "plan"), graph=once())
    assert report.status == "succeeded" and report.node("work").verdict == "different"
