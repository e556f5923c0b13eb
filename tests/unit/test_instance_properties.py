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
