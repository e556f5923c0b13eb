"""Shared assertions for the seed-experiment and crash tests (not a test module).

``assert_trace_consistent`` checks the "Trace ⇔ checkpoints" semantics for one run:
its event sequence numbers are gapless from 1, and every checkpoint's node states are
exactly what the node events up to that checkpoint's ``event_seq`` rebuild.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

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


async def assert_instance_trace_consistent(rt: Runtime, run_id: str) -> None:
    """``assert_trace_consistent`` for a run whose graph has loops or maps: the node
    events rebuild every checkpoint's instance states. An instance is in a checkpoint
    from when the run created it (a loop's next iteration, a map's items), pending
    until its first event, so one no event has named yet must be pending there."""
    events = await rt.events(run_id)
    seqs = [e.seq for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), f"run {run_id}: event seqs {seqs} are not 1..n in order"
    cps = await rt.history(run_id)
    assert [c.seq for c in cps] == list(range(len(cps))), f"run {run_id}: checkpoint seqs {[c.seq for c in cps]}"
    for prev, cp in pairwise(cps):
        assert cp.parent_id == prev.id and cp.event_seq >= prev.event_seq
        assert set(prev.node_states) <= set(cp.node_states), (
            f"run {run_id}: checkpoint {cp.seq} dropped instances {set(prev.node_states) - set(cp.node_states)}")
    for cp in cps:
        rebuilt = node_states_from_events(list(cp.node_states), events, upto_seq=cp.event_seq)
        assert rebuilt == dict(cp.node_states), (
            f"run {run_id} checkpoint {cp.seq} (event_seq {cp.event_seq}): node states {dict(cp.node_states)} "
            f"but the trace rebuilds {rebuilt}")
    named = {e.node for e in events if e.type.startswith("node.") and e.node is not None}
    assert named <= set(cps[-1].node_states), (
        f"run {run_id}: events name instances the last checkpoint lacks: {named - set(cps[-1].node_states)}")


async def worker_command(rt: Any, graph: Any, command: str, rest: list[str]) -> Any:
    """What a crash-test worker process does: ``start INPUT`` or ``resume RUN [ANSWER]``."""
    import json

    if command == "start":
        return await rt.start(graph, json.loads(rest[0]))
    if command == "resume":
        return await rt.resume(rest[0], json.loads(rest[1])) if len(rest) > 1 else await rt.resume(rest[0])
    raise SystemExit(f"unknown command {command!r}")
