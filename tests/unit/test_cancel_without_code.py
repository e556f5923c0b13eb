"""Cancelling a run that waits (paused for an answer, or queued) needs no code: a process
without the graph — the debugger started over someone else's store, ``harness cancel``
from another machine — ends it from its records, and writes what the run's own code
would have written."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from runtime import Graph, NodeContext, NotFound, Runtime, RunStatus, append
from runtime.core.records import InterruptStatus, Run
from runtime.store.base import CheckpointStore


class S(BaseModel):
    notes: Annotated[list[str], append] = []
    items: list[int] = []


def paused_graph(name: str) -> Graph:
    """A run of it pauses with a question in a subgraph and one in a map's item, while the
    map's other items and a branch succeeded: what a cancel ends is spread over instances.
    Made in a function: no module attribute names it, so only the process holding it has its code."""
    child = Graph(f"{name}-review", state=S)

    @child.node()
    async def check(state: S, ctx: NodeContext) -> dict:
        ok = await ctx.interrupt({"question": "is it right?"})
        return {"notes": [f"checked {ok}"]}

    @child.node(after=["check"])
    async def sign(state: S) -> dict:
        return {"notes": ["signed"]}

    g = Graph(name, state=S)

    @g.node()
    async def plan(state: S) -> dict:
        return {"items": [1, 2, 3], "notes": ["planned"]}

    @g.node(after=["plan"], map_over="items")
    async def work(state: S, ctx: NodeContext, item: int) -> dict:
        if item == 2:
            await ctx.interrupt({"question": f"item {item}?"})
        return {"notes": [f"w{item}"]}

    g.subgraph("review", child, after=["plan"])

    @g.node(after=["work", "review"])
    async def end(state: S) -> dict:
        return {"notes": ["end"]}

    return g


@pytest.fixture
def pair(store: CheckpointStore) -> Iterator[tuple[Runtime, Runtime]]:
    """A Runtime that has the graphs' code (it registers them as it starts runs), and one that never will."""
    owner, other = Runtime(store=store), Runtime(store=store)
    yield owner, other
    owner.close()
    other.close()


def what_the_cancel_wrote(store: CheckpointStore, run: Run, before: Run) -> dict[str, Any]:
    """Everything the cancel wrote, without ids and times."""
    last = store.find_checkpoint(run.id)
    assert last is not None
    return {
        "run": (run.status, run.error, run.usage, run.head_seq, run.event_seq - before.event_seq,
                run.lease_owner, run.lease_expires_at, run.fence - before.fence),
        "events": [(e.seq - before.event_seq, e.type, e.node, e.attempt, dict(e.data))
                   for e in store.events(run.id, before.event_seq)],
        "checkpoint": (last.seq, last.source, last.nodes, dict(last.node_states), last.snapshot, last.changed,
                       last.event_seq - before.event_seq),
        "interrupts": sorted((i.node, i.status) for i in store.interrupts(run.id)),
        "attempts": sorted((a.node, a.attempt, a.status) for a in store.node_attempts(run.id)),
    }


async def test_a_process_without_the_code_cancels_a_paused_run_as_its_code_would(
        store: CheckpointStore, pair: tuple[Runtime, Runtime]) -> None:
    g = paused_graph("spread")
    owner, other = pair   # ``other`` has no graph
    with_code = await owner.start(g, {})
    without = await owner.start(g, {})
    assert with_code.status == without.status == RunStatus.INTERRUPTED

    a = await owner.cancel(with_code.id, "no longer needed")
    b = await other.cancel(without.id, "no longer needed")

    assert b.status == RunStatus.CANCELLED
    assert what_the_cancel_wrote(store, b, without) == what_the_cancel_wrote(store, a, with_code)
    written = what_the_cancel_wrote(store, b, without)
    assert [(t, n) for _, t, n, _, _ in written["events"]] == [
        ("node.cancel", "review/check"), ("node.cancel", "work"), ("node.cancel", "work[1]"),
        ("run.cancel", None)]
    assert written["checkpoint"][4] == {"notes": ["planned", "w1", "w3"], "items": [1, 2, 3]}
    assert {i.status for i in store.interrupts(without.id)} == {InterruptStatus.CANCELLED}
    assert [e.seq for e in store.events(without.id)] == list(range(1, b.event_seq + 1))

    # its code, elsewhere, continues it as it would continue the other one
    cont_a, cont_b = await owner.resume(a.id), await owner.resume(b.id)
    assert cont_a.status == cont_b.status == RunStatus.INTERRUPTED
    assert sorted(i.node for i in store.interrupts(cont_b.id) if i.status == InterruptStatus.PENDING) == \
        sorted(i.node for i in store.interrupts(cont_a.id) if i.status == InterruptStatus.PENDING) == \
        ["review/check", "work[1]"]


async def test_a_queued_run_is_cancelled_without_its_code(store: CheckpointStore,
                                                         pair: tuple[Runtime, Runtime]) -> None:
    g = paused_graph("queued")
    owner, other = pair
    queued = await owner.submit(g, {})
    assert queued.status == RunStatus.QUEUED
    twin = await owner.submit(g, {})
    run = await other.cancel(queued.id, "not today")
    assert (run.status, run.error) == (RunStatus.CANCELLED, {"class": "cancelled", "message": "not today"})
    assert what_the_cancel_wrote(store, run, queued) == what_the_cancel_wrote(
        store, await owner.cancel(twin.id, "not today"), twin)
    assert [e.type for e in store.events(run.id, queued.event_seq)] == ["run.cancel"]
    last = store.find_checkpoint(run.id)
    assert last is not None and set(last.node_states.values()) == {"pending"}


class AnHourLater:
    """A clock an hour ahead: to it every lease the owner took has expired."""

    def time(self) -> float:
        return time.time() + 3600


async def test_a_run_left_mid_step_still_needs_its_code_and_stays_as_it_was(store: CheckpointStore) -> None:
    """A run its process left RUNNING may have attempts and effects in flight: taking it
    over to cancel it needs the code that knows them."""
    g = Graph("mid-step", state=S)
    started, go = asyncio.Event(), asyncio.Event()

    @g.node()
    async def slow(state: S) -> dict:
        started.set()
        await go.wait()
        return {"notes": ["done"]}

    owner, other = Runtime(store=store), Runtime(store=store, clock=AnHourLater())
    task = asyncio.create_task(owner.start(g, {}))
    try:
        await asyncio.wait_for(started.wait(), 10)
        run_id = (await owner.runs())[0].id
        before = await owner.get_run(run_id)
        with pytest.raises(NotFound, match="not registered"):
            await other.cancel(run_id, wait=0)
        after = await owner.get_run(run_id)
        assert (after.status, after.fence, after.event_seq) == (RunStatus.RUNNING, before.fence, before.event_seq)
        go.set()
        assert (await task).status == RunStatus.SUCCEEDED
    finally:
        go.set()
        await asyncio.gather(task, return_exceptions=True)
        owner.close()
        other.close()


async def test_a_stream_read_back_shows_the_cancel_as_a_live_one_would(pair: tuple[Runtime, Runtime]) -> None:
    """The debugger and ``harness watch`` read a run's stream back from the store."""
    g = paused_graph("followed")
    owner, other = pair
    paused = await owner.start(g, {})
    await other.cancel(paused.id, "enough")
    seen = [(ev.type, ev.node) async for ev in owner.follow(paused.id, after_seq=paused.event_seq, poll=0.01)]
    assert seen == [("node.cancel", "review/check"), ("node.cancel", "work"), ("node.cancel", "work[1]"),
                    ("run.cancel", None), ("checkpoint", None)]
