"""Taking over a run from a process whose lease expired needs the run's code: a process
without it must refuse before it touches the lease, so the owner, if it is only slow (a
long pause, a stopped process), goes on driving its run."""

from __future__ import annotations

import asyncio
import time

import pytest
from pydantic import BaseModel

from runtime import Graph, NodeContext, NotFound, RunStatus, Runtime
from runtime.store.base import CheckpointStore


class S(BaseModel):
    value: str = ""


class AnHourLater:
    """A clock an hour ahead: to it every lease the owner took has expired."""

    def time(self) -> float:
        return time.time() + 3600


def gated(name: str) -> tuple[Graph, asyncio.Event, asyncio.Event]:
    """A one-node graph whose node says it started and waits until told to go on."""
    g = Graph(name, state=S)
    started, go = asyncio.Event(), asyncio.Event()

    @g.node()
    async def slow(state: S, ctx: NodeContext) -> dict:
        started.set()
        await go.wait()
        return {"value": "done"}

    return g, started, go


@pytest.mark.parametrize("action", ["cancel", "resume"])
async def test_a_process_without_the_graph_leaves_an_expired_lease_to_its_owner(
        store: CheckpointStore, action: str) -> None:
    owner = Runtime(store=store)
    other = Runtime(store=store, clock=AnHourLater())   # the graph is not registered there
    g, started, go = gated("held")
    task = asyncio.create_task(owner.start(g, {}))
    await asyncio.wait_for(started.wait(), 10)
    run_id = (await owner.runs())[0].id
    before = await owner.get_run(run_id)

    with pytest.raises(NotFound, match="not registered"):
        if action == "cancel":
            await other.cancel(run_id, wait=0)
        else:
            await other.resume(run_id)

    after = await owner.get_run(run_id)
    assert (after.status, after.lease_owner, after.fence) == (RunStatus.RUNNING, before.lease_owner, before.fence)
    go.set()
    run = await asyncio.wait_for(task, 10)
    assert run.status == RunStatus.SUCCEEDED
    owner.close()
    other.close()
