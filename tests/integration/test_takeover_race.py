"""A process that has just taken a run's lease, and not yet recorded why (a worker
claiming a queued run, a person's answer resuming a paused one), is not cut off by a
second process that read the run a moment later: the second is refused, as if it
had lost the race for the lease, and no effect of the first is left in doubt."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from runtime import Graph, InvalidAnswer, LeaseLost, NodeContext, Runtime, RunStatus
from runtime.store.base import CheckpointStore

#: a lease owner on another host: alive for as long as its lease says
ELSEWHERE = "another-host:1:claimer"


class S(BaseModel):
    n: int = 0


class Approval(BaseModel):
    approve: bool


def graph(calls: list[str]) -> Graph:
    g = Graph("taken", state=S)

    @g.node()
    async def ask(state: S, ctx: NodeContext) -> dict:
        answer = await ctx.interrupt({"question": "go?"}, response=Approval)
        await ctx.effect("send", lambda info: calls.append(info.key), request={"approve": answer.approve})
        return {"n": state.n + 1}

    return g


@pytest.fixture
def second(store: CheckpointStore) -> Iterator[Runtime]:
    """Another process's runtime on the same store."""
    runtime = Runtime(store=store)
    yield runtime
    runtime.close()


def taking(rt: Runtime, run_id: str) -> int:
    """Take the run's lease as another process would the moment before it records why; its fence."""
    run = rt.store.get_run(run_id)
    return rt.store.acquire_lease(run_id, ELSEWHERE, rt.env.now() + 30, run.fence).fence


async def test_a_queued_run_another_process_is_claiming_is_left_to_it(rt: Runtime, second: Runtime):
    g = graph([])
    second.register(g)
    run = await rt.submit(g, {})
    fence = taking(rt, run.id)
    with pytest.raises(LeaseLost, match="being taken over"):
        await second.resume(run.id)
    now = rt.store.get_run(run.id)
    assert (now.status, now.fence, now.lease_owner) == (RunStatus.QUEUED, fence, ELSEWHERE)


async def test_an_answer_while_another_process_resumes_the_run_is_refused(rt: Runtime, second: Runtime):
    calls: list[str] = []
    g = graph(calls)
    second.register(g)
    paused = await rt.start(g, {})
    assert paused.status == RunStatus.INTERRUPTED
    fence = taking(rt, paused.id)
    with pytest.raises(InvalidAnswer, match="already answered by another caller"):
        await second.resume(paused.id, {"approve": True})
    now = rt.store.get_run(paused.id)
    assert (now.status, now.fence, now.lease_owner) == (RunStatus.INTERRUPTED, fence, ELSEWHERE)
    assert calls == []


async def test_a_cancel_while_another_process_claims_the_run_is_left_for_it_to_see(rt: Runtime, second: Runtime):
    g = graph([])
    second.register(g)
    run = await rt.submit(g, {})
    fence = taking(rt, run.id)
    now = await second.cancel(run.id, "no longer needed", wait=0.1)
    assert (now.status, now.fence) == (RunStatus.QUEUED, fence)   # its claimer cancels it once it begins
