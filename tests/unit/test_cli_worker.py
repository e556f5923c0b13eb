"""``harness worker MODULE:GRAPH ...``: drives the runs ``Runtime.submit`` queued, oldest
first, and recovers a run whose process is gone; ``--once`` exits when none is left."""

from __future__ import annotations

import asyncio
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runtime import Runtime, RunStatus, SqlStore, resolve_ref
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
