"""Properties of node instances: whatever the timing, a run with a loop, a map and a
plain branch running side by side ends in the same state, with the same instances,
and every instance folds after everything it depends on."""

from __future__ import annotations

import asyncio
import random
from typing import Annotated, Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from runtime import Graph, MemoryStore, RunStatus, Runtime, append
from runtime.engine.instances import Instances


class S(BaseModel):
    log: Annotated[list[str], append] = []
    turns: int = 0
    items: list[int] = []


def side_by_side(delays: dict[str, float]) -> Graph:
    async def pause(name: str) -> None:
        await asyncio.sleep(delays.get(name, 0.0))

    g = Graph("side_by_side", S)

    @g.node()
    async def start(s: S) -> dict[str, Any]:
        return {"log": ["start"], "items": [1, 2, 3, 4]}

    @g.node(after=["start", "again"], max_iterations=6)
    async def think(s: S, ctx: Any) -> dict[str, Any]:
        await pause(ctx.node)
        return {"turns": s.turns + 1, "log": [f"{ctx.node} saw {len(s.log)}"]}

    @g.node(after=["think"], when=lambda s: s.turns < 4)
    async def again(s: S, ctx: Any) -> dict[str, Any]:
        await pause(ctx.node)
        return {"log": [ctx.node]}

    @g.node(after=["start"], map_over="items")
    async def work(s: S, ctx: Any, item: int) -> dict[str, Any]:
        await pause(ctx.node)
        return {"log": [f"{ctx.node}={item * item} saw {len(s.log)}"]}

    @g.node(after=["start"])
    async def plain(s: S, ctx: Any) -> dict[str, Any]:
        await pause(ctx.node)
        return {"log": ["plain"]}

    @g.node(after=["think", "work", "plain"])
    async def end(s: S) -> dict[str, Any]:
        return {"log": [f"end saw {len(s.log)}"]}

    return g


NAMES = ["think", "think#1", "think#2", "think#3", "again", "again#1", "again#2",
         "work[0]", "work[1]", "work[2]", "work[3]", "plain"]


async def run_once(delays: dict[str, float], slots: int) -> tuple[list[str], dict[str, str], list[str]]:
    """(final log, final instance statuses, instances in the order checkpoints folded them)"""
    rt = Runtime(store=MemoryStore(), max_concurrency=slots)
    try:
        run = await rt.start(side_by_side(delays), {})
        assert run.status == RunStatus.SUCCEEDED, run.error
        history = await rt.history(run.id)
        final = history[-1]
        state = await rt.state_at(final.id)
        folded = [n for cp in history for n in cp.nodes]
        return state.log, {n: s.value for n, s in final.node_states.items()}, folded
    finally:
        rt.close()


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**20), slots=st.integers(1, 5))
async def test_the_final_state_and_instances_do_not_depend_on_timing(seed: int, slots: int) -> None:
    rng = random.Random(seed)
    baseline = await run_once({}, 8)
    delays = {n: rng.random() * 0.004 for n in NAMES}
    # which checkpoint folded what follows the timing; the state and the instances do not
    assert (await run_once(delays, slots))[:2] == baseline[:2]


@settings(max_examples=30, deadline=None)
@given(names=st.permutations(["start", "think", "again", "think#1", "again#1", "think#2", "work",
                              "work[0]", "work[1]", "plain", "end"]))
def test_canonical_order_puts_every_instance_after_what_it_depends_on(names: list[str]) -> None:
    graph = side_by_side({}).compile()
    inst = Instances(graph, names)
    order = inst.order
    for name in order:
        mask = inst.ancestor_mask(name)
        ancestors = [order[i] for i in range(len(order)) if mask >> i & 1]
        assert all(order.index(a) < order.index(name) for a in ancestors)
    assert list(order).index("think#1") < list(order).index("again#1") < list(order).index("think#2")
    assert list(order).index("work[0]") < list(order).index("work[1]")


# ---------------------------------------------------------------- loops inside loops

class R(BaseModel):
    log: Annotated[list[str], append] = []
    round: int = 0
    turns: int = 0
    items: list[int] = []


