"""An ``async def`` node that calls ``ctx.effect(...)`` or ``ctx.interrupt(...)`` without
``await`` gets a coroutine that never runs: the effect never happens and the question is
never asked. Such a node fails, naming the call, instead of succeeding as if it had."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel

from runtime import Graph, NodeContext, Runtime, RunStatus, append


class S(BaseModel):
    log: Annotated[list[str], append] = []


async def test_an_effect_never_awaited_fails_its_node_naming_it(rt: Runtime):
    sent: list[str] = []
    g = Graph("unawaited_effect", state=S)

    @g.node()
    async def notify(state: S, ctx: NodeContext) -> dict:
        ctx.effect("email.send", lambda: sent.append("mail"), request={"to": "ada"})
        return {"log": ["sent"]}

    run = await rt.start(g, {})
    assert run.status == RunStatus.FAILED and sent == []
    assert run.error is not None and run.error["node"] == "notify"
    assert "returned without awaiting ctx.effect('email.send', ...)" in run.error["message"]
    assert "await ctx.effect(...)" in run.error["message"]


async def test_a_question_never_awaited_fails_its_node_rather_than_skipping_the_approval(rt: Runtime):
    g = Graph("unawaited_question", state=S)

    @g.node()
    async def approve(state: S, ctx: NodeContext) -> dict:
        ctx.interrupt({"question": "ship it?"})
        return {"log": ["approved"]}

    run = await rt.start(g, {})
    assert run.status == RunStatus.FAILED, run.status
    assert run.error is not None and "returned without awaiting ctx.interrupt(...)" in run.error["message"]
    assert await rt.interrupts(run.id) == []


async def test_calls_awaited_together_are_awaited(rt: Runtime):
    import asyncio

    g = Graph("awaited_together", state=S)

    @g.node()
    async def both(state: S, ctx: NodeContext) -> dict:
        a, b = await asyncio.gather(ctx.effect("a", lambda: "A", request={}), ctx.effect("b", lambda: "B", request={}))
        return {"log": [a, b]}

    run = await rt.start(g, {})
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert (await rt.state_at((await rt.history(run.id))[-1].id)).log == ["A", "B"]  # type: ignore[attr-defined]
