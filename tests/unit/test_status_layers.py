"""A checkpoint's node statuses as its parent's with what changed over them
(``StatusLayers``): they read exactly as a copy of every status would, on any sequence
of changes, and in real runs on every store; the layers stay shallow."""

from __future__ import annotations

from typing import Annotated, Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from runtime import Graph, MemoryStore, NodeStatus, RunStatus, Runtime, append
from runtime.core.layers import FLAT_BELOW, MAX_DEPTH, StatusLayers
from runtime.core.trace import node_states_from_events
from runtime.engine.folding import StateFold
from runtime.engine.instances import Instances
from runtime.engine.recorder import Recorder

N = NodeStatus
NAMES = [f"n{i}" for i in range(12)]

#: one step: statuses set (a new name is a new instance), as the recorder sees them
steps = st.lists(st.dictionaries(st.sampled_from(NAMES), st.sampled_from(list(N)), max_size=5), max_size=60)


@settings(max_examples=200, deadline=None)
@given(first=st.dictionaries(st.sampled_from(NAMES), st.sampled_from(list(N)), min_size=1), changes=steps)
def test_layers_read_as_a_copy_of_every_status_would(first, changes):
    live = dict(first)
    below: Any = dict(live)
    made = []
    for change in changes:
        live.update(change)   # the recorder's own dict, changed in place
        layered = StatusLayers.over(below, change, live, flat_below=0)
        copy = dict(live)
        assert layered == copy and dict(layered) == copy and len(layered) == len(copy)
        assert list(layered) == list(copy) and list(layered.items()) == list(copy.items())
        for n in NAMES:
            assert (n in layered) == (n in copy)
            assert layered.get(n) == copy.get(n) and layered.get(n, N.PENDING) == copy.get(n, N.PENDING)
            if n in copy:
                assert layered[n] == copy[n]
        assert not isinstance(layered, StatusLayers) or layered.depth <= MAX_DEPTH
        made.append((layered, copy))
        below = layered
    # what later steps changed never shows through statuses made before them
    for layered, copy in made:
        assert dict(layered) == copy


class Chat(BaseModel):
    messages: Annotated[list[str], append] = []


def loop(iterations: int) -> Graph:
    g = Graph("layers-loop", Chat)

    @g.node(after=["tool"], max_iterations=iterations + 1)
    def model(s: Chat) -> dict[str, Any]:
        return {"messages": [f"model {len(s.messages)}"]}

    @g.node(after=["model"], when=lambda s: len(s.messages) < 2 * iterations - 1)
    def tool(s: Chat) -> dict[str, Any]:
        return {"messages": [f"tool {len(s.messages)}"]}

    return g


async def test_every_checkpoint_of_a_long_loop_holds_the_statuses_its_events_give(rt: Runtime) -> None:
    run = await rt.start(loop(100), {})
    assert run.status == RunStatus.SUCCEEDED
    history = await rt.history(run.id)
    # long enough to be layered (FLAT_BELOW) and for layers to be flattened again
    assert len(history) > FLAT_BELOW + 2 * MAX_DEPTH
    names = list(history[-1].node_states)
    assert len(names) == 200   # 100 model iterations, 100 tool instances (the last skipped)
    if isinstance(rt.store, MemoryStore):   # the store keeps the records as they were made
        assert sum(isinstance(cp.node_states, StatusLayers) for cp in history) > len(history) // 3
    events = await rt.events(run.id)
    for cp in history:
        replayed = node_states_from_events(names, events, cp.event_seq)
        assert {n: replayed[n] for n in cp.node_states} == dict(cp.node_states), f"checkpoint {cp.seq}"
        # instances not in the checkpoint did not exist yet: nothing happened to them
        assert all(replayed[n] == N.PENDING for n in names if n not in cp.node_states)
        assert not isinstance(cp.node_states, StatusLayers) or cp.node_states.depth <= MAX_DEPTH


async def test_a_head_with_nodes_the_statuses_lack_gives_a_flat_first_checkpoint(rt: Runtime) -> None:
    graph = loop(2).compile()
    run = await rt.start(graph, {})
    head = (await rt.history(run.id))[-1]
    statuses = {n: s for n, s in head.node_states.items() if n != "tool#1"}
    inst = Instances(graph, statuses)
    rec = Recorder(rt.store, rt.env, inst, run, head, statuses, StateFold(inst, {}, {}))
    rec.final_checkpoint()
    # the head's statuses with nothing over them would still name ``tool#1``
    assert "tool#1" not in rec.head.node_states and dict(rec.head.node_states) == statuses
