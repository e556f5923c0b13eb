"""The CheckpointStore contract, run identically against every store.

Every test takes the parametrized ``store`` fixture, so a behaviour is written
once and checked on MemoryStore and on SqlStore over a real SQLite file and a
PostgreSQL database. Tests about a SQL database itself (durability across
instances, the schema version table) take ``open_sql`` (built on ``sql_url``)
instead. To add a backend, add one entry to ``SQL_URLS``: the ``store`` fixture
and the SQL-only tests pick it up.

Records are built directly (they are frozen dataclasses); the last tests drive
a small graph through the Runtime and check both stores give the same history.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Annotated, Any

import pytest
from pydantic import BaseModel
from sqlalchemy import create_engine, text

from runtime import Graph, NodeContext, Runtime, append
from runtime.errors import InvalidRequest, LeaseLost, NotFound
from runtime.records import (
    Batch,
    Checkpoint,
    EffectStatus,
    EventType,
    Interrupt,
    InterruptKind,
    InterruptStatus,
    JournalEntry,
    NodeAttempt,
    PendingWrite,
    Run,
    RunKind,
    SentAnswer,
    TraceEvent,
    WriteKind,
)
from runtime.core.states import NodeStatus, RunStatus
from runtime.store.base import CheckpointStore
from runtime.store.memory import MemoryStore
from runtime.store.sql.schema import SCHEMA_VERSION
from runtime.store.sql import SqlStore

# --------------------------------------------------------------------------- backends

#: SQL databases to run the contract on: name -> function of the test's fixture request
#: giving the URL of an empty database for that test. PostgreSQL's is a new database
#: (``pg_url``, ``tests/conftest.py``); its tests skip, saying why, without the server.
SQL_URLS: dict[str, Callable[[pytest.FixtureRequest], str]] = {
    "sqlite": lambda request: f"sqlite:///{request.getfixturevalue('tmp_path') / 'contract.db'}",
    "postgres": lambda request: request.getfixturevalue("pg_url"),
}

#: every store the contract holds for: name (the test id) -> factory(request). The SQL
#: stores open the databases of ``SQL_URLS``, except that PostgreSQL's ``store`` is the
#: session's database emptied for the test (``pg_empty_url``): a new one costs ~0.5 s.
STORE_FACTORIES: dict[str, Callable[[pytest.FixtureRequest], CheckpointStore]] = {
    "memory": lambda request: MemoryStore(),
    **{name: (lambda request, url=url: SqlStore(url(request))) for name, url in SQL_URLS.items()},
    "postgres": lambda request: SqlStore(request.getfixturevalue("pg_empty_url")),
}


@pytest.fixture(params=list(STORE_FACTORIES), ids=list(STORE_FACTORIES))
def store(request: pytest.FixtureRequest) -> Iterator[CheckpointStore]:
    s = STORE_FACTORIES[request.param](request)
    yield s
    s.close()


@pytest.fixture(params=list(SQL_URLS), ids=list(SQL_URLS))
def sql_url(request: pytest.FixtureRequest) -> str:
    return SQL_URLS[request.param](request)


@pytest.fixture
def open_sql(sql_url: str) -> Iterator[Callable[[], SqlStore]]:
    """Open (another) SqlStore instance on the test's database; all are closed at the end."""
    opened: list[SqlStore] = []

    def open_() -> SqlStore:
        s = SqlStore(sql_url)
        opened.append(s)
        return s

    yield open_
    for s in opened:
        s.close()


# --------------------------------------------------------------------------- record builders

T0 = 1_700_000_000.0
NODES = ("n0", "n1", "n2", "n3", "n4", "n5")


def make_run(run_id: str, *, thread_id: str | None = None, status: RunStatus = RunStatus.RUNNING,
             kind: RunKind = RunKind.MAIN, parent: str | None = None, at: float = T0,
             fence: int = 1, **changes: Any) -> Run:
    return Run(id=run_id, thread_id=thread_id or run_id, graph_name="g", graph_version="v1",
               status=status, kind=kind, input={"q": run_id, "n": 1}, created_at=at, updated_at=at,
               parent_run_id=parent, fence=fence, **changes)


def add_run(store: CheckpointStore, run_id: str, **kw: Any) -> Run:
    """Create a run with its seq-0 checkpoint and its first event, as the Runtime does."""
    run = make_run(run_id, **kw)
    store.create_run(Batch(run_id=run_id, run=run, durable=True,
                           checkpoints=[cp(run_id, 0, dict.fromkeys(NODES, NodeStatus.PENDING),
                                           snapshot={"q": run_id}, source="input")],
                           events=[ev(run_id, 1, "run.created")]))
    return run


def cp(run_id: str, seq: int, states: dict[str, NodeStatus], *, snapshot: dict | None = None,
       source: str = "step", nodes: Sequence[str] = ()) -> Checkpoint:
    return Checkpoint(id=f"{run_id}-cp{seq}", run_id=run_id, seq=seq,
                      parent_id=f"{run_id}-cp{seq - 1}" if seq else None, nodes=tuple(nodes),
                      node_states=dict(states), event_seq=seq, created_at=T0 + seq, source=source,
                      snapshot=snapshot)


def pw(run_id: str, node: str, value: Any, *, kind: WriteKind = WriteKind.WRITES, attempt: int = 1,
       seq: int = 0) -> PendingWrite:
    return PendingWrite(run_id, seq, node, attempt, kind, value, T0 + attempt)


def att(run_id: str, node: str, attempt: int = 1, status: NodeStatus = NodeStatus.SUCCEEDED,
        **kw: Any) -> NodeAttempt:
    return NodeAttempt(run_id, node, attempt, status, T0, T0 + 1, **kw)


def je(run_id: str, node: str, occurrence: int, status: EffectStatus = EffectStatus.STARTED,
       **kw: Any) -> JournalEntry:
    return JournalEntry(run_id, node, "pay", occurrence, 1, f"key-{run_id}-{node}-{occurrence}", status,
                        {"amount": 10 + occurrence}, at=T0 + occurrence, **kw)


def intr(run_id: str, iid: str, *, status: InterruptStatus = InterruptStatus.PENDING, at: float = T0,
         answer: Any = None, answered_at: float | None = None, node: str = "n1") -> Interrupt:
    return Interrupt(iid, run_id, node, "0", InterruptKind.USER, {"question": f"ok {iid}?"}, status, at,
                     response_schema={"type": "object"}, answer=answer, answered_at=answered_at)


def ev(run_id: str, seq: int, type_: str = "node.start", **data: Any) -> TraceEvent:
    return TraceEvent(run_id, seq, T0 + seq, type_, node="n0" if type_.startswith("node") else None,
                      attempt=1 if type_.startswith("node") else None, data=data)


def everything(store: CheckpointStore, run_ids: Sequence[str]) -> dict[str, Any]:
    """Every read the contract offers, for comparing a store before and after."""
    out: dict[str, Any] = {"list_runs": store.list_runs(), "interrupts": store.interrupts()}
    for rid in run_ids:
        cps = store.checkpoints(rid)
        out[rid] = {
            "run": store.get_run(rid), "children": store.child_runs(rid), "checkpoints": cps,
            "by_id": [store.get_checkpoint(c.id) for c in cps], "writes": store.pending_writes(rid),
            "node_writes": store.node_writes([rid]), "attempts": store.node_attempts(rid),
            "journal": store.journal([rid]), "interrupts": store.interrupts(rid),
            "events": store.events(rid), "cancel": store.cancel_request(rid),
        }
    return out


