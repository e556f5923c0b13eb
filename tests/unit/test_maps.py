"""Maps (dynamic fan-out), on every store: one instance per item of a list a node
wrote, bounded by ``max_concurrency``, gathered in item order, none dropped; a failed
item is retried alone, and resuming a failed run re-runs only the failed items."""

from __future__ import annotations

import asyncio
import random
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from runtime import (
    ErrorClass,
    Graph,
    GraphError,
    MemoryStore,
    NodeStatus,
    RetryPolicy,
    RunStatus,
    Runtime,
    TransientError,
    append,
)


class S(BaseModel):
    count: int = 0
    items: list[int] = []
    results: Annotated[list[int], append] = []
    total: int = 0


def mapreduce(work_fn: Any, retry: RetryPolicy | None = None) -> Graph:
    g = Graph("mapreduce", S)

    @g.node()
    def plan(s: S) -> dict[str, Any]:
        return {"items": list(range(s.count))}

    g.add_node("work", work_fn, after=["plan"], map_over="items", retry=retry)

    @g.node(after=["work"])
    def reduce(s: S) -> dict[str, Any]:
        return {"total": sum(s.results)}

    return g


async def test_eleven_items_with_eight_slots_give_eleven_results_in_item_order(rt: Runtime) -> None:
    running = {"now": 0, "peak": 0}

    async def work(s: S, item: int) -> dict[str, Any]:
        running["now"] += 1
        running["peak"] = max(running["peak"], running["now"])
        await asyncio.sleep(0.002 * ((item * 7) % 5))   # finish out of order
        running["now"] -= 1
        return {"results": [item * 10]}

    run = await rt.start(mapreduce(work), {"count": 11}, max_concurrency=8)
    assert run.status == RunStatus.SUCCEEDED
    final = (await rt.history(run.id))[-1]
    state = await rt.state_at(final.id)
    assert state.results == [i * 10 for i in range(11)]
    assert state.total == 550
    assert running["peak"] <= min(8, rt.max_concurrency)
    items = [n for n in final.node_states if n.startswith("work[")]
    assert items == [f"work[{i}]" for i in range(11)]
    assert all(final.node_states[n] == NodeStatus.SUCCEEDED for n in items)
    assert final.node_states["work"] == NodeStatus.SUCCEEDED


async def test_an_empty_list_runs_the_reduce_with_nothing_gathered(rt: Runtime) -> None:
    def work(s: S, item: int) -> dict[str, Any]:
        raise AssertionError("no item to run")

    run = await rt.start(mapreduce(work), {"count": 0})
    assert run.status == RunStatus.SUCCEEDED
    final = (await rt.history(run.id))[-1]
    assert final.node_states["reduce"] == NodeStatus.SUCCEEDED
    assert (await rt.state_at(final.id)).total == 0


async def test_resume_re_runs_only_the_failed_items(rt: Runtime) -> None:
    calls: dict[int, int] = {}
    broken = {3, 7}

    def work(s: S, ctx: Any, item: int) -> dict[str, Any]:
        calls[item] = calls.get(item, 0) + 1
        ctx.effect("charge", lambda: item, request={"item": item})
        if item in broken:
            raise ValueError(f"item {item} is broken")
        return {"results": [item]}

    run = await rt.start(mapreduce(work), {"count": 10}, max_concurrency=3)
    assert run.status == RunStatus.FAILED
    assert run.error is not None and "is broken" in str(run.error["message"])
    broken.clear()
    before = dict(calls)
    cont = await rt.resume(run.id)
    assert cont.status == RunStatus.SUCCEEDED
    rerun = {i: calls[i] - before.get(i, 0) for i in calls if calls[i] != before.get(i, 0)}
    # a failure stops the run: items not started yet run in the continuation, once
    assert 3 in rerun and set(rerun) <= set(range(10)) - {i for i, n in before.items() if i not in (3, 7)}
    assert all(n == 1 for n in rerun.values())
    state = await rt.state_at((await rt.history(cont.id))[-1].id)
    assert state.results == list(range(10))


