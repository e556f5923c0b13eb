"""A node's ``ctx`` works only while its attempt runs. Kept for later (by a client object,
or by a task the node left running), an effect, question, custom event or usage through it
would be recorded against a node whose outcome is already settled: it is refused, saying so,
and nothing is run or recorded."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from pydantic import BaseModel

from runtime import Graph, NodeContext, Runtime, RunStatus, append


class S(BaseModel):
    log: Annotated[list[str], append] = []


def kept_by_a(use: str, calls: list[str]) -> Graph:
    """``a`` keeps its ctx (as a tool client would); ``b`` uses it with its own at hand."""
    kept: dict[str, NodeContext] = {}
    g = Graph(f"kept-{use}", state=S)

    @g.node()
    async def a(s: S, ctx: NodeContext) -> dict[str, Any]:
        kept["ctx"] = ctx
        return {"log": ["a"]}

    @g.node(after=["a"])
    async def b(s: S, ctx: NodeContext) -> dict[str, Any]:
        old = kept["ctx"]
        if use == "effect":
            await old.effect("charge", lambda: calls.append("charge") or "paid", request={"order": 1})
        elif use == "emit":
            old.emit({"progress": 1})
        elif use == "usage":
            old.usage(tokens=10)
        else:
            await old.interrupt({"question": "ok?"})
        return {"log": ["b"]}

    return g


async def test_a_ctx_kept_from_an_earlier_node_is_refused_in_words(rt: Runtime) -> None:
    for use in ("effect", "emit", "usage", "interrupt"):
        calls: list[str] = []
        run = await rt.start(kept_by_a(use, calls), {})
        assert run.status == RunStatus.FAILED, use
        assert run.error is not None and run.error["class"] == "invalid_input", run.error
        assert run.error["node"] == "b"
        assert "the context of node 'a' (attempt 1) was used after that attempt ended" in run.error["message"]
        assert calls == []
        assert not rt.store.journal([run.id])
        events = await rt.events(run.id)
        assert not [e for e in events if e.node == "a" and e.type in ("effect.started", "custom", "usage")], use
        assert run.usage.get("tokens", 0) == 0
        assert not await rt.interrupts(run.id, pending=False)


async def test_a_task_the_node_left_running_cannot_run_an_effect_on_its_behalf(rt: Runtime) -> None:
    calls: list[str] = []
    refused: list[BaseException] = []
    later_done = asyncio.Event()
    g = Graph("left-running", state=S)

    @g.node()
    async def a(s: S, ctx: NodeContext) -> dict[str, Any]:
        async def later() -> None:
            await asyncio.sleep(0.05)
            try:
                await ctx.effect("notify", lambda: calls.append("notify") or "sent", request={})
            except Exception as e:
                refused.append(e)
            finally:
                later_done.set()
        asyncio.get_running_loop().create_task(later())
        return {"log": ["a"]}

    @g.node(after=["a"])
    async def b(s: S) -> dict[str, Any]:
        await asyncio.wait_for(later_done.wait(), 5)
        return {"log": ["b"]}

    run = await rt.start(g, {})
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert calls == [] and len(refused) == 1
    assert "node 'a' (attempt 1) was used after that attempt ended" in str(refused[0])
    assert not rt.store.journal([run.id])