def states_at(step: int) -> dict[str, NodeStatus]:
    """Node states that change over time: a few nodes move at each step, some steps none."""
    cycle = (NodeStatus.PENDING, NodeStatus.RUNNING, NodeStatus.RETRYING, NodeStatus.RUNNING,
             NodeStatus.INTERRUPTED, NodeStatus.RUNNING, NodeStatus.SUCCEEDED)
    out = {}
    for i, n in enumerate(NODES):
        moves = max(0, (step - i) // (i + 1)) if step % 5 != 4 else max(0, (step - 1 - i) // (i + 1))
        out[n] = cycle[min(moves, len(cycle) - 1)]
    return out


# --------------------------------------------------------------------------- the protocol


def test_store_implements_checkpoint_store_protocol(store: CheckpointStore) -> None:
    assert isinstance(store, CheckpointStore)
    assert store.durable is (not isinstance(store, MemoryStore))


# --------------------------------------------------------------------------- runs


def test_create_run_then_get_run_returns_equal_run(store: CheckpointStore) -> None:
    run = make_run("r1", thread_id="t1", status=RunStatus.QUEUED, kind=RunKind.FORK, parent="r0",
                   base_checkpoint_id="r0-cp3", error={"class": "transient", "message": "boom"},
                   limits={"max_steps": 5, "deadline_at": T0 + 60}, usage={"tokens": 3, "cost": 0.5},
                   max_concurrency=3, head_seq=2, event_seq=7, fence=4, lease_owner="host:1:abc",
                   lease_expires_at=T0 + 30)
    store.create_run(Batch(run_id="r1", run=run))
    assert store.get_run("r1") == run


def test_create_run_writes_the_rest_of_its_batch(store: CheckpointStore) -> None:
    run = add_run(store, "r1")
    assert store.checkpoints("r1") == [cp("r1", 0, dict.fromkeys(NODES, NodeStatus.PENDING),
                                          snapshot={"q": "r1"}, source="input")]
    assert store.events("r1") == [ev("r1", 1, "run.created")]
    assert store.get_run("r1") == run


def test_create_run_with_duplicate_id_is_rejected_and_changes_nothing(store: CheckpointStore) -> None:
    add_run(store, "r1")
    before = everything(store, ["r1"])
    again = make_run("r1", status=RunStatus.QUEUED, thread_id="other")
    with pytest.raises(InvalidRequest):
        store.create_run(Batch(run_id="r1", run=again, checkpoints=[cp("r1", 1, {"n0": NodeStatus.RUNNING})],
                               events=[ev("r1", 2)]))
    assert everything(store, ["r1"]) == before


def test_create_run_without_a_run_is_rejected(store: CheckpointStore) -> None:
    with pytest.raises(InvalidRequest):
        store.create_run(Batch(run_id="r1"))
    assert store.list_runs() == []


def test_get_run_of_unknown_id_raises_not_found(store: CheckpointStore) -> None:
    add_run(store, "r1")
    with pytest.raises(NotFound):
        store.get_run("nope")


def test_list_runs_returns_newest_first(store: CheckpointStore) -> None:
    for i in range(5):
        add_run(store, f"r{i}", at=T0 + i)
    assert [r.id for r in store.list_runs()] == ["r4", "r3", "r2", "r1", "r0"]


def test_list_runs_filters_by_status(store: CheckpointStore) -> None:
    statuses = [RunStatus.RUNNING, RunStatus.SUCCEEDED, RunStatus.RUNNING, RunStatus.FAILED, RunStatus.RUNNING]
    for i, s in enumerate(statuses):
        add_run(store, f"r{i}", status=s, at=T0 + i)
    assert [r.id for r in store.list_runs(status=RunStatus.RUNNING)] == ["r4", "r2", "r0"]
    assert [r.id for r in store.list_runs(status=RunStatus.FAILED)] == ["r3"]
    assert store.list_runs(status=RunStatus.QUEUED) == []


def test_list_runs_sees_status_changed_by_commit(store: CheckpointStore) -> None:
    run = add_run(store, "r1")
    store.commit(Batch(run_id="r1", fence=1, run=run.evolve(status=RunStatus.SUCCEEDED, updated_at=T0 + 9)))
    assert store.list_runs(status=RunStatus.RUNNING) == []
    assert store.list_runs(status=RunStatus.SUCCEEDED) == [store.get_run("r1")]


def test_every_status_a_commit_carries_is_stored_whatever_came_before(store: CheckpointStore) -> None:
    """Commits of a running run leave its status as it is; one that changes it (pausing,
    running again, a lease taken by another owner, the end) is always stored."""
    run = add_run(store, "r1")
    steps = [(1, RunStatus.RUNNING), (1, RunStatus.RUNNING), (1, RunStatus.INTERRUPTED), (1, RunStatus.RUNNING),
             (1, RunStatus.RUNNING), (2, RunStatus.RUNNING), (2, RunStatus.INTERRUPTED), (2, RunStatus.INTERRUPTED),
             (2, RunStatus.RUNNING), (2, RunStatus.FAILED)]
    for i, (fence, status) in enumerate(steps):
        if fence != store.get_run("r1").fence:
            store.acquire_lease("r1", "owner2", T0 + 60, fence - 1)
        run = run.evolve(status=status, fence=fence, event_seq=i + 1, updated_at=T0 + i)
        store.commit(Batch(run_id="r1", fence=fence, run=run))
        stored = store.get_run("r1")
        assert (stored.status, stored.event_seq) == (status, i + 1), f"after commit {i}"
        assert [r.id for r in store.list_runs(status=status)] == ["r1"], f"after commit {i}"


def test_list_runs_filters_by_thread_id(store: CheckpointStore) -> None:
    for i in range(6):   # each after the previous run of its thread, as turns are
        add_run(store, f"r{i}", thread_id=f"t{i % 2}", parent=f"r{i - 2}" if i >= 2 else None,
                status=RunStatus.RUNNING if i < 4 else RunStatus.FAILED)
    assert [r.id for r in store.list_runs(thread_id="t0")] == ["r4", "r2", "r0"]
    assert [r.id for r in store.list_runs(thread_id="t1", status=RunStatus.RUNNING)] == ["r3", "r1"]
    assert store.list_runs(thread_id="t9") == []


def test_list_runs_respects_limit(store: CheckpointStore) -> None:
    for i in range(6):
        add_run(store, f"r{i}", thread_id=f"t{i % 2}", parent=f"r{i - 2}" if i >= 2 else None)
    assert [r.id for r in store.list_runs(limit=2)] == ["r5", "r4"]
    assert [r.id for r in store.list_runs(thread_id="t0", limit=2)] == ["r4", "r2"]
    assert len(store.list_runs(limit=100)) == 6


def test_child_runs_returns_children_oldest_first(store: CheckpointStore) -> None:
    add_run(store, "p")
    add_run(store, "c1", parent="p", kind=RunKind.CONTINUATION, at=T0 + 1)
    add_run(store, "other")
    add_run(store, "c2", parent="p", kind=RunKind.FORK, at=T0 + 2)
    add_run(store, "grandchild", parent="c1", kind=RunKind.CONTINUATION, at=T0 + 3)
    add_run(store, "c3", parent="p", kind=RunKind.REPLAY, at=T0 + 4)
    assert [r.id for r in store.child_runs("p")] == ["c1", "c2", "c3"]
    assert [r.id for r in store.child_runs("c1")] == ["grandchild"]
    assert store.child_runs("other") == []
    assert store.child_runs("p")[1] == store.get_run("c2")


# --------------------------------------------------------------------------- commit


def test_commit_writes_every_part_of_a_batch(store: CheckpointStore) -> None:
    run = add_run(store, "r1")
    states = {**dict.fromkeys(NODES, NodeStatus.PENDING), "n0": NodeStatus.SUCCEEDED}
    new_run = run.evolve(head_seq=1, event_seq=3, usage={"tokens": 5}, updated_at=T0 + 5)
    batch = Batch(run_id="r1", fence=1, run=new_run,
                  checkpoints=[cp("r1", 1, states, nodes=["n0"])],
                  writes=[pw("r1", "n0", {"x": 1})],
                  attempts=[att("r1", "n0", decision="succeeded")],
                  effects=[je("r1", "n0", 0), je("r1", "n0", 0, EffectStatus.SUCCEEDED, result={"ok": True})],
                  interrupts=[intr("r1", "i1")],
                  events=[ev("r1", 2), ev("r1", 3, "node.succeed", status="succeeded")], durable=True)
    store.commit(batch)
    assert store.get_run("r1") == new_run
    assert store.checkpoints("r1")[1:] == batch.checkpoints
    assert store.pending_writes("r1") == batch.writes
    assert store.node_attempts("r1") == batch.attempts
    assert store.journal(["r1"]) == batch.effects
    assert store.interrupts("r1") == batch.interrupts
    assert store.events("r1") == [ev("r1", 1, "run.created"), *batch.events]


def test_commit_to_unknown_run_raises_not_found(store: CheckpointStore) -> None:
    add_run(store, "r1")
    with pytest.raises(NotFound):
        store.commit(Batch(run_id="nope", fence=1, events=[ev("nope", 1)]))


def test_checkpoints_are_oldest_first_with_full_node_states(store: CheckpointStore) -> None:
    add_run(store, "r1")
    expected = store.checkpoints("r1")
    snapshots = {5, 6, 13}
    seq = 1
    for size in (1, 3, 1, 2, 4, 1, 1, 5, 2):  # several checkpoints per batch, some batches of one
        batch = Batch(run_id="r1", fence=1)
        for _ in range(size):
            batch.checkpoints.append(cp("r1", seq, states_at(seq), nodes=[NODES[seq % 6]],
                                        snapshot={"seq": seq} if seq in snapshots else None))
            seq += 1
        store.commit(batch)
        expected += batch.checkpoints
    got = store.checkpoints("r1")
    assert [c.seq for c in got] == list(range(seq))
    assert [dict(c.node_states) for c in got] == [dict(c.node_states) for c in expected]
    assert got == expected


def test_get_checkpoint_gives_the_same_full_node_states_as_checkpoints(store: CheckpointStore) -> None:
    add_run(store, "r1")
    for seq in range(1, 21):
        store.commit(Batch(run_id="r1", fence=1, checkpoints=[
            cp("r1", seq, states_at(seq), snapshot={"s": seq} if seq % 7 == 0 else None)]))
    listed = store.checkpoints("r1")
    assert len(listed) == 21
    for c in listed:
        assert store.get_checkpoint(c.id) == c
        assert store.get_checkpoint(c.id).node_states == states_at(c.seq)


def test_checkpoints_of_interleaved_runs_keep_their_own_node_states(store: CheckpointStore) -> None:
    add_run(store, "a")
    add_run(store, "b")
    for seq in range(1, 10):
        store.commit(Batch(run_id="a", fence=1, checkpoints=[cp("a", seq, states_at(seq))]))
        store.commit(Batch(run_id="b", fence=1, checkpoints=[cp("b", seq, states_at(9 - seq))]))
    assert [c.node_states for c in store.checkpoints("a")][1:] == [states_at(s) for s in range(1, 10)]
    assert [c.node_states for c in store.checkpoints("b")][1:] == [states_at(9 - s) for s in range(1, 10)]
    assert store.get_checkpoint("b-cp4").node_states == states_at(5)


def test_checkpoints_stay_full_after_the_lease_changes_hands(store: CheckpointStore) -> None:
    add_run(store, "r1")
    fence = 1
    for seq in range(1, 12):
        if seq % 4 == 0:
            fence = store.acquire_lease("r1", f"owner{seq}", T0 + seq, fence).fence
        store.commit(Batch(run_id="r1", fence=fence, checkpoints=[cp("r1", seq, states_at(seq))]))
    got = store.checkpoints("r1")
    assert [c.node_states for c in got][1:] == [states_at(s) for s in range(1, 12)]
    assert [store.get_checkpoint(c.id) for c in got] == got


def test_checkpoints_stay_full_across_pauses_and_ends(store: CheckpointStore) -> None:
    """A batch that pauses or ends a run, then more checkpoints (a resume, a continuation of
    the same run): each checkpoint still reads back with every status."""
    add_run(store, "r1")
    run = store.get_run("r1")
    for seq in range(1, 10):
        status = RunStatus.INTERRUPTED if seq % 3 == 0 else RunStatus.RUNNING
        run = replace(run, status=status, head_seq=seq)
        store.commit(Batch(run_id="r1", fence=1, run=run, checkpoints=[cp("r1", seq, states_at(seq))]))
    got = store.checkpoints("r1")
    assert [c.node_states for c in got][1:] == [states_at(s) for s in range(1, 10)]


def test_a_sql_store_keeps_nothing_per_ended_run(open_sql: Callable[[], SqlStore]) -> None:
    """A long-lived process writes ever more runs: once a run has ended (or paused), the
    store keeps none of its node statuses in memory, and only a bounded number of run keys."""
    store = open_sql()
    store._reader.pks.limit = 5   # type: ignore[attr-defined]
    for i in range(12):
        run_id = f"r{i}"
        add_run(store, run_id)
        run = store.get_run(run_id)
        for seq in range(1, 4):
            run = replace(run, status=RunStatus.SUCCEEDED if seq == 3 else RunStatus.RUNNING, head_seq=seq)
            store.commit(Batch(run_id=run_id, fence=1, run=run, checkpoints=[cp(run_id, seq, states_at(seq))]))
        assert store._writer._last_states == {}   # type: ignore[attr-defined]
    assert len(store._reader.pks) <= 5   # type: ignore[attr-defined]
    # what was let go is read again when asked
    assert [c.node_states for c in store.checkpoints("r0")][1:] == [states_at(s) for s in range(1, 4)]
    assert store.get_run("r0").status == RunStatus.SUCCEEDED


def test_get_checkpoint_of_unknown_id_raises_not_found(store: CheckpointStore) -> None:
    add_run(store, "r1")
    with pytest.raises(NotFound):
        store.get_checkpoint("nope")


def test_pending_writes_are_returned_in_the_order_recorded(store: CheckpointStore) -> None:
    add_run(store, "r1")
    add_run(store, "r2")
    first = [pw("r1", "n2", {"v": 1}), pw("r1", "n0", None, kind=WriteKind.ERROR)]
    second = [pw("r1", "n0", {"v": [1, 2]}, attempt=2, seq=1),
              pw("r1", "n1", {"question": "?"}, kind=WriteKind.INTERRUPT, seq=1)]
    store.commit(Batch(run_id="r1", fence=1, writes=first))
    store.commit(Batch(run_id="r2", fence=1, writes=[pw("r2", "n0", {"other": True})]))
    store.commit(Batch(run_id="r1", fence=1, writes=second))
    assert store.pending_writes("r1") == first + second
    assert store.pending_writes("r2") == [pw("r2", "n0", {"other": True})]


def test_pending_writes_of_some_nodes_are_theirs_in_the_order_recorded(store: CheckpointStore) -> None:
    add_run(store, "r1")
    add_run(store, "r2")
    names = ["n2", "n0", "work[1]", "n0", "work[10]", "n1", "work[1]", "n2"]
    first = [pw("r1", n, {"i": i}, attempt=1 + i // 2, seq=i // 3) for i, n in enumerate(names)]
    store.commit(Batch(run_id="r1", fence=1, writes=first[:5]))
    store.commit(Batch(run_id="r2", fence=1, writes=[pw("r2", "n0", {"other": True})]))
    store.commit(Batch(run_id="r1", fence=1, writes=first[5:]))
    every = store.pending_writes("r1")
    for nodes in (["n0"], {"n2", "work[1]"}, ("work[10]", "n0", "n0"), ["work"], ["nope"], []):
        assert store.pending_writes("r1", nodes=nodes) == [w for w in every if w.node in nodes], nodes
    assert store.pending_writes("r1", 1, nodes=["n0", "n1"]) == [first[3], first[5]]
    assert store.pending_writes("r2", nodes=["n0", "n2"]) == [pw("r2", "n0", {"other": True})]
    # more names than one SQL statement is given: still every write of theirs, in the order recorded
    items = [f"item[{i}]" for i in range(1203)]
    many = [pw("r1", n, i, seq=2) for i, n in enumerate(reversed(items))]
    store.commit(Batch(run_id="r1", fence=1, writes=many))
    assert store.pending_writes("r1", nodes=["n1", *items]) == [first[5], *many]
    assert store.pending_writes("r1", nodes=items[::2]) == many[::2]


def test_node_attempts_are_returned_in_the_order_recorded(store: CheckpointStore) -> None:
    add_run(store, "r1")
    attempts = [att("r1", "n0", 1, NodeStatus.RETRYING, error_class="transient", error="flaky",
                    decision="retry in 0.1s"),
                att("r1", "n1", 1), att("r1", "n0", 2), att("r1", "n2", 1, NodeStatus.FAILED,
                                                             error_class="semantic", error="bad")]
    store.commit(Batch(run_id="r1", fence=1, attempts=attempts[:2]))
    store.commit(Batch(run_id="r1", fence=1, attempts=attempts[2:]))
    assert store.node_attempts("r1") == attempts


@pytest.mark.parametrize("n", [1, 2, 5, 21, 87, 150])
def test_a_batch_of_many_rows_reads_back_whole_and_in_order(store: CheckpointStore, n: int) -> None:
    add_run(store, "r1")
    last = store.checkpoints("r1")[0]
    checkpoints = []
    for seq in range(1, n + 1):
        last = Checkpoint(id=f"r1-cp{seq}", run_id="r1", seq=seq, parent_id=last.id, nodes=(NODES[seq % 6],),
                          node_states=states_at(seq), event_seq=seq, created_at=T0 + seq,
                          snapshot={"seq": seq} if seq % 7 == 0 else None)
        checkpoints.append(last)
    # nodes and times out of order: only the order of recording may decide the order read
    writes = [pw("r1", NODES[i * 5 % 6], {"i": i} if i % 3 else None, attempt=n - i) for i in range(n)]
    attempts = [att("r1", NODES[i % 6], n - i, NodeStatus.FAILED if i % 4 else NodeStatus.SUCCEEDED,
                    **({"error_class": "x", "error": f"e{i}"} if i % 4 else {})) for i in range(n)]
    events = [TraceEvent("r1", 2 + i, T0 - i, "node.end", node=NODES[i % 6] if i % 5 else None,
                         attempt=i if i % 5 else None, data={"i": i} if i % 2 else {}) for i in range(n)]
    store.commit(Batch(run_id="r1", fence=1, checkpoints=checkpoints, writes=writes, attempts=attempts,
                       events=events))
    found = store.checkpoints("r1")[1:]
    assert [(c.id, c.parent_id, c.nodes, c.node_states, c.snapshot) for c in found] == [
        (c.id, c.parent_id, c.nodes, c.node_states, c.snapshot) for c in checkpoints]
    assert store.pending_writes("r1") == writes
    assert store.node_attempts("r1") == attempts
    assert store.events("r1", after_seq=1) == events


def test_journal_returns_entries_of_the_given_runs_in_order(store: CheckpointStore) -> None:
    add_run(store, "a")
    add_run(store, "b", parent="a", kind=RunKind.CONTINUATION)
    add_run(store, "c")
    a1 = [je("a", "n0", 0), je("a", "n0", 0, EffectStatus.SUCCEEDED, result="r0")]
    b1 = [je("b", "n1", 0), je("b", "n1", 0, EffectStatus.FAILED, error="declined")]
    a2 = [je("a", "n0", 1)]
    b2 = [je("b", "n1", 1, EffectStatus.MOCKED, result="served", source="a")]
    store.commit(Batch(run_id="a", fence=1, effects=a1))
    store.commit(Batch(run_id="b", fence=1, effects=b1))
    store.commit(Batch(run_id="c", fence=1, effects=[je("c", "n0", 0)]))
    store.commit(Batch(run_id="a", fence=1, effects=a2))
    store.commit(Batch(run_id="b", fence=1, effects=b2))
    assert store.journal(["a"]) == a1 + a2
    assert store.journal(["b", "a"]) == b1 + b2 + a1 + a2
    assert store.journal(["a", "b"]) == a1 + a2 + b1 + b2
    assert store.journal([]) == []


def test_interrupt_is_answered_by_a_second_batch_with_the_same_id(store: CheckpointStore) -> None:
    add_run(store, "r1")
    asked = intr("r1", "i1")
    store.commit(Batch(run_id="r1", fence=1, interrupts=[asked]))
    assert store.interrupts("r1") == [asked]
    answered = intr("r1", "i1", status=InterruptStatus.ANSWERED, answer={"approve": True},
                    answered_at=T0 + 10)
    store.commit(Batch(run_id="r1", fence=1, interrupts=[answered]))
    assert store.interrupts("r1") == [answered]
    assert store.interrupts("r1", InterruptStatus.PENDING) == []
    assert store.interrupts("r1", InterruptStatus.ANSWERED) == [answered]
    assert store.interrupt("i1") == answered   # by id: the latest version of it


def test_one_interrupt_by_id_whatever_its_run_and_status(store: CheckpointStore) -> None:
    add_run(store, "a")
    add_run(store, "b")
    a_pending = intr("a", "ia1", at=T0 + 1)
    b_answered = intr("b", "ib1", at=T0 + 2, status=InterruptStatus.ANSWERED, answer=[1, None], answered_at=T0 + 3)
    store.commit(Batch(run_id="a", fence=1, interrupts=[a_pending]))
    store.commit(Batch(run_id="b", fence=1, interrupts=[b_answered]))
    assert store.interrupt("ia1") == a_pending
    assert store.interrupt("ib1") == b_answered
    for missing in ("nope", "", "ia", "IA1"):
        with pytest.raises(NotFound, match="no interrupt"):
            store.interrupt(missing)


def test_interrupts_filter_by_run_and_status(store: CheckpointStore) -> None:
    add_run(store, "a")
    add_run(store, "b")
    a_pending = intr("a", "ia1", at=T0 + 1)
    a_answered = intr("a", "ia2", at=T0 + 2, status=InterruptStatus.ANSWERED, answer=1, answered_at=T0 + 3)
    b_pending = intr("b", "ib1", at=T0 + 1.5)
    b_cancelled = intr("b", "ib2", at=T0 + 4, status=InterruptStatus.CANCELLED)
    store.commit(Batch(run_id="a", fence=1, interrupts=[a_answered, a_pending]))
    store.commit(Batch(run_id="b", fence=1, interrupts=[b_cancelled, b_pending]))
    assert store.interrupts() == [a_pending, b_pending, a_answered, b_cancelled]  # by creation time
    assert store.interrupts("a") == [a_pending, a_answered]
    assert store.interrupts("b", InterruptStatus.PENDING) == [b_pending]
    assert store.interrupts(status=InterruptStatus.PENDING) == [a_pending, b_pending]
    assert store.interrupts(status=InterruptStatus.CANCELLED) == [b_cancelled]
    assert store.interrupts("a", InterruptStatus.CANCELLED) == []
    assert store.interrupts("nope") == []


def test_interrupts_asked_at_the_same_time_are_ordered_by_id_in_code_point_order(store: CheckpointStore) -> None:
    """"B" sorts before "a" by code point, as in Python, whatever order the database's own
    collation would give (the shared PostgreSQL test database sorts "a" first)."""
    add_run(store, "r1")
    asked = [intr("r1", iid) for iid in ("a1", "B2", "_c", "b0", "A9")]
    store.commit(Batch(run_id="r1", fence=1, interrupts=asked))
    assert [i.id for i in store.interrupts("r1")] == sorted(i.id for i in asked)


def test_event_types_come_back_as_the_kernel_recorded_them(store: CheckpointStore) -> None:
    """An EventType on every store (``.value`` works whichever store a program runs on)."""
    add_run(store, "r1")
    store.commit(Batch(run_id="r1", fence=1, events=[ev("r1", 2, EventType.NODE_START)]))
    types = [e.type for e in store.events("r1")]
    assert types == [EventType.RUN_CREATED, EventType.NODE_START]
    assert all(isinstance(t, EventType) for t in types) and types[1].value == "node.start"


def test_events_after_seq(store: CheckpointStore) -> None:
    add_run(store, "r1")
    add_run(store, "r2")
    events = [ev("r1", s, "node.start" if s % 2 else "checkpoint", n=s) for s in range(2, 9)]
    store.commit(Batch(run_id="r1", fence=1, events=events[:3]))
    store.commit(Batch(run_id="r2", fence=1, events=[ev("r2", 2)]))
    store.commit(Batch(run_id="r1", fence=1, events=events[3:]))
    assert store.events("r1") == [ev("r1", 1, "run.created"), *events]
    assert store.events("r1", after_seq=0) == store.events("r1")
    assert store.events("r1", after_seq=4) == events[3:]
    assert store.events("r1", after_seq=8) == []
    assert [e.seq for e in store.events("r2")] == [1, 2]
    assert store.events("r1", after_seq=2, limit=3) == events[1:4]
    assert store.events("r1", after_seq=7, limit=3) == events[6:]


def test_checkpoints_read_a_page_as_the_whole_history_has_it(store: CheckpointStore) -> None:
    """A page from any seq: the same checkpoints, node states and ``changed`` as the whole
    history, pages after a change of lease (a full row mid-run) included."""
    add_run(store, "r1")
    fence = 1
    for seq in range(1, 15):
        if seq == 9:
            fence = store.acquire_lease("r1", "other", T0 + seq, fence).fence
        store.commit(Batch(run_id="r1", fence=fence, checkpoints=[cp("r1", seq, states_at(seq))]))
    every = store.checkpoints("r1")
    for first in range(0, 16):
        for limit in (1, 4, None):
            page = store.checkpoints("r1", first, limit)
            assert page == every[first:None if limit is None else first + limit]
            assert [c.changed for c in page] == [c.changed for c in every[first:first + len(page)]]
    assert store.checkpoints("r1", 100, 5) == []


def test_checkpoints_of_a_wide_run_read_as_each_one_alone(store: CheckpointStore) -> None:
    """A map's many instances over many checkpoints (statuses layered over the ones before,
    flat again every few layers, in the SQL store): every checkpoint, whole or in a page,
    has the statuses ``get_checkpoint`` rebuilds for it alone, in its order, and the same
    ``changed``; new instances come after the old ones."""
    add_run(store, "w")
    items = [f"work[{i}]" for i in range(300)]
    states: dict[str, NodeStatus] = dict.fromkeys(NODES, NodeStatus.PENDING)
    for seq in range(1, 60):
        if seq == 2:
            states.update(dict.fromkeys(items, NodeStatus.PENDING))   # the map spawns its items
        for i in range(8 * (seq - 3), 8 * (seq - 2)) if seq >= 3 else ():
            states[items[i % 300]] = NodeStatus.SUCCEEDED if i < 300 else NodeStatus.FAILED
        store.commit(Batch(run_id="w", fence=1, checkpoints=[cp("w", seq, dict(states))]))
    every = store.checkpoints("w")
    assert len(every) == 60
    for c in every:
        alone = store.get_checkpoint(c.id)
        assert dict(c.node_states) == dict(alone.node_states) and list(c.node_states) == list(alone.node_states)
    assert list(every[-1].node_states) == [*NODES, *items]
    for first in (1, 17, 40):
        page = store.checkpoints("w", first, 25)
        assert [dict(c.node_states) for c in page] == [dict(c.node_states) for c in every[first:first + 25]]
        assert [c.changed for c in page] == [c.changed for c in every[first:first + 25]]


# --------------------------------------------------------------------------- fencing


@pytest.mark.parametrize("with_run_row", [True, False], ids=["with-run-row", "children-only"])
def test_commit_with_stale_fence_raises_lease_lost_and_writes_nothing(store: CheckpointStore,
                                                                      with_run_row: bool) -> None:
    run = add_run(store, "r1")
    store.commit(Batch(run_id="r1", fence=1, interrupts=[intr("r1", "i1")], writes=[pw("r1", "n0", 1)],
                       checkpoints=[cp("r1", 1, states_at(1))], events=[ev("r1", 2)]))
    store.request_cancel("r1", "please stop")
    taken = store.acquire_lease("r1", "newcomer", T0 + 99, expected_fence=1)
    assert taken.fence == 2
    before = everything(store, ["r1"])

    stale = Batch(run_id="r1", fence=1,
                  run=run.evolve(status=RunStatus.FAILED, head_seq=2, event_seq=3, fence=1,
                                 error={"class": "internal"}) if with_run_row else None,
                  checkpoints=[cp("r1", 2, states_at(2), snapshot={"stale": True})],
                  writes=[pw("r1", "n3", {"stale": True})],
                  attempts=[att("r1", "n3")],
                  effects=[je("r1", "n3", 0)],
                  interrupts=[intr("r1", "i1", status=InterruptStatus.ANSWERED, answer="late",
                                   answered_at=T0 + 5), intr("r1", "i2")],
                  events=[ev("r1", 3)], durable=True)
    with pytest.raises(LeaseLost):
        store.commit(stale)
    assert everything(store, ["r1"]) == before
    with pytest.raises(NotFound):
        store.get_checkpoint("r1-cp2")
    # the current owner is unaffected, and its own checkpoints still come back whole
    store.commit(Batch(run_id="r1", fence=2, checkpoints=[cp("r1", 2, states_at(2))]))
    assert [c.node_states for c in store.checkpoints("r1")][1:] == [states_at(1), states_at(2)]


def test_acquire_lease_with_current_fence_bumps_fence_and_sets_owner(store: CheckpointStore) -> None:
    run = add_run(store, "r1", status=RunStatus.INTERRUPTED, lease_owner=None)
    got = store.acquire_lease("r1", "host:42:abc", T0 + 30, expected_fence=1)
    assert got == run.evolve(fence=2, lease_owner="host:42:abc", lease_expires_at=T0 + 30)
    assert store.get_run("r1") == got
    again = store.acquire_lease("r1", "host:43:def", T0 + 60, expected_fence=2)
    assert (again.fence, again.lease_owner, again.lease_expires_at) == (3, "host:43:def", T0 + 60)
    store.commit(Batch(run_id="r1", fence=3, events=[ev("r1", 2)]))  # the new fence is accepted
    with pytest.raises(LeaseLost):
        store.commit(Batch(run_id="r1", fence=2, events=[ev("r1", 3)]))


def test_acquire_lease_with_stale_fence_raises_lease_lost(store: CheckpointStore) -> None:
    add_run(store, "r1")
    store.acquire_lease("r1", "first", T0 + 30, expected_fence=1)
    before = store.get_run("r1")
    with pytest.raises(LeaseLost):
        store.acquire_lease("r1", "second", T0 + 60, expected_fence=1)
    assert store.get_run("r1") == before
    assert before.lease_owner == "first" and before.fence == 2


def test_acquire_lease_of_unknown_run_raises_not_found(store: CheckpointStore) -> None:
    with pytest.raises(NotFound):
        store.acquire_lease("nope", "me", T0, expected_fence=0)


# --------------------------------------------------------------------------- node_writes


def test_node_writes_prefer_the_first_run_in_the_lineage(store: CheckpointStore) -> None:
    add_run(store, "parent")
    add_run(store, "child", parent="parent", kind=RunKind.CONTINUATION)
    store.commit(Batch(run_id="parent", fence=1, writes=[pw("parent", "n0", {"v": "parent-n0"}),
                                                           pw("parent", "n1", {"v": "parent-n1"})]))
    store.commit(Batch(run_id="child", fence=1, writes=[pw("child", "n1", {"v": "child-n1"}),
                                                          pw("child", "n2", {"v": "child-n2"})]))
    assert store.node_writes(["child", "parent"]) == {
        "n0": {"v": "parent-n0"}, "n1": {"v": "child-n1"}, "n2": {"v": "child-n2"}}
    assert store.node_writes(["parent", "child"]) == {
        "n0": {"v": "parent-n0"}, "n1": {"v": "parent-n1"}, "n2": {"v": "child-n2"}}
    assert store.node_writes(["parent"]) == {"n0": {"v": "parent-n0"}, "n1": {"v": "parent-n1"}}


def test_node_writes_ignore_error_and_interrupt_kinds(store: CheckpointStore) -> None:
    add_run(store, "parent")
    add_run(store, "child", parent="parent", kind=RunKind.CONTINUATION)
    store.commit(Batch(run_id="parent", fence=1, writes=[pw("parent", "n0", {"v": "parent-n0"})]))
    store.commit(Batch(run_id="child", fence=1, writes=[
        pw("child", "n0", {"error": "boom"}, kind=WriteKind.ERROR),           # does not shadow the parent
        pw("child", "n1", {"question": "?"}, kind=WriteKind.INTERRUPT),      # not a result
        pw("child", "n2", {"error": "flaky"}, kind=WriteKind.ERROR),
        pw("child", "n2", {"v": "child-n2"}, attempt=2),                     # the retry that succeeded
    ]))
    assert store.node_writes(["child", "parent"]) == {"n0": {"v": "parent-n0"}, "n2": {"v": "child-n2"}}
    assert store.node_writes([]) == {}


# --------------------------------------------------------------------------- reads of unknown runs


@pytest.mark.parametrize("read", ["checkpoints", "pending_writes", "pending_writes_of_nodes", "events",
                                  "node_attempts", "journal", "node_writes"])
def test_per_run_reads_of_an_unknown_run_raise_not_found(store: CheckpointStore, read: str) -> None:
    add_run(store, "r1")
    calls: dict[str, Callable[[], Any]] = {
        "checkpoints": lambda: store.checkpoints("nope"),
        "pending_writes": lambda: store.pending_writes("nope"),
        "pending_writes_of_nodes": lambda: store.pending_writes("nope", nodes=["n0"]),
        "events": lambda: store.events("nope"),
        "node_attempts": lambda: store.node_attempts("nope"),
        "journal": lambda: store.journal(["r1", "nope"]),
        "node_writes": lambda: store.node_writes(["r1", "nope"]),
    }
    with pytest.raises(NotFound):
        calls[read]()


# --------------------------------------------------------------------------- values


#: strings a database may not hold as they are: U+0000 (PostgreSQL's text refuses it, and
#: so did the JSONB of stores before schema 4), the private-use character the SQL store
#: escapes it with, and look-alikes of both
AWKWARD = ("a\x00b", "\x00", "\ue000", "\ue0000", "\ue0001", "\\u0000", "\ue000\x00\ue000", "é ☃ 𝄞")


def in_every_json_column(store: CheckpointStore, run: Run, value: Any, version: str) -> Batch:
    """``run`` created, then ``value`` recorded in each other kind of JSON column: a snapshot,
    a write, an effect's result, an answer, an event's data and a graph description (``version``)."""
    store.create_run(Batch(run_id=run.id, run=run))
    batch = Batch(run_id=run.id, fence=1, checkpoints=[cp(run.id, 1, states_at(1), snapshot={"s": value})],
                  writes=[pw(run.id, "n0", value)],
                  effects=[je(run.id, "n0", 0, EffectStatus.SUCCEEDED, result=value)],
                  interrupts=[intr(run.id, "i1", status=InterruptStatus.ANSWERED, answer=value, answered_at=T0)],
                  events=[ev(run.id, 2, detail=value)])
    store.commit(batch)
    store.save_graph({**GRAPH_DESC, "version": version, "doc": value})
    return batch


def test_strings_holding_u0000_read_back_exactly_from_every_json_column(store: CheckpointStore) -> None:
    nasty = {s: [s, {s: s}] for s in AWKWARD}
    run = make_run("r1", error={"message": "a\x00b"}, usage={"\x00": 1}, options={"mocks": nasty}).evolve(
        input={"q": nasty})
    batch = in_every_json_column(store, run, nasty, "v-nul")
    assert store.get_run("r1") == run
    assert [c.snapshot for c in store.checkpoints("r1")] == [{"s": nasty}]
    assert store.pending_writes("r1") == list(batch.writes)
    assert store.node_writes(["r1"]) == {"n0": nasty}
    assert store.journal(["r1"]) == list(batch.effects)
    assert store.interrupts("r1") == list(batch.interrupts)
    assert store.events("r1") == list(batch.events)
    assert store.graph_description("v-nul") == {**GRAPH_DESC, "version": "v-nul", "doc": nasty}


#: a value whose text a database might not keep: keys out of any sorted order (longest
#: first), -0.0, a float past 1e16, a float a short text cannot name exactly
AS_WRITTEN = {"zeta": {"mm": 1, "a": 2, "": 3}, "b": [-0.0, 1e16, 1.0000000000000002, 2**60], "aa": None}


def shown(value: Any) -> str:
    """The value as JSON text: equal only when keys come in the same order and floats are the same."""
    return json.dumps(value)


def test_json_values_read_back_as_recorded_keys_in_their_order(store: CheckpointStore) -> None:
    """A replay or a resume reads effect results, writes and states back from the store: a
    node that lists a result's keys (or prints it into a prompt) must see what it saw first."""
    value = AS_WRITTEN
    batch = in_every_json_column(store, make_run("r1", options={"mocks": value}).evolve(input={"q": value}),
                                 value, "v-order")
    read = store.get_run("r1")
    assert shown(read.input) == shown({"q": value}) and shown(read.options) == shown({"mocks": value})
    assert shown(store.checkpoints("r1")[0].snapshot) == shown({"s": value})
    assert shown(store.pending_writes("r1")[0].value) == shown(value)
    assert shown(store.node_writes(["r1"])["n0"]) == shown(value)
    assert shown(store.journal(["r1"])[0].result) == shown(value)
    assert shown(store.interrupts("r1")[0].answer) == shown(value)
    assert shown(store.events("r1")[0].data) == shown(batch.events[0].data)
    assert shown(store.graph_description("v-order")["doc"]) == shown(value)   # type: ignore[index]


def test_error_messages_and_cancel_reasons_holding_u0000_read_back_exactly(store: CheckpointStore) -> None:
    add_run(store, "r1")
    attempts = [att("r1", "n0", i, NodeStatus.FAILED, error_class="ValueError", error=s)
                for i, s in enumerate(AWKWARD, 1)]
    effects = [je("r1", "n0", i, EffectStatus.FAILED, error=s) for i, s in enumerate(AWKWARD)]
    store.commit(Batch(run_id="r1", fence=1, attempts=attempts, effects=effects))
    assert store.node_attempts("r1") == attempts
    assert store.journal(["r1"]) == effects
    for reason in AWKWARD:
        store.request_cancel("r1", reason)
        assert store.cancel_request("r1") == reason


#: values a SQL store must keep apart from NULL and from each other (SQLite's hot path binds
#: stand-ins for None: the integer 0 in text and JSON columns, '' in integer ones)
LOOK_ALIKES = ("0", "", "''", "null", "NULL")


def test_none_empty_and_zero_values_read_back_as_written(store: CheckpointStore) -> None:
    add_run(store, "r1")
    checkpoints = [Checkpoint(id="r1-cp1", run_id="r1", seq=1, parent_id="", nodes=(), node_states=states_at(1),
                              event_seq=0, created_at=T0, source="0", snapshot={}),
                   Checkpoint(id="r1-cp2", run_id="r1", seq=2, parent_id=None, nodes=("0",),
                              node_states=states_at(2), event_seq=2, created_at=T0, snapshot={"": 0}),
                   Checkpoint(id="r1-cp3", run_id="r1", seq=3, parent_id="0", nodes=("",),
                              node_states=states_at(3), event_seq=3, created_at=T0, snapshot=None)]
    writes = [pw("r1", "n0", value, attempt=i) for i, value in enumerate((0, "", None, "0", 0.0, False, [], {}), 1)]
    attempts = [att("r1", "n0", 1), *(att("r1", "n0", i, NodeStatus.FAILED, error_class=s, error=s, decision=s)
                                      for i, s in enumerate(LOOK_ALIKES, 2))]
    events = [TraceEvent("r1", 2, T0, "node.end", node=None, attempt=None, data={}),
              TraceEvent("r1", 3, T0, "node.end", node="", attempt=0, data={"": 0}),
              *(TraceEvent("r1", i, T0, s, node=s, attempt=i, data={s: s}) for i, s in enumerate(LOOK_ALIKES, 4))]
    store.commit(Batch(run_id="r1", fence=1, checkpoints=checkpoints, writes=writes, attempts=attempts,
                       events=events))
    found = store.checkpoints("r1")[1:]
    assert [(c.parent_id, c.nodes, c.source, c.snapshot, c.event_seq) for c in found] == [
        (c.parent_id, c.nodes, c.source, c.snapshot, c.event_seq) for c in checkpoints]
    assert [c.node_states for c in found] == [c.node_states for c in checkpoints]
    assert store.pending_writes("r1") == writes
    assert store.node_attempts("r1") == attempts
    assert store.events("r1", after_seq=1) == events


def test_a_sql_store_stores_none_as_null(open_sql: Callable[[], SqlStore]) -> None:
    s = open_sql()
    add_run(s, "r1")
    s.commit(Batch(run_id="r1", fence=1, checkpoints=[cp("r1", 1, states_at(1))],
                   writes=[pw("r1", "n0", None)], attempts=[att("r1", "n0")],
                   events=[TraceEvent("r1", 2, T0, "run.paused", node=None, attempt=None, data={})]))
    nulls = {"checkpoints": ("snapshot",), "pending_writes": ("value",),
             "node_attempts": ("error_class", "error", "decision"), "trace_events": ("node", "attempt", "data")}
    with s.engine.connect() as conn:
        for table, columns in nulls.items():
            for column in columns:
                found = conn.execute(text(f"SELECT count(*) FROM {table} WHERE {column} IS NOT NULL "
                                          f"AND run_pk = (SELECT pk FROM runs WHERE id = 'r1')"
                                          + (" AND seq = 1" if table == "checkpoints" else "")
                                          + (" AND seq = 2" if table == "trace_events" else ""))).scalar()
                assert (table, column, found) == (table, column, 0)
        [parent] = conn.execute(text("SELECT parent_id FROM checkpoints WHERE seq = 0")).scalars()
    assert parent is None



def test_times_read_back_to_the_last_bit(store: CheckpointStore) -> None:
    at = 1_700_000_000.123_456_7  # as time.time() gives them: every bit of the double matters
    run = add_run(store, "r1", at=at, lease_expires_at=at + 1e-6)
    store.commit(Batch(run_id="r1", fence=1, attempts=[NodeAttempt("r1", "n0", 1, NodeStatus.SUCCEEDED, at, at + 0.1)],
                       events=[TraceEvent("r1", 2, at + 0.2, "node.end")]))
    assert store.get_run("r1") == run and (run.created_at, run.lease_expires_at) == (at, at + 1e-6)
    assert [(a.started_at, a.ended_at) for a in store.node_attempts("r1")] == [(at, at + 0.1)]
    assert store.events("r1")[1].at == at + 0.2


# --------------------------------------------------------------------------- cancel requests


def test_request_cancel_then_cancel_request_returns_the_reason(store: CheckpointStore) -> None:
    add_run(store, "r1")
    add_run(store, "r2")
    assert store.cancel_request("r1") is None
    store.request_cancel("r1", "user pressed stop")
    assert store.cancel_request("r1") == "user pressed stop"
    assert store.cancel_request("r2") is None
    store.request_cancel("r1", "second thoughts")
    assert store.cancel_request("r1") == "second thoughts"


def test_cancel_request_is_cleared_when_the_run_stops_running(store: CheckpointStore) -> None:
    run = add_run(store, "r1")
    store.request_cancel("r1", "stop")
    store.commit(Batch(run_id="r1", fence=1, run=run.evolve(event_seq=2), events=[ev("r1", 2)]))
    assert store.cancel_request("r1") == "stop"  # still running: the request stands
    store.commit(Batch(run_id="r1", fence=1, run=run.evolve(status=RunStatus.CANCELLED, event_seq=3)))
    assert store.cancel_request("r1") is None


# --------------------------------------------------------------------------- answers left for a running run


def test_answers_left_for_pending_questions_are_read_until_recorded(store: CheckpointStore) -> None:
    add_run(store, "r1")
    add_run(store, "r2")
    store.commit(Batch(run_id="r1", fence=1, interrupts=[intr("r1", "i1"), intr("r1", "i2", at=T0 + 1)]))
    store.commit(Batch(run_id="r2", fence=1, interrupts=[intr("r2", "j1")]))
    assert store.sent_answers("r1") == {}
    answer = {"ok": True, "note": "a\u0000b é"}
    assert store.send_answers("r1", {"i1": answer}, "ada", T0 + 5) is True
    assert store.sent_answers("r1") == {"i1": SentAnswer("i1", answer, "ada", T0 + 5)}
    assert store.sent_answers("r2") == {}
    assert store.interrupt("i1") == intr("r1", "i1")   # a left answer is not the answer
    store.commit(Batch(run_id="r1", fence=1, interrupts=[
        intr("r1", "i1", status=InterruptStatus.ANSWERED, answer=answer, answered_at=T0 + 6)]))
    assert store.sent_answers("r1") == {}


def test_answers_are_left_all_or_none_and_only_once(store: CheckpointStore) -> None:
    add_run(store, "r1")
    store.commit(Batch(run_id="r1", fence=1, interrupts=[
        intr("r1", "i1"), intr("r1", "i2", status=InterruptStatus.ANSWERED, answer=1, answered_at=T0 + 1),
        intr("r1", "i3", at=T0 + 2)]))
    add_run(store, "r2")
    store.commit(Batch(run_id="r2", fence=1, interrupts=[intr("r2", "j1")]))
    assert store.send_answers("r1", {"i1": "yes", "i2": "late"}, None, T0) is False   # i2 was answered
    assert store.send_answers("r1", {"i1": "yes", "j1": "no"}, None, T0) is False   # j1 is another run's
    assert store.send_answers("r1", {"i1": "yes", "nope": "no"}, None, T0) is False
    assert store.sent_answers("r1") == {}   # nothing left by the refused calls
    assert store.send_answers("r1", {"i3": None}, None, T0 + 3) is True
    assert store.send_answers("r1", {"i1": "yes", "i3": "again"}, "bob", T0 + 4) is False   # i3 has one
    assert store.sent_answers("r1") == {"i3": SentAnswer("i3", None, None, T0 + 3)}
    with pytest.raises(NotFound):
        store.send_answers("nope", {"i1": "yes"}, None, T0)


def test_request_cancel_of_unknown_run_raises_not_found(store: CheckpointStore) -> None:
    with pytest.raises(NotFound):
        store.request_cancel("nope", "stop")


def test_cancel_request_of_unknown_run_is_none(store: CheckpointStore) -> None:
    assert store.cancel_request("nope") is None


# --------------------------------------------------------------------------- graphs


GRAPH_DESC = {"name": "g", "version": "v1", "nodes": [{"name": "n0", "after": []},
                                                      {"name": "n1", "after": ["n0"]}]}


def test_save_graph_is_idempotent(store: CheckpointStore) -> None:
    store.save_graph(GRAPH_DESC)
    store.save_graph(GRAPH_DESC)
    store.save_graph({**GRAPH_DESC, "nodes": []})  # same version again: the first one stays
    assert store.graph_description("v1") == GRAPH_DESC


def test_graph_description_returns_each_saved_version(store: CheckpointStore) -> None:
    other = {**GRAPH_DESC, "version": "v2", "nodes": [{"name": "n9", "after": []}]}
    store.save_graph(GRAPH_DESC)
    store.save_graph(other)
    assert store.graph_description("v1") == GRAPH_DESC
    assert store.graph_description("v2") == other
    assert store.graph_description("v3") is None


def test_save_graph_records_a_ref_added_to_a_saved_version(store: CheckpointStore) -> None:
    """Runtime.register saves a graph again with ``ref`` once it knows where to import it
    from; graph_for needs that ref to resume runs of the version in another process."""
    store.save_graph(GRAPH_DESC)
    with_ref = {**GRAPH_DESC, "ref": "examples.refund:graph"}
    store.save_graph(with_ref)
    assert store.graph_description("v1") == with_ref


# --------------------------------------------------------------------------- SQL databases only


def _populate(store: CheckpointStore) -> None:
    store.save_graph(GRAPH_DESC)
    run = add_run(store, "p", thread_id="t")
    add_run(store, "c", thread_id="t", parent="p", kind=RunKind.CONTINUATION, status=RunStatus.QUEUED)
    for seq in range(1, 9):
        store.commit(Batch(run_id="p", fence=1, checkpoints=[
            cp("p", seq, states_at(seq), snapshot={"s": seq} if seq == 5 else None)]))
    store.commit(Batch(run_id="p", fence=1, run=run.evolve(status=RunStatus.INTERRUPTED, head_seq=8),
                       writes=[pw("p", "n0", {"v": 1}), pw("p", "n1", "x", kind=WriteKind.ERROR)],
                       attempts=[att("p", "n0")], effects=[je("p", "n0", 0)],
                       interrupts=[intr("p", "i1"), intr("p", "i2", at=T0 + 1)],
                       events=[ev("p", 2), ev("p", 3, "checkpoint", cp=1)]))
    store.commit(Batch(run_id="p", fence=1, interrupts=[
        intr("p", "i1", status=InterruptStatus.ANSWERED, answer=[1, "two"], answered_at=T0 + 2)]))
    store.request_cancel("c", "not needed")


def test_a_reopened_store_sees_everything(open_sql: Callable[[], SqlStore]) -> None:
    first = open_sql()
    _populate(first)
    before = everything(first, ["p", "c"])
    graph = first.graph_description("v1")
    first.close()
    second = open_sql()
    assert everything(second, ["p", "c"]) == before
    assert second.graph_description("v1") == graph == GRAPH_DESC
    assert second.list_runs(thread_id="t") == before["list_runs"]
    assert second.node_writes(["c", "p"]) == {"n0": {"v": 1}}


def test_a_reopened_store_continues_checkpoint_history(open_sql: Callable[[], SqlStore]) -> None:
    first = open_sql()
    add_run(first, "r1")
    for seq in range(1, 5):
        first.commit(Batch(run_id="r1", fence=1, checkpoints=[cp("r1", seq, states_at(seq))]))
    first.close()
    second = open_sql()
    for seq in range(5, 12):
        second.commit(Batch(run_id="r1", fence=1, checkpoints=[cp("r1", seq, states_at(seq))]))
    third = open_sql()
    for s in (second, third):
        got = s.checkpoints("r1")
        assert [c.node_states for c in got][1:] == [states_at(q) for q in range(1, 12)]
        assert [s.get_checkpoint(c.id) for c in got] == got


def test_two_instances_hand_a_run_over_by_lease(open_sql: Callable[[], SqlStore]) -> None:
    a, b = open_sql(), open_sql()
    add_run(a, "r1")
    for seq in range(1, 4):
        a.commit(Batch(run_id="r1", fence=1, checkpoints=[cp("r1", seq, states_at(seq))]))
    fence = b.acquire_lease("r1", "b", T0 + 30, expected_fence=1).fence
    for seq in range(4, 7):
        b.commit(Batch(run_id="r1", fence=fence, checkpoints=[cp("r1", seq, states_at(seq))]))
    with pytest.raises(LeaseLost):
        a.commit(Batch(run_id="r1", fence=1, checkpoints=[cp("r1", 7, states_at(7))]))
    fence = a.acquire_lease("r1", "a", T0 + 60, expected_fence=fence).fence
    for seq in range(7, 10):
        a.commit(Batch(run_id="r1", fence=fence, checkpoints=[cp("r1", seq, states_at(seq))]))
    for s in (a, b):
        got = s.checkpoints("r1")
        assert [c.node_states for c in got][1:] == [states_at(q) for q in range(1, 10)]
        assert [s.get_checkpoint(c.id) for c in got] == got


def test_a_create_run_that_fails_part_way_leaves_no_trace(open_sql: Callable[[], SqlStore]) -> None:
    """create_run is one transaction: if a later row of its batch is refused (here a duplicate
    event seq; in production a full disk, say), the run must not half-exist in this instance."""
    s = open_sql()
    with pytest.raises(Exception):  # noqa: B017 - which error the database raises is not the point
        s.create_run(Batch(run_id="x", run=make_run("x"), events=[ev("x", 1), ev("x", 1)]))
    with pytest.raises(NotFound):
        s.get_run("x")
    add_run(s, "y")  # the next run may be given the row the failed one had
    y_before = everything(s, ["y"])
    with pytest.raises(NotFound):
        s.checkpoints("x")
    with pytest.raises(NotFound):
        s.commit(Batch(run_id="x", fence=1, events=[ev("x", 2, "stray")]))
    assert everything(s, ["y"]) == y_before


def test_schema_version_table_records_the_current_version(open_sql: Callable[[], SqlStore]) -> None:
    s = open_sql()
    with s.engine.connect() as conn:
        versions = conn.execute(text("SELECT version FROM harness_schema ORDER BY version")).scalars().all()
    assert versions == [SCHEMA_VERSION]
    open_sql()  # opening again does not record the version twice
    with s.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM harness_schema")).scalar() == 1


def test_a_database_with_a_newer_schema_is_refused(open_sql: Callable[[], SqlStore], sql_url: str) -> None:
    s = open_sql()
    add_run(s, "r1")
    with s.engine.begin() as conn:
        conn.execute(text("INSERT INTO harness_schema (version, applied_at) VALUES (:v, :t)"),
                     {"v": SCHEMA_VERSION + 1, "t": T0})
    s.close()
    with pytest.raises(InvalidRequest, match=rf"schema {SCHEMA_VERSION + 1} is newer .*\({SCHEMA_VERSION}\).*upgrade"):
        SqlStore(sql_url)


# --------------------------------------------------------------------------- two processes at once


@contextmanager
def writes_to(sql_url: str, table: str) -> Iterator[Callable[[int, Sequence[threading.Thread]], None]]:
    """Hold back other connections' writes to ``table`` until the block ends, so that two
    writers are caught half-way. Gives ``wait(n, threads)``: returns once ``n`` connections
    wait for a lock (PostgreSQL) or after a pause (SQLite), or as soon as ``threads`` are done.

    SQLite's writers wait for the whole database (``BEGIN IMMEDIATE``) and then go one at a
    time; PostgreSQL's wait only where a lock makes them, which is what the tests look at.
    """
    if sql_url.startswith("sqlite"):
        conn = sqlite3.connect(sql_url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")

        def wait(n: int, threads: Sequence[threading.Thread]) -> None:
            for t in threads:
                t.join(0.3)
        try:
            yield wait
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    engine = create_engine(sql_url)
    with engine.connect() as holder, engine.connect() as watcher:
        holder.exec_driver_sql(f"LOCK TABLE {table} IN SHARE MODE")  # reads and row locks go on

        def wait(n: int, threads: Sequence[threading.Thread]) -> None:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(t.is_alive() for t in threads):
                if watcher.exec_driver_sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                                           "'Lock' AND datname = current_database()").scalar_one() >= n:
                    return
                watcher.rollback()
                time.sleep(0.01)
        try:
            yield wait
        finally:
            holder.rollback()
    engine.dispose()


def in_thread(fn: Callable[[], Any], results: dict[str, Any], name: str) -> threading.Thread:
    def run() -> None:
        try:
            results[name] = fn()
        except Exception as e:  # noqa: BLE001 - the test looks at what each one got
            results[name] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_two_instances_continuing_one_run_at_once_create_one_continuation(
        open_sql: Callable[[], SqlStore], sql_url: str) -> None:
    a, b = open_sql(), open_sql()
    add_run(a, "p", status=RunStatus.FAILED)
    created, refused = race_to_create(sql_url, ((a, "c1"), (b, "c2")), thread_id="p", parent="p",
                                      kind=RunKind.CONTINUATION, status=RunStatus.QUEUED)
    assert f"already continued by {created[0]}" in str(refused[0])
    assert [r.id for r in a.child_runs("p")] == created


def race_to_create(sql_url: str, who: Sequence[tuple[SqlStore, str]], **kw: Any) -> tuple[list[str], list[Exception]]:
    """Each (store, run id) creates its run at the same moment (``add_run(**kw)``): the ids
    created and the errors of those refused; exactly one of each."""
    got: dict[str, Any] = {}
    with writes_to(sql_url, "runs") as wait:
        threads = [in_thread(lambda s=s, rid=rid: add_run(s, rid, **kw), got, rid) for s, rid in who]
        wait(len(threads), threads)  # all have begun: each is about to insert, or waits to look
    for t in threads:
        t.join(30)
    created = [rid for rid, r in got.items() if isinstance(r, Run)]
    refused = [r for r in got.values() if isinstance(r, InvalidRequest)]
    assert len(created) == 1 and len(refused) == 1, got
    return created, refused


def test_a_named_thread_has_one_first_run(store: CheckpointStore) -> None:
    """A run beginning a named thread (no parent) is refused once the thread has a run: it
    would start the conversation over beside the other. Runs in their own thread, and runs
    that follow another in the thread, are not affected."""
    add_run(store, "a", thread_id="chat")
    with pytest.raises(InvalidRequest, match="thread chat already has run a"):
        add_run(store, "b", thread_id="chat")
    add_run(store, "c", thread_id="chat", parent="a")
    add_run(store, "d")
    assert [r.id for r in store.list_runs(thread_id="chat")] == ["c", "a"]


def test_two_instances_starting_a_thread_at_once_create_one_first_run(
        open_sql: Callable[[], SqlStore], sql_url: str) -> None:
    a, b = open_sql(), open_sql()
    created, refused = race_to_create(sql_url, ((a, "t1"), (b, "t2")), thread_id="chat", status=RunStatus.QUEUED)
    assert f"thread chat already has run {created[0]}" in str(refused[0])
    assert [r.id for r in a.list_runs(thread_id="chat")] == created


def test_a_lease_taken_while_a_batch_commits_waits_for_the_batch(open_sql: Callable[[], SqlStore],
                                                                 sql_url: str) -> None:
    """The new owner sees, when it takes the run, every write the old fence will ever make:
    a batch checked against the fence before the lease moved lands before it moves."""
    old, new = open_sql(), open_sql()
    add_run(old, "r1")
    got: dict[str, Any] = {}
    with writes_to(sql_url, "pending_writes") as wait:
        committing = in_thread(lambda: old.commit(Batch(run_id="r1", fence=1, writes=[pw("r1", "n0", "late")])),
                               got, "old")
        wait(1, [committing])  # checked its fence, now held back from writing

        def take_over() -> list[PendingWrite]:
            new.acquire_lease("r1", "new", T0 + 30, expected_fence=1)
            return new.pending_writes("r1")
        taking = in_thread(take_over, got, "new")
        wait(2, [taking])  # waits for the batch, or (wrongly) took the run at once
    for t in (committing, taking):
        t.join(30)
    assert not isinstance(got["new"], Exception), got
    assert new.pending_writes("r1") == got["new"]  # nothing landed after the takeover
    assert new.get_run("r1").fence == 2


# --------------------------------------------------------------------------- PostgreSQL only


def test_a_durable_batch_on_postgresql_is_flushed_with_every_commit_before_it(pg_empty_url: str) -> None:
    """Ordinary batches commit without waiting for the disk (``synchronous_commit`` off);
    a durable one must still wait until the WAL holding it, and all before it, is flushed."""
    store = SqlStore(pg_empty_url)
    engine = create_engine(pg_empty_url)
    try:
        add_run(store, "r1")
        store.commit(Batch(run_id="r1", fence=1, events=[ev("r1", 2)]))  # ordinary: may not be on disk yet
        with engine.connect() as conn:
            written = conn.execute(text("SELECT pg_current_wal_insert_lsn()")).scalar_one()
            store.commit(Batch(run_id="r1", fence=1, events=[ev("r1", 3)], durable=True))
            behind = conn.execute(text("SELECT pg_wal_lsn_diff(:w, pg_current_wal_flush_lsn())"),
                                  {"w": written}).scalar_one()
        assert behind <= 0, f"the WAL on disk is {behind} bytes short of the durable batch"
    finally:
        store.close()
        engine.dispose()


# --------------------------------------------------------------------------- through the Runtime


class ContractState(BaseModel):
    x: int = 0
    receipt: str = ""
    approved: bool = False
    log: Annotated[list[str], append] = []


EFFECT_CALLS: list[str] = []

GRAPH = Graph("contract", state=ContractState)


@GRAPH.node()
def prepare(state: ContractState) -> dict:
    return {"x": state.x + 1, "log": ["prepare"]}


@GRAPH.node(after=["prepare"])
async def pay(state: ContractState, ctx: NodeContext) -> dict:
    def charge(info: Any) -> str:
        EFFECT_CALLS.append(info.key)
        return f"rcpt-{state.x}"

    receipt = await ctx.effect("payments.charge", charge, request={"x": state.x})
    return {"receipt": receipt, "log": ["pay"]}


@GRAPH.node(after=["pay"])
async def review(state: ContractState, ctx: NodeContext) -> dict:
    answer = await ctx.interrupt({"question": f"ship {state.receipt}?"})
    return {"approved": bool(answer["ok"]), "log": ["review"]}


class FixedClock:
    """Always the same instant: recorded times are identical whichever store runs the graph."""

    def time(self) -> float:
        return T0


class CountingIds:
    def __init__(self) -> None:
        self.n = 0

    def new(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}_{self.n:016d}"


async def run_scenario(store: CheckpointStore) -> dict[str, Any]:
    """Start the graph (it pauses at ``review``), answer, and read everything back."""
    rt = Runtime(store, clock=FixedClock(), ids=CountingIds())
    calls = len(EFFECT_CALLS)
    paused = await rt.start(GRAPH, {"x": 1})
    pending = await rt.interrupts(paused.id)
    done = await rt.resume(paused.id, {"ok": True})
    history = await rt.history(done.id)
    out = {
        "paused": paused, "pending": pending, "done": done, "run": await rt.get_run(done.id),
        "history": history,
        "states": [(await rt.state_at(c.id)).model_dump() for c in history],
        "events": await rt.events(done.id), "interrupts": await rt.interrupts(done.id, pending=False),
        "journal": store.journal([done.id]), "writes": await rt.pending_writes(done.id),
        "attempts": await rt.attempts(done.id), "effect_calls": len(EFFECT_CALLS) - calls,
    }
    rt.close()  # closes the store too; the fixture closing it again is harmless
    return out


async def test_runtime_pauses_at_the_interrupt_and_resume_finishes(store: CheckpointStore) -> None:
    got = await run_scenario(store)
    assert got["paused"].status == RunStatus.INTERRUPTED
    assert [(i.node, i.kind, i.payload["value"]["question"]) for i in got["pending"]] == [
        ("review", InterruptKind.USER, "ship rcpt-2?")]
    assert got["done"].status == RunStatus.SUCCEEDED
    assert got["run"] == got["done"]
    assert [i.status for i in got["interrupts"]] == [InterruptStatus.ANSWERED]
    assert [(e.node, e.status, e.result) for e in got["journal"]] == [
        ("pay", EffectStatus.STARTED, None), ("pay", EffectStatus.SUCCEEDED, "rcpt-2")]
    assert got["effect_calls"] == 1
    assert got["states"][-1] == {"x": 2, "receipt": "rcpt-2", "approved": True,
                                 "log": ["prepare", "pay", "review"]}


async def test_runtime_history_has_the_expected_node_states_sequence(store: CheckpointStore) -> None:
    got = await run_scenario(store)
    P, S, I = NodeStatus.PENDING, NodeStatus.SUCCEEDED, NodeStatus.INTERRUPTED
    assert [tuple(c.node_states[n] for n in ("prepare", "pay", "review")) for c in got["history"]] == [
        (P, P, P), (S, P, P), (S, S, P), (S, S, I), (S, S, S)]
    assert [c.seq for c in got["history"]] == [0, 1, 2, 3, 4]
    assert [c.snapshot is not None for c in got["history"]] == [True, False, False, True, True]


async def test_runtime_history_state_and_events_match_the_memory_store(store: CheckpointStore) -> None:
    """Same ids, same clock: the store under test must give back exactly what MemoryStore does."""
    got = await run_scenario(store)
    reference = await run_scenario(MemoryStore())
    assert len(got["history"]) == len(reference["history"])
    assert [dict(c.node_states) for c in got["history"]] == [dict(c.node_states) for c in reference["history"]]
    assert got["states"] == reference["states"]
    assert [(e.seq, e.type, e.node, e.attempt) for e in got["events"]] == [
        (e.seq, e.type, e.node, e.attempt) for e in reference["events"]]
    for key in ("history", "events", "interrupts", "journal", "writes", "attempts", "run"):
        assert got[key] == reference[key], key


# --------------------------------------------------------------------------- time travel records


def test_run_options_and_fork_links_round_trip(store: CheckpointStore) -> None:
    add_run(store, "r1")
    options = {"effects": "mock", "mocks": {"pay": {"ok": True}}, "source": {"run_id": "r1", "checkpoint_id": "r1-cp0"}}
    fork = add_run(store, "f1", thread_id="r1", kind=RunKind.FORK, parent="r1", base_checkpoint_id="r1-cp0",
                   options=options)
    got = store.get_run("f1")
    assert got == fork and got.options == options and got.effects_mode == "mock"
    assert [r.id for r in store.child_runs("r1")] == ["f1"]
    assert {r.id for r in store.list_runs(thread_id="r1")} == {"r1", "f1"}


def test_journal_keeps_mock_sources_and_compensation_refs(store: CheckpointStore) -> None:
    add_run(store, "r1")
    entries = [je("r1", "n1", 0, EffectStatus.MOCKED, result="x", source="run:r0"),
               je("r1", "n1", 1, EffectStatus.SUCCEEDED, result="y", compensate="pkg.mod:undo"),
               je("r1", "n1", 1, EffectStatus.COMPENSATING, compensate="pkg.mod:undo"),
               je("r1", "n1", 1, EffectStatus.COMPENSATED, compensate="pkg.mod:undo")]
    store.commit(Batch(run_id="r1", fence=1, effects=entries))
    assert store.journal(["r1"]) == entries


def test_a_run_created_with_its_whole_history_reads_back_identically(store: CheckpointStore) -> None:
    """What an import does: one batch with many checkpoints (delta node states in SQL)."""
    run = make_run("r1", status=RunStatus.SUCCEEDED, head_seq=11, event_seq=11)
    cps = [cp("r1", s, states_at(s), snapshot={"s": s} if s % 4 == 0 else None) for s in range(12)]
    store.create_run(Batch(run_id="r1", run=run, checkpoints=cps, events=[ev("r1", i) for i in range(1, 12)],
                           writes=[pw("r1", "n0", {"a": 1})], durable=True))
    assert store.checkpoints("r1") == cps
    assert [store.get_checkpoint(c.id) for c in cps] == cps
    assert store.get_run("r1") == run


def test_a_schema_1_database_is_migrated_in_place(open_sql: Callable[[], SqlStore], sql_url: str) -> None:
    s = open_sql()
    add_run(s, "r1")
    s.commit(Batch(run_id="r1", fence=1, effects=[je("r1", "n1", 0, EffectStatus.SUCCEEDED)]))
    with s.engine.begin() as conn:  # make it look like a database written before version 2
        conn.execute(text("ALTER TABLE runs DROP COLUMN options"))
        conn.execute(text("ALTER TABLE effect_journal DROP COLUMN compensate"))
        conn.execute(text("ALTER TABLE interrupts DROP COLUMN sent"))
        conn.execute(text("DELETE FROM harness_schema"))
        conn.execute(text("INSERT INTO harness_schema (version, applied_at) VALUES (1, :t)"), {"t": T0})
    s.close()
    s2 = open_sql()
    assert s2.get_run("r1").options == {}
    assert [e.compensate for e in s2.journal(["r1"])] == [None]
    add_run(s2, "f1", kind=RunKind.FORK, parent="r1", options={"effects": "mock"})
    assert s2.get_run("f1").options == {"effects": "mock"}
    with s2.engine.connect() as conn:
        assert conn.execute(text("SELECT version FROM harness_schema ORDER BY version")).scalars().all() == list(range(1, SCHEMA_VERSION + 1))


def test_a_schema_2_database_is_migrated_and_takes_answers_left(open_sql: Callable[[], SqlStore]) -> None:
    s = open_sql()
    add_run(s, "r1")
    s.commit(Batch(run_id="r1", fence=1, interrupts=[intr("r1", "i1")]))
    with s.engine.begin() as conn:  # make it look like a database written before version 3
        conn.execute(text("ALTER TABLE interrupts DROP COLUMN sent"))
        conn.execute(text("DELETE FROM harness_schema"))
        conn.execute(text("INSERT INTO harness_schema (version, applied_at) VALUES (2, :t)"), {"t": T0})
    s.close()
    s2 = open_sql()
    assert s2.interrupt("i1") == intr("r1", "i1") and s2.sent_answers("r1") == {}
    assert s2.send_answers("r1", {"i1": [1, 2]}, "ada", T0) is True
    assert s2.sent_answers("r1") == {"i1": SentAnswer("i1", [1, 2], "ada", T0)}


async def time_travel_scenario(store: CheckpointStore) -> dict[str, Any]:
    """Run, fork with a patch (answered with a mock), replay, export: everything read back."""
    rt = Runtime(store, clock=FixedClock(), ids=CountingIds())
    calls = len(EFFECT_CALLS)
    run = await rt.resume((await rt.start(GRAPH, {"x": 1})).id, {"ok": True})
    base = (await rt.history(run.id))[1].id   # after prepare
    fork = await rt.fork(base, patch={"x": 10}, mocks={"payments.charge": "rcpt-mock"})
    fork = await rt.resume(fork.id, {"ok": False})
    report = await rt.replay(run.id)
    out: dict[str, Any] = {"run": run, "branch": fork, "report": report.to_json(),
                           "effect_calls": len(EFFECT_CALLS) - calls}
    for r in await rt.runs():
        out[r.kind.value] = {"history": await rt.history(r.id), "journal": store.journal([r.id]),
                             "events": await rt.events(r.id),
                             "states": [(await rt.state_at(c.id)).model_dump() for c in await rt.history(r.id)]}
    out["export"] = await rt.export_thread(run.id)
    rt.close()
    return out


async def test_fork_and_replay_give_the_same_records_on_every_store(store: CheckpointStore) -> None:
    got = await time_travel_scenario(store)
    assert got["effect_calls"] == 1  # only the original run charged
    assert got["branch"].status == RunStatus.SUCCEEDED
    assert got["fork"]["states"][-1]["receipt"] == "rcpt-mock" and got["fork"]["states"][-1]["x"] == 10
    assert got["report"]["same"] is True
    reference = await time_travel_scenario(MemoryStore())
    for kind in ("main", "fork", "replay"):
        assert got[kind] == reference[kind], kind
    assert got["export"] == reference["export"]



# --------------------------------------------------------------------------- node instances

#: instance names as runs with loops, maps and subgraphs record them
INSTANCES = ("n#12", "w[3]", "s/x", "w#2[10]")
P_, R_, S_ = NodeStatus.PENDING, NodeStatus.RUNNING, NodeStatus.SUCCEEDED


def instance_states(step: int) -> dict[str, NodeStatus]:
    """Node states of a growing run: the plain nodes from the start, an instance from
    step 1 + its index (pending, then running, then succeeded), never removed."""
    out = {"n": S_ if step else P_, "w": R_ if step else P_, "s": P_}
    for i, name in enumerate(INSTANCES):
        age = step - 1 - i
        if age >= 0:
            out[name] = (P_, R_, S_)[min(age, 2)]
    return out


def iev(run_id: str, seq: int, type_: str, node: str | None = None, **data: Any) -> TraceEvent:
    return TraceEvent(run_id, seq, T0 + seq, type_, node=node, attempt=1 if node else None, data=data)


def test_records_keyed_by_instance_names_round_trip(store: CheckpointStore) -> None:
    run = make_run("r1")
    store.create_run(Batch(run_id="r1", run=run, durable=True,
                           checkpoints=[cp("r1", 0, instance_states(0), snapshot={"q": "r1"}, source="input")],
                           events=[iev("r1", 1, "run.created")]))
    expected = store.checkpoints("r1")
    writes, attempts, journal, asked, events = [], [], [], [], [iev("r1", 1, "run.created")]
    for seq, name in enumerate(INSTANCES, 1):   # one batch per instance, as a run would commit them
        batch = Batch(run_id="r1", fence=1,
                      checkpoints=[cp("r1", seq, instance_states(seq), nodes=[name],
                                      snapshot={"seq": seq} if seq == 3 else None)],
                      writes=[pw("r1", name, {"by": name}, seq=seq),
                              pw("r1", name, {"error": name}, kind=WriteKind.ERROR, seq=seq, attempt=2)],
                      attempts=[att("r1", name, decision=f"ran {name}")],
                      effects=[je("r1", name, 0), je("r1", name, 0, EffectStatus.SUCCEEDED, result=name)],
                      interrupts=[intr("r1", f"i{seq}", node=name)],
                      events=[iev("r1", 2 * seq, "node.start", name), iev("r1", 2 * seq + 1, "node.succeed", name)])
        store.commit(batch)
        expected += batch.checkpoints
        writes += batch.writes
        attempts += batch.attempts
        journal += batch.effects
        asked += batch.interrupts
        events += batch.events
    for seq in range(len(INSTANCES) + 1, len(INSTANCES) + 4):   # later checkpoints that only move states
        batch = Batch(run_id="r1", fence=1, checkpoints=[cp("r1", seq, instance_states(seq))])
        store.commit(batch)
        expected += batch.checkpoints
    got = store.checkpoints("r1")
    assert got == expected
    assert [dict(c.node_states) for c in got] == [instance_states(s) for s in range(len(expected))]
    assert [store.get_checkpoint(c.id) for c in got] == expected
    assert store.find_checkpoint("r1", 5, with_snapshot=True) == expected[3]
    assert store.find_checkpoint("r1") == expected[-1] and expected[-1].node_states["w#2[10]"] == S_
    assert store.pending_writes("r1") == writes
    assert store.node_writes(["r1"]) == {name: {"by": name} for name in INSTANCES}
    assert store.node_attempts("r1") == attempts
    assert store.journal(["r1"]) == journal
    assert store.interrupts("r1") == asked
    assert [i.node for i in store.interrupts("r1", InterruptStatus.PENDING)] == list(INSTANCES)
    assert store.events("r1") == events
    assert [e.node for e in store.events("r1", after_seq=5)] == ["s/x", "s/x", "w#2[10]", "w#2[10]"]


def test_instance_writes_of_a_lineage_prefer_the_first_run(store: CheckpointStore) -> None:
    add_run(store, "parent")
    add_run(store, "child", parent="parent", kind=RunKind.CONTINUATION)
    store.commit(Batch(run_id="parent", fence=1, writes=[pw("parent", "w[3]", {"v": "parent"}),
                                                           pw("parent", "n#12", {"v": "parent"})]))
    store.commit(Batch(run_id="child", fence=1, writes=[pw("child", "w[3]", {"v": "child"}),
                                                          pw("child", "w#2[10]", {"v": "child"}),
                                                          pw("child", "s/x", {"v": "child"})]))
    assert store.node_writes(["child", "parent"]) == {"w[3]": {"v": "child"}, "n#12": {"v": "parent"},
                                                      "w#2[10]": {"v": "child"}, "s/x": {"v": "child"}}
    assert store.node_writes(["parent"]) == {"w[3]": {"v": "parent"}, "n#12": {"v": "parent"}}


def test_a_run_created_with_a_growing_instance_history_reads_back_identically(store: CheckpointStore) -> None:
    """What an import of a run with loops and maps does: one batch, instances appearing on the way."""
    last = len(INSTANCES) + 3
    run = make_run("r1", status=RunStatus.SUCCEEDED, head_seq=last, event_seq=1)
    cps = [cp("r1", s, instance_states(s), snapshot={"s": s} if s in (0, 4) else None) for s in range(last + 1)]
    store.create_run(Batch(run_id="r1", run=run, checkpoints=cps, events=[iev("r1", 1, "run.created")],
                           writes=[pw("r1", n, {"by": n}) for n in INSTANCES], durable=True))
    assert store.checkpoints("r1") == cps
    assert [store.get_checkpoint(c.id) for c in cps] == cps
    assert [store.find_checkpoint("r1", c.seq) for c in cps] == cps
    assert store.node_writes(["r1"]) == {n: {"by": n} for n in INSTANCES}

def test_find_checkpoint_reads_one_checkpoint_by_seq_and_snapshot(store: CheckpointStore) -> None:
    run = make_run("r1", head_seq=9, event_seq=9)
    cps = [cp("r1", s, states_at(s), snapshot={"s": s} if s in (0, 4, 7) else None) for s in range(10)]
    store.create_run(Batch(run_id="r1", run=run, checkpoints=cps, durable=True))
    assert store.find_checkpoint("r1") == cps[9]
    assert store.find_checkpoint("r1", 5) == cps[5]
    assert store.find_checkpoint("r1", 100) == cps[9]
    assert store.find_checkpoint("r1", 6, with_snapshot=True) == cps[4]
    assert store.find_checkpoint("r1", 3, with_snapshot=True) == cps[0]
    assert store.find_checkpoint("r1", -1) is None
    with pytest.raises(NotFound):
        store.find_checkpoint("nope")


def test_seqs_past_what_a_column_holds_read_as_past_the_end(store: CheckpointStore) -> None:
    """PostgreSQL keeps seqs in 32-bit columns: a bound beyond that range (up to a 64-bit
    integer, and below zero) reads what it means rather than failing in the database."""
    run = make_run("r1", head_seq=2, event_seq=3)
    cps = [cp("r1", s, states_at(s)) for s in range(3)]
    store.create_run(Batch(run_id="r1", run=run, checkpoints=cps, writes=[pw("r1", "n0", 1, seq=1)],
                           events=[ev("r1", 1, "run.created"), ev("r1", 2), ev("r1", 3)], durable=True))
    for big in (2**31, 99_999_999_999, 2**63 - 1):
        assert store.find_checkpoint("r1", big) == cps[2]
        assert store.checkpoints("r1", big) == [] and store.checkpoints("r1", big, 5) == []
        assert store.checkpoint_summaries("r1", 0, big) == store.checkpoint_summaries("r1", 0, 2)
        assert store.checkpoint_summaries("r1", big, big) == []
        assert store.events("r1", big) == [] and store.events("r1", big, 5) == []
        assert store.pending_writes("r1", big) == []
    small = -(2**63)
    assert store.find_checkpoint("r1", small) is None
    assert store.checkpoints("r1", small) == cps
    assert store.checkpoint_summaries("r1", small, 1) == store.checkpoint_summaries("r1", 0, 1)
    assert store.checkpoint_summaries("r1", small, small) == []
    assert [e.seq for e in store.events("r1", small)] == [1, 2, 3]
    assert store.pending_writes("r1", small) == []
