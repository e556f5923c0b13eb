"""``rt.stream(rt.resume(run_id, answer))`` on a run that is still running: the answers go to
the call already driving it (in this process, or another Runtime's), whose commits are
published to that call's stream. The resume's stream still yields what the run does from
the answer on, read back from the store: gapless, in trace order, up to its end."""

from __future__ import annotations

import asyncio
from typing import Annotated

from pydantic import BaseModel

from runtime import Graph, NodeContext, Runtime, RunStatus, StreamEvent, append
from runtime.store.base import CheckpointStore


class S(BaseModel):
    log: Annotated[list[str], append] = []


class Ok(BaseModel):
    ok: bool


def graph(gate: asyncio.Event) -> Graph:
    g = Graph("handed", state=S)

    @g.node()
    async def ask(state: S, ctx: NodeContext) -> dict:
        answer = await ctx.interrupt({"question": "go on?"}, response=Ok)
        return {"log": [f"ask {answer.ok}"]}

    @g.node()
    async def slow(state: S) -> dict:   # keeps the run going while the question waits
        await gate.wait()
        return {"log": ["slow"]}

    @g.node(after=["ask"])
    async def then(state: S) -> dict:
        return {"log": ["then"]}

    return g


async def asked(rt: Runtime, g: Graph) -> tuple[asyncio.Task[object], str]:
    driving = asyncio.create_task(rt.start(g, {}))
    for _ in range(500):
        runs = await rt.runs(limit=1)
        if runs and await rt.interrupts(runs[0].id):
            return driving, runs[0].id
        await asyncio.sleep(0.01)
    raise AssertionError("the run never asked")


async def streamed(answering: Runtime, run_id: str, gate: asyncio.Event) -> list[StreamEvent]:
    asyncio.get_running_loop().call_later(0.3, gate.set)
    async with answering.stream(answering.resume(run_id, {"ok": True})) as events:
        return [e async for e in events]


async def check(rt: Runtime, run_id: str, got: list[StreamEvent]) -> None:
    assert (await rt.get_run(run_id)).status == RunStatus.SUCCEEDED
    events = [e for e in got if e.type != "checkpoint"]
    # (another Runtime's run takes the answer at its next look: what it did meanwhile comes first)
    assert events and events[-1].type == "run.succeed"
    assert [e.node for e in events if e.type == "interrupt.answered"] == ["ask"]
    first = events[0].seq
    recorded = [(e.seq, str(e.type), e.node) for e in await rt.events(run_id) if e.seq >= first]
    assert [(e.seq, e.type, e.node) for e in events] == recorded   # no gap, no repeat, trace order
    done = {e.node for e in events if e.type == "node.succeed"}
    assert done == {"ask", "slow", "then"}
    assert any(e.type == "checkpoint" for e in got)


async def test_a_streamed_answer_to_a_run_driven_by_another_call_yields_what_it_does(rt: Runtime) -> None:
    gate = asyncio.Event()
    driving, run_id = await asked(rt, graph(gate))
    got = await streamed(rt, run_id, gate)
    await driving
    await check(rt, run_id, got)


async def test_a_streamed_answer_to_a_run_another_runtime_drives_yields_what_it_does(
        rt: Runtime, store: CheckpointStore) -> None:
    gate = asyncio.Event()
    g = graph(gate)
    driving, run_id = await asked(rt, g)
    # another deployment's process, as far as leases go; one that paused before it took the
    # answer is answered by this one, which then drives it
    other = Runtime(store=store, graphs=[g])
    try:
        got = await streamed(other, run_id, gate)
        await driving
        await check(rt, run_id, got)
    finally:
        other.close()
