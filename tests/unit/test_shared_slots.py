"""Runs of one Runtime share its concurrency slots: a run that finds none free waits, and
starts as soon as a sibling frees one — never a heartbeat later."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from runtime import Graph, Runtime, RunStatus
from runtime.store.base import CheckpointStore


class S(BaseModel):
    x: int = 0


async def test_runs_waiting_for_a_slot_start_when_one_frees_not_at_the_next_heartbeat(
        store: CheckpointStore) -> None:
    # nodes that never wait end in the step that launches them (eagerly, on 3.12): the slot
    # frees while the starved runs are giving the event loop its turn, before they sleep
    g = Graph("tiny", state=S)

    @g.node()
    async def only(s: S) -> dict:
        return {"x": s.x + 1}

    rt = Runtime(store=store, max_concurrency=2, heartbeat=60.0, lease_ttl=600.0)
    try:
        runs = await asyncio.wait_for(asyncio.gather(*(rt.start(g, {}) for _ in range(12))), 20)
    finally:
        rt.close()
    assert {r.status for r in runs} == {RunStatus.SUCCEEDED}


async def test_runs_whose_nodes_wait_do_not_wake_each_other_while_nothing_ends(
        store: CheckpointStore, monkeypatch) -> None:
    """Freeing a slot wakes the Runtime's other runs; a step that freed none must not, or two
    runs waiting on slow nodes would wake each other in turn and spin a core meanwhile."""
    from runtime.engine.loop import RunLoop

    g = Graph("slow", state=S)

    @g.node()
    async def only(s: S) -> dict:
        await asyncio.sleep(0.3)
        return {"x": 1}

    steps = [0]
    collect = RunLoop._collect

    def counted(self: RunLoop) -> None:
        steps[0] += 1
        collect(self)

    monkeypatch.setattr(RunLoop, "_collect", counted)
    rt = Runtime(store=store, max_concurrency=4)
    try:
        runs = await asyncio.wait_for(asyncio.gather(*(rt.start(g, {}) for _ in range(3))), 20)
    finally:
        rt.close()
    assert {r.status for r in runs} == {RunStatus.SUCCEEDED}
    assert steps[0] < 60, f"{steps[0]} steps for 3 runs of one slow node each"
