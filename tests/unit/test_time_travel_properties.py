"""Properties of forks and replays over random graphs: whatever the graph, the
checkpoint and the completion timing, an unpatched fork and a replay reproduce the
recording exactly, and nothing reaches the outside world."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Annotated, Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from test_properties import DELAY, Dag, dags

from runtime import Graph, MemoryStore, NodeContext, Runtime, add, append, merge
from runtime import ExecutableGraph
from runtime import EffectStatus
from runtime import RunStatus

SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class S(BaseModel):
    log: Annotated[list[str], append] = []
    total: Annotated[int, add] = 0
    seen: Annotated[dict[str, int], merge] = {}


class World:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.inputs: dict[str, dict[str, Any]] = {}   # per node: the state it was last given


def build(dag: Dag, world: World, delays: Mapping[str, float]) -> ExecutableGraph:
    g = Graph("tt", S)
    for name in dag.names:
        g.add_node(name, make_node(name, world, delays[name]), after=dag.deps[name])
    return g.compile()


def make_node(name: str, world: World, delay: float):
    async def node(state: S, ctx: NodeContext) -> dict:
        world.inputs[name] = state.model_dump()
        await asyncio.sleep(delay)
        # the request depends on the node's input: a node fed a different state asks differently
        got = await ctx.effect("tool", lambda: world.calls.append(name) or f"{name}:{len(state.log)}",
                               request={"node": name, "log": state.log, "total": state.total})
        return {"log": [got], "total": len(name), "seen": {name: state.total}}

    return node


async def scenario(dag: Dag, delays: Mapping[str, float], cut: int) -> None:
    world = World()
    graph = build(dag, world, delays)
    rt = Runtime(MemoryStore(), max_concurrency=3)
    try:
        run = await rt.start(graph, {})
        assert run.status == RunStatus.SUCCEEDED
        recorded_inputs = dict(world.inputs)
        calls = list(world.calls)
        history = await rt.history(run.id)
        final = (await rt.state_at(history[-1].id)).model_dump()
        base = history[min(cut, len(history) - 1)]
        world.inputs.clear()

        branch = await rt.fork(base.id)
        assert branch.status == RunStatus.SUCCEEDED, branch.error
        assert world.calls == calls                       # no effect executed
        assert (await rt.state_at((await rt.history(branch.id))[-1].id)).model_dump() == final
        finished = {n for n, s in base.node_states.items() if s.value == "succeeded"}
        assert set(world.inputs) == set(dag.names) - finished   # finished nodes were not re-run
        for node, given in world.inputs.items():                  # each saw exactly what it saw before
            assert given == recorded_inputs[node], node
        assert all(e.status == EffectStatus.MOCKED for e in rt.store.journal([branch.id]))

        report = await rt.replay(run.id)
        assert report.same, report.to_json()
        assert world.calls == calls
        report = await rt.replay(base.id)
        assert report.same, report.to_json()
    finally:
        rt.close()


@SETTINGS
@given(dag=dags(max_nodes=9), data=st.data())
def test_unpatched_fork_and_replay_reproduce_the_recording_without_effects(dag: Dag, data: st.DataObject):
    delays = data.draw(st.fixed_dictionaries({n: DELAY for n in dag.names}), label="delays")
    cut = data.draw(st.integers(0, len(dag.names) + 1), label="checkpoint")
    asyncio.run(asyncio.wait_for(scenario(dag, delays, cut), 30))
