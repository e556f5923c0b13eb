"""Shared assertions for the seed-experiment and crash tests (not a test module).

``assert_trace_consistent`` checks the "Trace ⇔ checkpoints" semantics for one run:
its event sequence numbers are gapless from 1, and every checkpoint's node states are
exactly what the node events up to that checkpoint's ``event_seq`` rebuild.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from runtime import Runtime
from runtime import ExecutableGraph
from runtime import EffectStatus, JournalEntry
from runtime.core.trace import gaps, node_states_from_events


async def assert_trace_consistent(rt: Runtime, graph: ExecutableGraph, run_id: str) -> None:
    events = await rt.events(run_id)
    assert events, f"run {run_id} has no trace events"
    seqs = [e.seq for e in events]
    assert gaps(events) == [], f"run {run_id}: missing event seqs {gaps(events)}"
    assert seqs == list(range(1, len(seqs) + 1)), f"run {run_id}: event seqs {seqs} are not 1..n in order"
    run = await rt.get_run(run_id)
    assert run.event_seq == seqs[-1], f"run {run_id}: run.event_seq={run.event_seq}, last event {seqs[-1]}"

    cps = await rt.history(run_id)
    assert cps, f"run {run_id} has no checkpoints"
    assert [c.seq for c in cps] == list(range(len(cps))), f"run {run_id}: checkpoint seqs {[c.seq for c in cps]}"
    for prev, cp in pairwise(cps):
        assert cp.parent_id == prev.id, f"run {run_id}: checkpoint {cp.seq} does not link to {prev.seq}"
        assert cp.event_seq >= prev.event_seq
    for cp in cps:
        rebuilt = node_states_from_events(graph.order, events, upto_seq=cp.event_seq)
        assert rebuilt == dict(cp.node_states), (
            f"run {run_id} checkpoint {cp.seq} (event_seq {cp.event_seq}): node states {dict(cp.node_states)} "
            f"but the trace rebuilds {rebuilt}")
    # the latest checkpoint can be rebuilt from the whole trace
    assert node_states_from_events(graph.order, events) == dict(cps[-1].node_states), (
        f"run {run_id}: the latest checkpoint's node states differ from the full trace")
    assert run.head_seq == cps[-1].seq


def effect_entries(journal: Sequence[JournalEntry], node: str, name: str) -> list[JournalEntry]:
    return [e for e in journal if e.node == node and e.name == name]


def statuses(entries: Sequence[JournalEntry]) -> list[EffectStatus]:
    return [e.status for e in entries]