def rounds(delay: Any) -> Graph:
    """round (outer loop, 3 rounds) → [think ⇄ again] (inner loop, round + 1 turns), side,
    and a map over the round's items, side by side → tally ⇢ round; end after it all.
    ``delay(instance)``: how long that instance takes."""
    g = Graph("rounds", R)

    @g.node(after=["next"], max_iterations=3)
    async def round(s: R, ctx: Any) -> dict[str, Any]:
        await asyncio.sleep(delay(ctx.node))
        return {"round": s.round + 1, "turns": 0, "items": list(range(s.round + 2)), "log": [ctx.node]}

    @g.node(after=["round", "again"], max_iterations=4)
    async def think(s: R, ctx: Any) -> dict[str, Any]:
        await asyncio.sleep(delay(ctx.node))
        return {"turns": s.turns + 1, "log": [f"{ctx.node} saw {len(s.log)}"]}

    @g.node(after=["think"], when=lambda s: s.turns <= s.round)
    async def again(s: R, ctx: Any) -> None:
        await asyncio.sleep(delay(ctx.node))

    @g.node(after=["round"])
    async def side(s: R, ctx: Any) -> dict[str, Any]:
        await asyncio.sleep(delay(ctx.node))
        return {"log": [f"{ctx.node} saw {len(s.log)}"]}

    @g.node(after=["round"], map_over="items")
    async def work(s: R, ctx: Any, item: int) -> dict[str, Any]:
        await asyncio.sleep(delay(ctx.node))
        return {"log": [f"{ctx.node}={item} saw {len(s.log)}"]}

    @g.node(after=["think", "side", "work"])
    async def tally(s: R, ctx: Any) -> dict[str, Any]:
        return {"log": [f"{ctx.node} saw {len(s.log)}"]}

    @g.node(after=["tally"], when=lambda s: s.round < 3)
    async def next(s: R) -> None:
        return None

    @g.node(after=["round"])
    async def end(s: R) -> dict[str, Any]:
        return {"log": [f"end saw {len(s.log)}"]}

    return g


async def run_rounds(delay: Any, slots: int) -> tuple[list[str], dict[str, str]]:
    rt = Runtime(store=MemoryStore(), max_concurrency=slots)
    try:
        run = await rt.start(rounds(delay), {})
        assert run.status == RunStatus.SUCCEEDED, run.error
        final = (await rt.history(run.id))[-1]
        return (await rt.state_at(final.id)).log, {n: s.value for n, s in final.node_states.items()}
    finally:
        rt.close()


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**20), slots=st.integers(1, 5))
async def test_nested_loops_end_the_same_whatever_the_timing(seed: int, slots: int) -> None:
    import zlib

    baseline = await run_rounds(lambda name: 0.0, 8)
    # round by round: side, the inner loop's turns in order, the items in order, then tally;
    # each instance saw exactly what comes before it among its ancestors
    assert baseline[0] == [
        "round", "side saw 1", "think saw 1", "think#0.1 saw 2", "work[0]=0 saw 1", "work[1]=1 saw 1",
        "tally saw 6",
        "round#1", "side#1 saw 8", "think#1.0 saw 8", "think#1.1 saw 9", "think#1.2 saw 10",
        "work#1[0]=0 saw 8", "work#1[1]=1 saw 8", "work#1[2]=2 saw 8", "tally#1 saw 15",
        "round#2", "side#2 saw 17", "think#2.0 saw 17", "think#2.1 saw 18", "think#2.2 saw 19", "think#2.3 saw 20",
        "work#2[0]=0 saw 17", "work#2[1]=1 saw 17", "work#2[2]=2 saw 17", "work#2[3]=3 saw 17", "tally#2 saw 26",
        "end saw 27"]

    def delay(name: str) -> float:
        return (zlib.crc32(f"{seed}:{name}".encode()) % 1000) / 250_000   # up to 4 ms
    assert await run_rounds(delay, slots) == baseline


@settings(max_examples=30, deadline=None)
@given(names=st.permutations(["round", "think", "again", "think#0.1", "again#0.1", "side", "work", "work[0]",
                              "tally", "next", "round#1", "think#1.0", "again#1.0", "think#1.1", "side#1",
                              "work#1", "work#1[0]", "work#1[1]", "tally#1", "end"]))
def test_canonical_order_of_nested_loops_puts_every_instance_after_what_it_depends_on(names: list[str]) -> None:
    inst = Instances(rounds(lambda name: 0.0).compile(), names)
    order = list(inst.order)
    for name in order:
        mask = inst.ancestor_mask(name)
        assert all(order.index(order[i]) < order.index(name) for i in range(len(order)) if mask >> i & 1)
    # an outer iteration's instances, the inner loop's among them, all before the next's
    assert order.index("think#0.1") < order.index("tally") < order.index("round#1") < order.index("think#1.0")
    assert order.index("think#1.0") < order.index("think#1.1") < order.index("tally#1") < order.index("end")
    # tally of round 1 folds that round's whole inner loop and every item, and nothing of round 0's
    # inner loop beyond what round#1 itself folds
    mask = inst.ancestor_mask("tally#1")
    ancestors = {order[i] for i in range(len(order)) if mask >> i & 1}
    assert {"round#1", "think#1.0", "again#1.0", "think#1.1", "side#1", "work#1", "work#1[0]", "work#1[1]"} <= ancestors
    assert "end" not in ancestors and "tally#1" not in ancestors
