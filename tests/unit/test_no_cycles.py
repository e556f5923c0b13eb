"""A run's own structures are freed as soon as it returns, by reference counting alone.

A reference cycle among them (a callback bound to its owner, a traceback holding the
frame that caught it) keeps everything a run built alive until Python's cyclic
collector finds it. Those objects then pile up in the oldest generation, and each full
collection walks the whole process heap: with a host application's heap of 150,000
objects that cost about 2 ms per run on the agent benchmarks. So every finished run must
leave no cyclic garbage behind, whatever its shape and however it ended.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from runtime import Graph, RetryPolicy, Run, RunStatus, Runtime, TransientError, append


class S(BaseModel):
    messages: Annotated[list[str], append] = []
    items: list[int] = []
    results: Annotated[list[int], append] = []
    total: int = 0
    turns: int = 0


@pytest.fixture
def garbage() -> Iterator[Callable[[], list[str]]]:
    """What a call of the returned function finds the cyclic collector would free, by type
    name (``DEBUG_SAVEALL`` keeps it in ``gc.garbage`` instead of freeing it)."""
    gc.collect()
    gc.garbage.clear()
    gc.set_debug(gc.DEBUG_SAVEALL)

    def found() -> list[str]:
        gc.collect()
        names = sorted({type(o).__qualname__ for o in gc.garbage})
        # free what was kept: dropped from gc.garbage, it is still a cycle for the collector
        gc.set_debug(0)
        gc.garbage.clear()
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        return names

    try:
        yield found
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def react(turns: int = 5) -> Graph:
    g = Graph("cycles-react", S)

    async def model(s: S) -> dict[str, Any]:
        return {"turns": s.turns + 1, "messages": [f"model {s.turns}"]}

    async def tool(s: S) -> dict[str, Any]:
        return {"messages": [f"tool {s.turns}"]}

    g.add_node("model", model, after=["tool"], max_iterations=turns + 2)
    g.add_node("tool", tool, after=["model"], when=lambda s: s.turns < turns)
    g.add_node("finish", lambda s: None, after=["model"])
    return g


def mapreduce(work: Callable[..., Awaitable[dict[str, Any]]], retry: RetryPolicy | None = None) -> Graph:
    g = Graph("cycles-map", S)
    g.add_node("plan", lambda s: {"items": list(range(12))})
    g.add_node("work", work, after=["plan"], map_over="items", retry=retry)
    g.add_node("reduce", lambda s: {"total": sum(s.results)}, after=["work"])
    return g


async def double(s: S, item: int) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"results": [2 * item]}


async def run_twice(rt: Runtime, graph: Graph, found: Callable[[], list[str]], **kw: Any) -> tuple[Run, list[str]]:
    """The second of two runs, and the cyclic garbage it left (the first run warms caches;
    compiling a graph builds models, which is not a run's own garbage)."""
    compiled = graph.compile()
    await rt.start(compiled, {}, **kw)
    found()
    run = await rt.start(compiled, {}, **kw)
    await asyncio.sleep(0)   # let the loop drop the finished tasks
    return run, found()


async def test_a_loop_leaves_no_cycles(rt: Runtime, garbage: Callable[[], list[str]]) -> None:
    run, left = await run_twice(rt, react(), garbage)
    assert run.status == RunStatus.SUCCEEDED
    assert left == []


async def test_a_map_leaves_no_cycles(rt: Runtime, garbage: Callable[[], list[str]]) -> None:
    run, left = await run_twice(rt, mapreduce(double), garbage, max_concurrency=3)
    assert run.status == RunStatus.SUCCEEDED
    assert left == []


async def test_a_subgraph_leaves_no_cycles(rt: Runtime, garbage: Callable[[], list[str]]) -> None:
    g = Graph("cycles-parent", S)
    g.add_node("start", lambda s: {"messages": ["go"]})
    g.subgraph("inner", react(3), after=["start"])
    run, left = await run_twice(rt, g, garbage)
    assert run.status == RunStatus.SUCCEEDED
    assert left == []


FAST = RetryPolicy(max_attempts=3, initial_interval=0.001, max_interval=0.001)


async def test_a_failed_map_item_retried_then_failing_the_run_leaves_no_cycles(
        rt: Runtime, garbage: Callable[[], list[str]]) -> None:
    async def flaky(s: S, item: int) -> dict[str, Any]:
        if item % 5 == 4:
            raise TransientError(f"item {item} broke")
        return {"results": [item]}

    run, left = await run_twice(rt, mapreduce(flaky, retry=FAST), garbage, max_concurrency=3)
    assert run.status == RunStatus.FAILED
    assert left == []


async def test_a_paused_run_and_its_resume_leave_no_cycles(rt: Runtime, garbage: Callable[[], list[str]]) -> None:
    g = Graph("cycles-ask", S)

    async def ask(s: S, ctx: Any) -> dict[str, Any]:
        answer = await ctx.interrupt({"q": "go on?"})
        return {"messages": [f"answer {answer}"]}

    g.add_node("ask", ask)
    g.add_node("after", lambda s: {"total": len(s.messages)}, after=["ask"])
    paused, left = await run_twice(rt, g, garbage)
    assert paused.status == RunStatus.INTERRUPTED
    assert left == []
    [question] = await rt.interrupts(paused.id)
    done = await rt.resume(paused.id, {question.id: "yes"})
    await asyncio.sleep(0)
    assert done.status == RunStatus.SUCCEEDED
    assert garbage() == []


async def test_a_cancelled_run_leaves_no_cycles(rt: Runtime, garbage: Callable[[], list[str]]) -> None:
    g = Graph("cycles-cancel", S)
    started = asyncio.Event()

    async def slow(s: S) -> dict[str, Any]:
        started.set()
        await asyncio.sleep(30)
        return {}

    g.add_node("slow", slow)
    compiled = g.compile()
    for _ in range(2):
        garbage()
        started.clear()
        task = asyncio.create_task(rt.start(compiled, {}))
        await started.wait()
        [running] = [r for r in await rt.runs() if r.status == RunStatus.RUNNING]
        await rt.cancel(running.id, "enough")
        run = await task
        await asyncio.sleep(0)
        assert run.status == RunStatus.CANCELLED
    assert garbage() == []