async def test_a_map_over_something_that_is_not_a_list_fails_clearly(rt: Runtime) -> None:
    g = Graph("bad_map")

    @g.node()
    def plan(s: Any) -> dict[str, Any]:
        return {"things": {"a": 1}}

    @g.node(after=["plan"], map_over="things")
    def work(s: Any, item: Any) -> None:
        return None

    run = await rt.start(g, {})
    assert run.status == RunStatus.FAILED
    assert run.error is not None and "'things', which must be a list" in str(run.error["message"])


@pytest.mark.parametrize("fn, field, problem", [
    (lambda s, item: None, "nope", "'nope' is not a field of S"),
    (lambda s, item: None, "count", "field 'count' is typed int; a map runs over a list"),   # typed: caught here
    # the item's parameter under another name: the error says what it is called
    (lambda s, doc: None, "items",
     "missing required argument 'doc' (a map's worker is given its item as a parameter named 'item')"),
])
def test_a_bad_map_is_refused_saying_why(fn: Any, field: str, problem: str) -> None:
    g = Graph("bad", S)
    g.add_node("work", fn, map_over=field)
    with pytest.raises(GraphError) as e:
        g.compile()
    assert problem in str(e.value)


def test_a_worker_must_take_its_item() -> None:
    """A worker that cannot be given its item would run once per item without knowing which."""
    g = Graph("item", S)
    g.add_node("work", lambda s: None, map_over="items")
    with pytest.raises(GraphError) as e:
        g.compile()
    assert "node 'work'" in str(e.value) and "takes no parameter named 'item'" in str(e.value)
    g = Graph("any", S)
    g.add_node("work", lambda s, **kw: kw["item"], map_over="items")   # **kw is given it too
    assert g.compile().nodes["work"].wants_item is True
    g = Graph("no_item", S)
    g.add_node("work", lambda s, item: None)   # not a map: `item` is an argument it must be given
    with pytest.raises(GraphError) as e:
        g.compile()
    assert "missing required argument 'item'" in str(e.value)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(count=st.integers(0, 14), seed=st.integers(0, 2**16), slots=st.integers(1, 6),
       failing=st.sets(st.integers(0, 13), max_size=5))
async def test_any_completion_order_and_failures_give_the_same_final_state(
        count: int, seed: int, slots: int, failing: set[int]) -> None:
    """Random completion orders, random transient failures (retried), random slot counts:
    the gathered list is always every item, once, in item order."""
    rng = random.Random(seed)
    delays = [rng.random() * 0.003 for _ in range(count)]
    attempts: dict[int, int] = {}

    async def work(s: S, item: int) -> dict[str, Any]:
        attempts[item] = attempts.get(item, 0) + 1
        await asyncio.sleep(delays[item])
        if item in failing and attempts[item] == 1:
            raise TransientError(f"item {item} hiccup")
        return {"results": [item * item]}

    rt = Runtime(store=MemoryStore(), max_concurrency=slots)
    try:
        graph = mapreduce(work, retry=RetryPolicy(max_attempts=2, initial_interval=0.0, backoff=1.0))
        run = await rt.start(graph, {"count": count})
        assert run.status == RunStatus.SUCCEEDED, run.error
        state = await rt.state_at((await rt.history(run.id))[-1].id)
        assert state.results == [i * i for i in range(count)]
        assert state.total == sum(i * i for i in range(count))
        assert all(attempts[i] == (2 if i in failing else 1) for i in range(count))
    finally:
        rt.close()


async def test_items_share_the_runtime_bound_with_other_runs() -> None:
    running = {"now": 0, "peak": 0}

    async def work(s: S, item: int) -> dict[str, Any]:
        running["now"] += 1
        running["peak"] = max(running["peak"], running["now"])
        await asyncio.sleep(0.003)
        running["now"] -= 1
        return {"results": [item]}

    rt = Runtime(store=MemoryStore(), max_concurrency=3)
    try:
        runs = await asyncio.gather(*(rt.start(mapreduce(work), {"count": 6}) for _ in range(3)))
        assert all(r.status == RunStatus.SUCCEEDED for r in runs)
        assert running["peak"] <= 3
    finally:
        rt.close()


