"""Effects of one name called concurrently in one node (parallel tool calls with
``asyncio.gather``, threads of a ``def`` node): re-executed — a retry, a mocked fork — the
recorded calls come back in whatever order their served results let them, and each is still
given its own recorded result, by its request or its ``key=``, and none runs again."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from pydantic import BaseModel

from runtime import Graph, NodeContext, RetryPolicy, Runtime, RunStatus, append

RETRY = RetryPolicy(max_attempts=3, initial_interval=0.001)


class S(BaseModel):
    out: Annotated[list[str], append] = []


def parallel_tools(calls: list[str], attempts: list[int]) -> Graph:
    """Two tool calls at once, each a fetch then a summary; the second fetch is the quicker
    the first time (live), so the summaries are recorded b first; the node then fails once."""
    g = Graph("parallel_tools", state=S)

    @g.node(retry=RETRY)
    async def tools(state: S, ctx: NodeContext) -> dict[str, Any]:
        attempts.append(ctx.attempt)

        async def one(url: str, delay: float) -> str:
            async def fetch() -> str:
                calls.append(f"fetch {url}")
                await asyncio.sleep(delay)
                return f"page {url}"
            page = await ctx.effect("fetch", fetch, request={"url": url})

            def summarize() -> str:
                calls.append(f"summarize {url}")
                return f"summary of {page}"
            return str(await ctx.effect("summarize", summarize, request={"page": page}))

        found = await asyncio.gather(one("a", 0.05), one("b", 0.01))
        if ctx.attempt == 1:
            raise ConnectionError("the model's connection dropped")
        return {"out": found}

    return g


async def test_a_retry_gives_each_concurrent_call_its_own_recorded_result(rt: Runtime) -> None:
    calls: list[str] = []
    attempts: list[int] = []
    run = await rt.start(parallel_tools(calls, attempts), {})
    assert run.status == RunStatus.SUCCEEDED and attempts == [1, 2]
    assert (await rt.state_at((await rt.history(run.id))[-1].id)).out == ["summary of page a", "summary of page b"]
    assert sorted(calls) == ["fetch a", "fetch b", "summarize a", "summarize b"]   # each once


async def test_a_mocked_fork_serves_each_concurrent_call_its_own_recorded_result(rt: Runtime) -> None:
    calls: list[str] = []
    g = parallel_tools(calls, [])
    run = await rt.start(g, {})
    fork = await rt.fork((await rt.history(run.id))[0].id)
    assert fork.status == RunStatus.SUCCEEDED
    assert (await rt.state_at((await rt.history(fork.id))[-1].id)).out == ["summary of page a", "summary of page b"]
    assert len(calls) == 4   # nothing ran for the fork


async def test_threads_of_a_def_node_are_told_apart_by_their_key(rt: Runtime) -> None:
    calls: list[int] = []
    lock = threading.Lock()
    g = Graph("threaded_tools", state=S)

    @g.node(retry=RETRY)
    def tools(state: S, ctx: NodeContext) -> dict[str, Any]:
        def call(i: int) -> str:
            def tool() -> str:
                with lock:
                    calls.append(i)
                return f"result for {i}"
            return str(ctx.effect("tool", tool, key=f"tool-{i}"))

        with ThreadPoolExecutor(4) as pool:
            found = list(pool.map(call, range(4)))
        if ctx.attempt == 1:
            raise ConnectionError("the model's connection dropped")
        return {"out": found}

    run = await rt.start(g, {})
    assert run.status == RunStatus.SUCCEEDED
    assert (await rt.state_at((await rt.history(run.id))[-1].id)).out == [f"result for {i}" for i in range(4)]
    assert sorted(calls) == [0, 1, 2, 3]
