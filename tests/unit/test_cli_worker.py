"""``harness worker MODULE:GRAPH ...``: drives the runs ``Runtime.submit`` queued, oldest
first, and recovers a run whose process is gone; ``--once`` exits when none is left."""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runtime import Runtime, RunStatus, SqlStore, resolve_ref
from runtime.engine.leases import make_owner
from server.cli import main

GRAPHS = textwrap.dedent('''
    import asyncio
    from pydantic import BaseModel
    from runtime import Graph

    class S(BaseModel):
        n: int = 0

    graph = Graph("queued_work", state=S)

    @graph.node()
    def step(state):
        return {"n": state.n + 1}

    HELD = []
    held = Graph("held_work", state=S)

    @held.node()
    async def wait(state):
        if not HELD:   # the first execution hangs, as in a process that then dies
            HELD.append(1)
            await asyncio.Event().wait()
        return {"n": 1}
''')


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "work_graphs.py").write_text(GRAPHS)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "work_graphs", raising=False)
    return str(tmp_path / "w.db")


def submitted(db: str, *inputs: dict) -> list[str]:
    async def go() -> list[str]:
        rt = Runtime(store=SqlStore(f"sqlite:///{db}"))
        try:
            return [(await rt.submit(resolve_ref("work_graphs:graph"), data)).id for data in inputs]
        finally:
            rt.close()
    return asyncio.run(go())


def runs(db: str) -> dict[str, tuple[RunStatus, int]]:
    store = SqlStore(f"sqlite:///{db}")
    try:
        return {r.id: (r.status, r.event_seq) for r in store.list_runs(None, limit=100)}
    finally:
        store.close()


def test_worker_drives_queued_runs_oldest_first_and_once_exits(db: str, capsys: pytest.CaptureFixture[str]):
    ids = submitted(db, {"n": 1}, {"n": 2}, {"n": 3})
    code = main(["--db", db, "worker", "work_graphs:graph", "--once"])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert all(status == RunStatus.SUCCEEDED for status, _ in runs(db).values())
    assert sorted(line.split()[0] for line in out.splitlines()) == sorted(ids)


def test_a_run_the_worker_cannot_drive_is_said_once_and_left_queued(db: str, capsys: pytest.CaptureFixture[str]):
    ids = submitted(db, {"n": 1})
    (Path(db).parent / "work_graphs.py").write_text("")   # the run's code is gone
    sys.modules.pop("work_graphs", None)
    before = runs(db)
    code = main(["--db", db, "worker", "--once"])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and ids[0] in err and "work_graphs:graph" in err
    assert runs(db) == before


@pytest.mark.parametrize(("argv", "named"), [
    (["worker", "no_such_module:graph", "--once"], "no_such_module"),
    (["worker", "--poll", "0", "--once"], "--poll"),
])
def test_a_mistake_is_one_line_and_takes_no_run(db: str, capsys: pytest.CaptureFixture[str],
                                                argv: list[str], named: str):
    submitted(db, {"n": 1})
    before = runs(db)
    code = main(["--db", db, *argv])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and named in err
    assert runs(db) == before


class Past:
    """A clock an hour behind: its runtime's leases expired long ago, as a dead process's do."""

    def time(self) -> float:
        return time.time() - 3600


async def test_worker_recovers_a_run_whose_process_is_gone(db: str, capsys: pytest.CaptureFixture[str]):
    rt = Runtime(store=SqlStore(f"sqlite:///{db}"), clock=Past())
    dead = asyncio.create_task(rt.start(resolve_ref("work_graphs:held"), {}))
    try:
        stop = time.monotonic() + 5
        while not (await rt.runs(status=RunStatus.RUNNING)) or not sys.modules["work_graphs"].HELD:
            assert time.monotonic() < stop, "the run never started"
            await asyncio.sleep(0.02)
        run_id = (await rt.runs())[0].id
        code = await asyncio.wait_for(asyncio.to_thread(main, ["--db", db, "worker", "--once", "--poll", "0.05"]), 10)
        out = capsys.readouterr().out
        assert code == 0 and run_id in out
        assert runs(db)[run_id][0] == RunStatus.SUCCEEDED
    finally:
        dead.cancel()
        await asyncio.gather(dead, return_exceptions=True)
        rt.close()


