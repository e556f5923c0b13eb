"""Listing runs, on every store: filters by status, thread, graph and kind, search in
ids and thread ids (``%`` and ``_`` match themselves), and pages by offset, newest first
or, for a queue, oldest first."""

from __future__ import annotations

from typing import Any

from test_store_contract import NODES, cp, ev, make_run, store  # noqa: F401  (the fixture over every store)

from runtime.core.records import Batch, RunKind
from runtime.core.states import NodeStatus
from runtime.core.states import RunStatus
from runtime.store.base import CheckpointStore


def add_run(store: CheckpointStore, run_id: str, graph_name: str, **kw: Any) -> None:  # noqa: F811
    run = make_run(run_id, **kw).evolve(graph_name=graph_name)
    store.create_run(Batch(run_id=run_id, run=run, durable=True,
                           checkpoints=[cp(run_id, 0, dict.fromkeys(NODES, NodeStatus.PENDING), snapshot={})],
                           events=[ev(run_id, 1, "run.created")]))


def test_filters_search_and_pages(store: CheckpointStore) -> None:  # noqa: F811
    ids = []
    for i in range(12):
        run_id = f"run_{i:02d}"
        add_run(store, run_id, thread_id="t%odd" if i % 2 else "t_even",
                parent=f"run_{i - 2:02d}" if i >= 2 else None,   # each after its thread's previous run
                status=RunStatus.FAILED if i % 3 == 0 else RunStatus.SUCCEEDED,
                kind=RunKind.FORK if i % 4 == 0 else RunKind.MAIN,
                graph_name="alpha" if i < 6 else "beta")
        ids.append(run_id)
    newest = list(reversed(ids))
    assert [r.id for r in store.list_runs(limit=5)] == newest[:5]
    assert [r.id for r in store.list_runs(limit=5, offset=5)] == newest[5:10]
    assert [r.id for r in store.list_runs(limit=5, offset=10)] == newest[10:]
    assert [r.id for r in store.list_runs(graph_name="alpha")] == [f"run_{i:02d}" for i in (5, 4, 3, 2, 1, 0)]
    assert [r.id for r in store.list_runs(kind=RunKind.FORK)] == ["run_08", "run_04", "run_00"]
    assert [r.id for r in store.list_runs(RunStatus.FAILED, graph_name="beta")] == ["run_09", "run_06"]
    assert [r.id for r in store.list_runs(search="_1")] == ["run_11", "run_10"]
    assert {r.id for r in store.list_runs(search="%odd")} == {f"run_{i:02d}" for i in range(1, 12, 2)}
    assert store.list_runs(search="%") and not store.list_runs(search="x%y")
    # as given, on every store (SQLite's LIKE would ignore case)
    assert not store.list_runs(search="RUN_") and not store.list_runs(search="T%ODD")
    assert len(store.list_runs(search="t%o")) == 6
    assert [r.id for r in store.list_runs(thread_id="t_even", kind=RunKind.MAIN, limit=2, offset=1)] == \
        ["run_06", "run_02"]


def test_oldest_first_lists_in_creation_order_whatever_the_backlog(store: CheckpointStore) -> None:  # noqa: F811
    """A queue served oldest first: the first page of a backlog longer than the page is its
    oldest runs, after any filter, and pages go on from there."""
    ids = []
    for i in range(30):
        run_id = f"run_{i:02d}"   # created in this order; ids, ages and pks all agree
        add_run(store, run_id, graph_name="g", status=RunStatus.QUEUED if i % 3 else RunStatus.SUCCEEDED)
        ids.append(run_id)
    queued = [r for i, r in enumerate(ids) if i % 3]
    assert [r.id for r in store.list_runs(RunStatus.QUEUED, limit=5, oldest_first=True)] == queued[:5]
    assert [r.id for r in store.list_runs(RunStatus.QUEUED, limit=5, offset=5, oldest_first=True)] == queued[5:10]
    assert [r.id for r in store.list_runs(limit=100, oldest_first=True)] == ids
    assert [r.id for r in store.list_runs(RunStatus.QUEUED, limit=5)] == list(reversed(queued))[:5]


async def test_timeline_pages_and_event_windows(store: CheckpointStore) -> None:  # noqa: F811
    from runtime import Graph, Runtime

    g = Graph("three")
    g.add_node("a", lambda s: {"x": 1})
    g.add_node("b", lambda s: {"y": 2}, after=["a"])
    g.add_node("c", lambda s: {"z": 3}, after=["b"])
    rt = Runtime(store=store)
    run = await rt.start(g, {})
    full = store.checkpoints(run.id)
    assert len(full) >= 4
    summaries = store.checkpoint_summaries(run.id, 1, 2)
    assert [(s.id, s.seq, s.nodes, s.source, s.event_seq) for s in summaries] == \
        [(c.id, c.seq, c.nodes, c.source, c.event_seq) for c in full if 1 <= c.seq <= 2]
    assert store.checkpoint_summaries(run.id, 100, 200) == []
    events = store.events(run.id)
    assert store.events(run.id, 2, limit=3) == events[2:5]
    assert store.events(run.id, len(events), limit=5) == []


async def test_pending_writes_of_one_checkpoint(store: CheckpointStore) -> None:  # noqa: F811
    from runtime import Graph, Runtime

    g = Graph("two")
    g.add_node("a", lambda s: {"x": 1})
    g.add_node("b", lambda s: {"y": 2}, after=["a"])
    rt = Runtime(store=store)
    run = await rt.start(g, {})
    every = store.pending_writes(run.id)
    assert len(every) == 2
    for seq in {w.checkpoint_seq for w in every}:
        assert store.pending_writes(run.id, seq) == [w for w in every if w.checkpoint_seq == seq]
    assert store.pending_writes(run.id, 999) == []


def test_runs_whose_lease_expired_are_found_however_many_are_held(store: CheckpointStore) -> None:  # noqa: F811
    """``lease_expired_by``: the runs a worker may recover, found past any number of runs
    whose leases still hold; a run holding no lease counts as expired."""
    for i in range(6):
        add_run(store, f"held_{i}", graph_name="g", lease_owner="elsewhere:1:w", lease_expires_at=1_000.0 + i)
    add_run(store, "lapsed", graph_name="g", lease_owner="elsewhere:2:w", lease_expires_at=500.0)
    add_run(store, "unleased", graph_name="g")
    add_run(store, "queued", graph_name="g", status=RunStatus.QUEUED)
    found = store.list_runs(RunStatus.RUNNING, limit=10, oldest_first=True, lease_expired_by=900.0)
    assert [r.id for r in found] == ["lapsed", "unleased"]
    found = store.list_runs(RunStatus.RUNNING, limit=10, oldest_first=True, lease_expired_by=1_002.0)
    assert [r.id for r in found] == ["held_0", "held_1", "held_2", "lapsed", "unleased"]
    assert [r.id for r in store.list_runs(lease_expired_by=900.0, limit=1)] == ["queued"]
