"""An answer about an effect that calls it ("retry", "live") or gives up ("abort") is
refused when it also carries a "result": the person may have meant that result, and it
would be dropped while the effect is called again. The run stays as it was."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from runtime import Graph, InterruptKind, InvalidAnswer, NodeContext, RetryPolicy, Runtime, RunStatus


class S(BaseModel):
    value: str = ""
    amount: int = 1


def charging(calls: list[str]) -> Graph:
    """The first call outlives its attempt, so its outcome is unknown (in doubt)."""
    g = Graph("g", state=S)

    async def pay(info):
        calls.append(info.key)
        if len(calls) == 1:
            await asyncio.sleep(5)
        return "paid"

    @g.node(timeout=0.5, retry=RetryPolicy(max_attempts=3, initial_interval=0.001, backoff=1.0))
    async def charge(state: S, ctx: NodeContext) -> dict:
        return {"value": await ctx.effect("pay", pay, request={"amount": state.amount})}

    return g


async def unchanged(rt: Runtime, run_id: str) -> tuple[object, ...]:
    run = await rt.get_run(run_id)
    return run.status, run.event_seq, [i.id for i in await rt.interrupts(run_id)]


@pytest.mark.parametrize("action", ["retry", "abort"])
async def test_an_in_doubt_answer_that_does_not_record_a_result_refuses_one(rt: Runtime, action: str):
    calls: list[str] = []
    run = await rt.start(charging(calls), {})
    [question] = await rt.interrupts(run.id)
    assert question.kind == InterruptKind.IN_DOUBT
    before = await unchanged(rt, run.id)
    with pytest.raises(InvalidAnswer, match=f'"{action}" answer .* takes no "result".*"action": "result"'):
        await rt.resume(run.id, {"action": action, "result": "paid by hand"})
    assert await unchanged(rt, run.id) == before and len(calls) == 1
    run = await rt.resume(run.id, {"action": "result", "result": "paid by hand"})
    assert run.status == RunStatus.SUCCEEDED and len(calls) == 1


@pytest.mark.parametrize("action", ["live", "abort"])
async def test_an_unrecorded_answer_that_does_not_mock_refuses_a_result(rt: Runtime, action: str):
    calls: list[str] = []
    g = charging(calls)
    calls.append("the first call stalls no more")
    run = await rt.start(g, {})
    assert run.status == RunStatus.SUCCEEDED
    branch = await rt.fork((await rt.history(run.id))[0].id, patch={"amount": 2})
    [question] = await rt.interrupts(branch.id)
    assert question.kind == InterruptKind.UNRECORDED
    before = await unchanged(rt, branch.id)
    with pytest.raises(InvalidAnswer, match=f'"{action}" answer .* takes no "result".*"action": "mock"'):
        await rt.resume(branch.id, {"action": action, "result": "paid"})
    assert await unchanged(rt, branch.id) == before and len(calls) == 2
    branch = await rt.resume(branch.id, {"action": "mock", "result": "paid"})
    assert branch.status == RunStatus.SUCCEEDED and len(calls) == 2