def test_due_takes_the_oldest_queued_runs_first_whatever_the_backlog(db: str):
    from server.cli.worker import BATCH, due

    ids = submitted(db, *({"n": i} for i in range(BATCH + 5)))
    rt = Runtime(store=SqlStore(f"sqlite:///{db}"))
    try:
        assert [r.id for r in due(rt)] == ids[:BATCH]
        # runs it refused are read past: they never hide those behind them
        assert [r.id for r in due(rt, set(ids[:BATCH]))] == ids[BATCH:]
    finally:
        rt.close()


#: a lease owner on another host: alive for as long as its lease says
ELSEWHERE = "another-host:1:taker"

HELD_UNTIL_TOLD = textwrap.dedent('''
    import asyncio, threading
    from runtime import Graph

    STARTED, GO = threading.Event(), threading.Event()
    RUNNING = []
    graph = Graph("held_until_told")

    @graph.node()
    async def wait(state, ctx):
        RUNNING.append(ctx.run_id)
        STARTED.set()
        while not GO.is_set():
            await asyncio.sleep(0.01)
        return {}
''')


async def test_a_run_whose_lease_another_worker_took_while_driven_here_is_said_once(
        db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    (tmp_path / "held_graphs.py").write_text(HELD_UNTIL_TOLD)
    sys.modules.pop("held_graphs", None)
    rt = Runtime(store=SqlStore(f"sqlite:///{db}"))
    try:
        run = await rt.submit(resolve_ref("held_graphs:graph"), {})
        module = sys.modules["held_graphs"]
        worker = asyncio.create_task(asyncio.to_thread(main, ["--db", db, "worker", "--once", "--poll", "0.05"]))
        assert await asyncio.to_thread(module.STARTED.wait, 10), "the worker never started the run"
        # another worker takes the run over, as after this one was frozen past its lease
        claimed = rt.store.get_run(run.id)
        rt.store.acquire_lease(run.id, ELSEWHERE, time.time() + 3600, claimed.fence)
        module.GO.set()
        code = await asyncio.wait_for(worker, 10)
        out, err = capsys.readouterr()
        assert code == 0 and out == ""
        assert err.count("\n") == 1 and f"run {run.id}: lost its lease to {ELSEWHERE} while driving it" in err
        assert rt.store.get_run(run.id).lease_owner == ELSEWHERE
    finally:
        rt.close()


async def test_max_concurrency_and_lease_ttl_reach_the_runtime(db: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]):
    (tmp_path / "held_graphs.py").write_text(HELD_UNTIL_TOLD)
    sys.modules.pop("held_graphs", None)
    rt = Runtime(store=SqlStore(f"sqlite:///{db}"))
    try:
        ids = [(await rt.submit(resolve_ref("held_graphs:graph"), {})).id for _ in range(3)]
        module = sys.modules["held_graphs"]
        worker = asyncio.create_task(asyncio.to_thread(
            main, ["--db", db, "worker", "--once", "--poll", "0.05", "--max-concurrency", "2", "--lease-ttl", "300"]))
        assert await asyncio.to_thread(module.STARTED.wait, 10), "the worker never started a run"
        await asyncio.sleep(0.5)   # time for a third claim, were it allowed
        running = await rt.runs(status=RunStatus.RUNNING)
        assert sorted(module.RUNNING) == sorted(r.id for r in running) == sorted(ids[:2])
        # a lease of 300 s, not the default 30 (renewed about every second from now on)
        assert all(r.lease_expires_at is not None and r.lease_expires_at > time.time() + 200 for r in running)
        module.GO.set()
        assert await asyncio.wait_for(worker, 10) == 0
        assert sorted(line.split()[0] for line in capsys.readouterr().out.splitlines()) == sorted(ids)
    finally:
        rt.close()


