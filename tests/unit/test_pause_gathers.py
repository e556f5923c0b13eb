"""A run that meets a question goes on with whatever does not wait for an answer, and
pauses once nothing can run: the questions it pauses with, and the work it did first,
are the same whatever ``max_concurrency`` and whichever node finished first — one
answer-all round for a person, never one pause per slot."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Annotated

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from runtime import (Graph, MemoryStore, NodeContext, NodeStatus, RetryPolicy, Runtime, RunStatus, TransientError,
                     append)


class S(BaseModel):
    items: list[int] = []
    out: Annotated[list[str], append] = []


def graph() -> Graph:
    """A subgraph that asks, a map whose even items ask, a branch with a successor, a join."""
    child = Graph("gather-child", state=S)

    @child.node()
    async def check(s: S, ctx: NodeContext) -> dict:
        return {"out": [f"check:{await ctx.interrupt({'child': True})}"]}

    g = Graph("gather", state=S)
    g.subgraph("sub", child)

    @g.node(map_over="items")
    async def work(s: S, ctx: NodeContext, item: int) -> dict:
        await asyncio.sleep(0.001 * (item % 3))   # some wait, some end at once
        if item % 2 == 0:
            return {"out": [f"{item}:{await ctx.interrupt({'item': item})}"]}
        return {"out": [str(item)]}

    @g.node()
    async def side(s: S) -> dict:
        return {"out": ["side"]}

    @g.node(after=["side"])
    async def after_side(s: S) -> dict:
        return {"out": ["after side"]}

    @g.node(after=["work", "sub", "after_side"])
    def end(s: S) -> dict:
        return {"out": ["end"]}

    return g


async def first_pause(slots: int) -> tuple[list[str], dict[str, NodeStatus], list[str]]:
    rt = Runtime(store=MemoryStore(), max_concurrency=slots)
    try:
        run = await rt.start(graph(), {"items": list(range(7))})
        assert run.status == RunStatus.INTERRUPTED
        questions = await rt.interrupts(run.id)
        cp = rt.store.find_checkpoint(run.id)
        assert cp is not None
        done = await rt.resume(run.id, answers={q.id: "y" for q in questions})
        assert done.status == RunStatus.SUCCEEDED
        final = (await rt.thread_state(done.thread_id)).out
        return sorted(q.node for q in questions), dict(cp.node_states), final
    finally:
        rt.close()


@pytest.mark.parametrize("slots", [1, 2, 3, 5])
async def test_the_first_pause_is_the_same_whatever_max_concurrency(slots: int) -> None:
    wide = await first_pause(16)
    questions, statuses, final = await first_pause(slots)
    assert questions == wide[0] == ["sub/check", "work[0]", "work[2]", "work[4]", "work[6]"]
    assert statuses == wide[1]
    # what waits for no answer ran; what does waits
    assert statuses["side"] == statuses["after_side"] == NodeStatus.SUCCEEDED
    assert statuses["end"] == NodeStatus.PENDING
    assert all(statuses[f"work[{i}]"] == NodeStatus.SUCCEEDED for i in (1, 3, 5))
    assert final == wide[2]


class L(BaseModel):
    log: Annotated[list[str], append] = []
    turns: int = 0
    items: list[int] = []


def asking(delays: dict[str, float], asks: frozenset[str]) -> Graph:
    """A loop, a map and a plain branch side by side; the instances in ``asks`` ask a question."""
    async def step(ctx: NodeContext) -> str:
        await asyncio.sleep(delays.get(ctx.node, 0.0))
        return f"{ctx.node}:{await ctx.interrupt({'q': ctx.node})}" if ctx.node in asks else ctx.node

    g = Graph("asking", L)

    @g.node()
    async def start(s: L) -> dict:
        return {"log": ["start"], "items": [1, 2, 3, 4]}

    @g.node(after=["start", "again"], max_iterations=6)
    async def think(s: L, ctx: NodeContext) -> dict:
        return {"turns": s.turns + 1, "log": [f"{await step(ctx)} saw {len(s.log)}"]}

    @g.node(after=["think"], when=lambda s: s.turns < 3)
    async def again(s: L, ctx: NodeContext) -> dict:
        return {"log": [await step(ctx)]}

    @g.node(after=["start"], map_over="items")
    async def work(s: L, ctx: NodeContext, item: int) -> dict:
        return {"log": [f"{await step(ctx)} saw {len(s.log)}"]}

    @g.node(after=["start"])
    async def plain(s: L, ctx: NodeContext) -> dict:
        return {"log": [await step(ctx)]}

    @g.node(after=["plain"])
    async def after_plain(s: L, ctx: NodeContext) -> dict:
        return {"log": [await step(ctx)]}

    @g.node(after=["think", "work", "after_plain"])
    async def end(s: L) -> dict:
        return {"log": [f"end saw {len(s.log)}"]}

    return g


INSTANCES = ["think", "think#1", "think#2", "again", "again#1", "work[0]", "work[1]", "work[2]", "work[3]",
             "plain", "after_plain"]


async def pauses(delays: dict[str, float], asks: frozenset[str], slots: int
                 ) -> tuple[list[tuple[list[str], dict[str, str]]], list[str]]:
    """Each pause's (questions, instance statuses), answering them all every time; the final log."""
    rt = Runtime(store=MemoryStore(), max_concurrency=slots)
    try:
        run, seen = await rt.start(asking(delays, asks), {}), []
        while run.status == RunStatus.INTERRUPTED:
            questions = await rt.interrupts(run.id)
            cp = rt.store.find_checkpoint(run.id)
            assert cp is not None
            seen.append((sorted(q.node for q in questions), {n: s.value for n, s in cp.node_states.items()}))
            run = await rt.resume(run.id, answers={q.id: "y" for q in questions})
        assert run.status == RunStatus.SUCCEEDED, run.error
        return seen, (await rt.thread_state(run.thread_id)).log
    finally:
        rt.close()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**20), slots=st.integers(1, 5),
       asks=st.sets(st.sampled_from(INSTANCES), min_size=1, max_size=4).map(frozenset))