async def test_a_failed_item_fails_the_map_and_names_itself(rt: Runtime) -> None:
    def work(s: S, item: int) -> dict[str, Any]:
        if item == 2:
            raise ValueError("bad item")
        return {"results": [item]}

    run = await rt.start(mapreduce(work), {"count": 3}, max_concurrency=1)
    assert run.status == RunStatus.FAILED
    assert run.error is not None and run.error.get("node") == "work[2]"
    final = (await rt.history(run.id))[-1].node_states
    assert final["work[2]"] == NodeStatus.FAILED and final["reduce"] == NodeStatus.PENDING


class Agent(BaseModel):
    turn: int = 0
    calls: list[str] = []
    log: Annotated[list[str], append] = []


async def test_a_map_inside_a_loop_runs_parallel_tool_calls_per_iteration(rt: Runtime) -> None:
    """The agent's model asks for several tools at once; each call is an item of the
    map in that iteration (``tools#1[0]``), and the next iteration sees all results."""
    g = Graph("parallel_tools", Agent)
    effects: list[str] = []

    @g.node(after=["tools"], max_iterations=5)
    def model(s: Agent) -> dict[str, Any]:
        n = s.turn + 1
        calls = [f"t{n}.{i}" for i in range(n)] if n < 3 else []
        return {"turn": n, "calls": calls, "log": [f"model {n} saw {len(s.log)}"]}

    @g.node(after=["model"], map_over="calls", when=lambda s: bool(s.calls))
    def tools(s: Agent, ctx: Any, item: str) -> dict[str, Any]:
        ctx.effect("tool", lambda: effects.append(ctx.node), request={"call": item})
        return {"log": [f"result {item}"]}

    run = await rt.start(g, {}, max_concurrency=2)
    assert run.status == RunStatus.SUCCEEDED
    final = (await rt.history(run.id))[-1]
    assert sorted(effects) == ["tools#1[0]", "tools#1[1]", "tools[0]"]
    assert final.node_states["tools#2"] == NodeStatus.SKIPPED
    state = await rt.state_at(final.id)
    assert state.log == ["model 1 saw 0", "result t1.0", "model 2 saw 2", "result t2.0", "result t2.1",
                         "model 3 saw 5"]


async def test_what_follows_a_map_inside_a_loop_sees_every_item_so_far(rt: Runtime) -> None:
    """plan → work (a map) → join ⇢ plan: each iteration's join is created with the
    iteration, before its map has items; it sees the results of its own iteration's
    items and of every earlier one's."""
    class Rounds(BaseModel):
        items: list[int] = []
        results: Annotated[list[int], append] = []
        log: Annotated[list[str], append] = []

    g = Graph("map_then_join", Rounds)

    @g.node(after=["join"], max_iterations=5)
    def plan(s: Rounds) -> dict[str, Any]:
        return {"items": [len(s.log), 10], "log": ["plan"]}

    @g.node(after=["plan"], map_over="items")
    def work(s: Rounds, item: int) -> dict[str, Any]:
        return {"results": [item]}

    @g.node(after=["work"], when=lambda s: len(s.results) < 6)
    def join(s: Rounds) -> dict[str, Any]:
        return {"log": [f"join saw {len(s.results)}"]}

    run = await rt.start(g, {})
    assert run.status == RunStatus.SUCCEEDED, run.error
    state = await rt.state_at((await rt.history(run.id))[-1].id)
    assert state.log == ["plan", "join saw 2", "plan", "join saw 4", "plan"]
    assert state.results == [0, 10, 2, 10, 4, 10]


async def test_a_map_left_unfinished_by_a_failure_ends_with_the_run(rt: Runtime) -> None:
    def work(s: S, item: int) -> dict[str, Any]:
        raise PermissionError("no")

    run = await rt.start(mapreduce(work), {"count": 2}, max_concurrency=1)
    assert run.status == RunStatus.FAILED
    final = (await rt.history(run.id))[-1].node_states
    assert final["work"] == NodeStatus.FAILED and final["work[1]"] == NodeStatus.PENDING