@pytest.mark.parametrize(("option", "value"), [("--max-concurrency", "0"), ("--max-concurrency", "2.5"),
                                               ("--lease-ttl", "0.5"), ("--lease-ttl", "nan")])
def test_a_bad_worker_option_is_one_line_and_opens_no_database(db: str, capsys: pytest.CaptureFixture[str],
                                                               option: str, value: str):
    code = main(["--db", db, "worker", "--once", option, value])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and option in err
    assert not Path(db).exists()


def test_a_max_concurrency_the_runtime_refuses_opens_no_database(db: str, capsys: pytest.CaptureFixture[str]):
    code = main(["--db", db, "worker", "--once", "--max-concurrency", str(2**40)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "max_concurrency" in err
    assert not Path(db).exists()


def test_a_queued_run_another_live_process_is_taking_is_left_to_it_without_spinning(
        db: str, capsys: pytest.CaptureFixture[str]):
    """Another process holds the run's lease but has not recorded its claim yet: the worker
    leaves the run to it and looks again only after a poll (``--once`` exits at once)."""
    [run_id] = submitted(db, {"n": 1})
    store = SqlStore(f"sqlite:///{db}")
    try:
        run = store.get_run(run_id)
        other = make_owner("taking")   # a live process: this one, under another name
        store.acquire_lease(run_id, other, time.time() + 3600, run.fence)
    finally:
        store.close()
    tries: list[str] = []
    inner = Runtime.resume

    async def counted(self: Runtime, run_id: str, *args: object, **kwargs: object) -> object:
        tries.append(run_id)
        return await inner(self, run_id, *args, **kwargs)   # type: ignore[arg-type]

    Runtime.resume = counted   # type: ignore[assignment, method-assign]
    try:
        started = time.monotonic()
        code = main(["--db", db, "worker", "work_graphs:graph", "--once", "--poll", "0.2"])
    finally:
        Runtime.resume = inner   # type: ignore[method-assign]
    out, err = capsys.readouterr()
    assert code == 0 and out == "" and err == ""
    assert tries == [run_id] and time.monotonic() - started < 5
    assert runs(db)[run_id][0] == RunStatus.QUEUED


def test_due_finds_an_orphan_behind_more_running_runs_than_it_reads(db: str, monkeypatch: pytest.MonkeyPatch):
    """A run whose lease expired is taken however many runs other workers drive: the
    oldest running runs are read (BATCH of them), and also those the store finds expired."""
    from sqlalchemy import text

    from server.cli import worker

    monkeypatch.setattr(worker, "BATCH", 3)
    *held, lapsed = submitted(db, *({"n": i} for i in range(6)))
    store = SqlStore(f"sqlite:///{db}")
    try:
        with store.engine.begin() as conn:
            for run_id, expires in [*((r, time.time() + 3600) for r in held), (lapsed, time.time() - 1)]:
                conn.execute(text("UPDATE runs SET status = 'running', lease_owner = :owner, lease_expires_at = "
                                  ":expires WHERE id = :id"), {"owner": ELSEWHERE, "expires": expires, "id": run_id})
    finally:
        store.close()
    rt = Runtime(store=SqlStore(f"sqlite:///{db}"))
    try:
        assert [r.id for r in worker.due(rt)] == [lapsed]
        assert worker.due(rt, {lapsed}) == []
    finally:
        rt.close()


@pytest.mark.parametrize("driving, said", [
    ([], "taking no more runs; it drives none, so it exits now"),
    (["run_a"], "waiting for the run it drives to end or pause (signal again"),
    (["run_a", "run_b"], "waiting for the 2 runs it drives to end or pause (signal again"),
    (["run_a", "compensate run_c"],
     "waiting for the run it drives to end or pause and for the compensation it makes to end"),
])
def test_a_first_stop_signal_says_what_the_worker_waits_for(driving: list[str], said: str,
                                                           capsys: pytest.CaptureFixture[str]):
    from server.cli.worker import _stop

    stopping = asyncio.Event()
    _stop(stopping, driving, signal.SIGTERM)
    err = capsys.readouterr().err
    assert stopping.is_set() and said in err and len(err.splitlines()) == 1