async def test_every_pause_is_the_same_whatever_the_timing_and_max_concurrency(
        seed: int, slots: int, asks: frozenset[str]) -> None:
    rng = random.Random(seed)
    delays = {n: rng.random() * 0.003 for n in INSTANCES}
    assert await pauses(delays, asks, slots) == await pauses({}, asks, 8)


def limited(name: str, sibling_takes: float = 0.0) -> Graph:
    """A question, a branch of two steps beside it, and a node that fails once then retries."""
    tries = {"n": 0}
    g = Graph(name, state=S)

    @g.node()
    async def ask(s: S, ctx: NodeContext) -> dict:
        return {"out": [f"ask:{await ctx.interrupt({'q': 1})}"]}

    @g.node()
    async def first(s: S) -> dict:
        await asyncio.sleep(sibling_takes)
        return {"out": ["first"]}

    @g.node(after=["first"])
    async def second(s: S) -> dict:
        return {"out": ["second"]}

    @g.node(retry=RetryPolicy(max_attempts=3, initial_interval=0.02))
    async def flaky(s: S) -> dict:
        tries["n"] += 1
        if tries["n"] == 1:
            raise TransientError("once")
        return {"out": ["flaky"]}

    @g.node(after=["flaky"])
    async def ask_again(s: S, ctx: NodeContext) -> dict:
        return {"out": [f"again:{await ctx.interrupt({'q': 2})}"]}

    return g


@pytest.mark.parametrize("sibling_takes", [0.0, 0.1])
async def test_a_retry_waits_for_the_resume_whatever_its_siblings_take(sibling_takes: float) -> None:
    """Its backoff ends while a sibling still runs, or after: the pause is the same."""
    rt = Runtime(store=MemoryStore())
    try:
        run = await rt.start(limited("retrying", sibling_takes), {})
        assert run.status == RunStatus.INTERRUPTED
        cp = rt.store.find_checkpoint(run.id)
        assert cp is not None and cp.node_states["flaky"] == NodeStatus.RETRYING
        assert cp.node_states["second"] == NodeStatus.SUCCEEDED
        assert [q.node for q in await rt.interrupts(run.id)] == ["ask"]
    finally:
        rt.close()


async def test_a_run_that_asks_pauses_where_max_steps_leaves_no_room_and_goes_on_with_a_higher_limit() -> None:
    rt = Runtime(store=MemoryStore())
    try:
        run = await rt.start(limited("steps"), {}, max_steps=3)   # ask, first, flaky: no room for second
        assert run.status == RunStatus.INTERRUPTED and run.error is None
        [question] = await rt.interrupts(run.id)
        run = await rt.resume(run.id, "yes", max_steps=20)
        [again] = await rt.interrupts(run.id)
        run = await rt.resume(run.id, "sure")
        assert run.status == RunStatus.SUCCEEDED
        assert sorted((await rt.thread_state(run.thread_id)).out) == sorted(
            ["ask:yes", "first", "second", "flaky", "again:sure"])
    finally:
        rt.close()


class AnHourLater:
    """A clock an hour ahead: to it the first process's lease has expired, and every backoff."""

    def time(self) -> float:
        return time.time() + 3600


async def test_a_run_taken_over_while_it_was_pausing_pauses_as_it_would_have() -> None:
    """Its process stopped (here: stalled past its lease) while a branch still ran after a
    question was asked. The process that recovers it leaves the retry for the resume too,
    even though the backoff has passed: the pause is the one the first process would have made."""
    store, go, held = MemoryStore(), asyncio.Event(), asyncio.Event()
    first_time = {"hold": True}

    def graph() -> Graph:
        g = limited("taken-over")

        @g.node()
        async def hold(s: S) -> dict:
            if first_time.pop("hold", False):
                held.set()
                await go.wait()
            return {"out": ["hold"]}

        return g

    owner, rescuer = Runtime(store=store), Runtime(store=store, clock=AnHourLater())
    task = asyncio.create_task(owner.start(graph(), {}))
    try:
        await asyncio.wait_for(held.wait(), 10)
        run_id = (await owner.runs())[0].id
        while not any(e.type == "node.retry" for e in await owner.events(run_id)):
            await asyncio.sleep(0.01)
        rescuer.register(graph())
        run = await rescuer.resume(run_id)
        assert run.status == RunStatus.INTERRUPTED
        cp = store.find_checkpoint(run_id)
        assert cp is not None and cp.node_states["flaky"] == NodeStatus.RETRYING
        assert cp.node_states["hold"] == NodeStatus.SUCCEEDED
        assert [q.node for q in await rescuer.interrupts(run_id)] == ["ask"]
    finally:
        go.set()
        await asyncio.gather(task, return_exceptions=True)
        owner.close()
        rescuer.close()
