"""Compensations left to workers: ``harness compensate RUN --queue`` (``compensate(queue=True)``)
and a cancel whose policy compensates it, made with ``cancel(queue=True)``, undo nothing in
the process that asks; a real ``harness worker`` process makes the compensation, once, and
forgets the ask. A worker that cannot import an undo function leaves the ask for one that can."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runtime import InvalidRequest, Runtime, RunStatus, SqlStore
from runtime.core.records import EffectStatus
from server.cli import main

ROOT = Path(__file__).resolve().parents[2]

GRAPHS = textwrap.dedent('''
    import os
    from pathlib import Path
    from pydantic import BaseModel
    from runtime import Graph

    HERE = Path(__file__).parent

    def note(name, line):
        fd = os.open(HERE / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)   # one line per real call, any process
        os.write(fd, f"{line}\\n".encode())
        os.close(fd)

    def release(info):
        note("undone", info.result)

    class Trip(BaseModel):
        city: str = "Oslo"
        booking: str = ""
        approved: bool = False

    def booking_graph(name, undo):
        g = Graph(name, state=Trip)

        @g.node()
        async def book(state, ctx):
            def reserve():
                note("booked", state.city)
                return f"hotel-{state.city}"
            return {"booking": await ctx.effect("hotel", reserve, request={"city": state.city}, compensate=undo)}

        @g.node(after=["book"])
        def approve(state, ctx):
            return {"approved": bool(ctx.interrupt({"question": f"keep {state.booking}?"}))}

        return g

    class Receipt:   # what a careless undo returns: no JSON form
        pass

    def release_oddly(info):
        note("undone", info.result)
        return Receipt()

    trip = booking_graph("asked_trip", release)
    odd_trip = booking_graph("asked_odd_trip", release_oddly)
    # its undo a lambda: no other process can import it
    local_trip = booking_graph("asked_local_trip", lambda info: note("undone", info.result))

    if os.environ.get("ASKED_UNDO_HERE"):   # defined in the asking process only, not in the worker
        def release_here(info):
            note("undone", info.result)

        here_trip = booking_graph("asked_here_trip", release_here)
''')


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "asked_graphs.py").write_text(GRAPHS)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "asked_graphs", raising=False)
    monkeypatch.delenv("HARNESS_DB", raising=False)
    return tmp_path


def lines(folder: Path, name: str) -> list[str]:
    path = folder / name
    return path.read_text().split() if path.exists() else []


def worker(folder: Path, db: str) -> tuple[int, str, str]:
    """A real ``harness worker`` process, until nothing is left to take."""
    env = {**{k: v for k, v in os.environ.items() if k != "ASKED_UNDO_HERE"},
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)])}
    done = subprocess.run([sys.executable, "-m", "server.cli", "--db", db, "worker", "asked_graphs:trip",
                           "asked_graphs:local_trip", "asked_graphs:odd_trip", "--once", "--poll", "0.05"],
                          cwd=folder, env=env, text=True, capture_output=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


def paused_trip(db: str, graph: str = "trip", **options: object) -> str:
    """A trip whose hotel is booked, paused for approval."""
    import asked_graphs

    async def go() -> str:
        rt = Runtime(store=SqlStore(f"sqlite:///{db}"))
        try:
            run = await rt.start(getattr(asked_graphs, graph), {"city": "Oslo"}, **options)
            assert run.status == RunStatus.INTERRUPTED
            return run.id
        finally:
            rt.close()
    return asyncio.run(go())


def store(db: str) -> SqlStore:
    return SqlStore(f"sqlite:///{db}")


def test_a_compensation_asked_with_queue_is_made_once_by_a_worker_process(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(folder / "t.db")
    run_id = paused_trip(db)
    assert main(["--db", db, "cancel", run_id]) == 0   # no policy: nothing undone by the cancel
    capsys.readouterr()
    assert main(["--db", db, "--json", "compensate", run_id, "--queue"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {"run_id": run_id, "complete": False, "queued": True, "steps": []}
    assert lines(folder, "undone") == []   # nothing undone by the command
    s = store(db)
    try:
        [ask] = s.compensation_asks()
        assert ask.run_id == run_id and not ask.retry_in_doubt
    finally:
        s.close()

    code, out, err = worker(folder, db)
    assert code == 0, err
    assert f"compensated {run_id}:" in out and "compensation complete" in out
    assert lines(folder, "undone") == ["hotel-Oslo"]
    s = store(db)
    try:
        assert s.compensation_asks() == []
        assert [e.status for e in s.journal([run_id])][-1] == EffectStatus.COMPENSATED
    finally:
        s.close()
    code, _, err = worker(folder, db)   # nothing left to take: undone once
    assert code == 0, err
    assert lines(folder, "undone") == ["hotel-Oslo"] and lines(folder, "booked") == ["Oslo"]


def test_a_cancel_that_leaves_its_policy_to_workers_undoes_nothing_itself(folder: Path) -> None:
    db = str(folder / "t.db")
    run_id = paused_trip(db, compensate_on=["cancelled"])

    async def cancel() -> RunStatus:
        rt = Runtime(store=store(db))   # a process without the graph's code, as a debugger for workers
        try:
            return (await rt.cancel(run_id, "not needed", queue=True)).status
        finally:
            rt.close()
    assert asyncio.run(cancel()) == RunStatus.CANCELLED
    assert lines(folder, "undone") == []
    code, _, err = worker(folder, db)
    assert code == 0, err
    assert lines(folder, "undone") == ["hotel-Oslo"]


def test_a_worker_that_cannot_import_an_undo_leaves_the_ask_for_one_that_can(
        folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = str(folder / "t.db")
    monkeypatch.setenv("ASKED_UNDO_HERE", "1")   # the undo exists here, not where the worker runs
    run_id = paused_trip(db, "here_trip", compensate_on=["cancelled"])

    async def cancel() -> None:
        rt = Runtime(store=store(db))
        try:
            await rt.cancel(run_id, queue=True)
        finally:
            rt.close()
    asyncio.run(cancel())
    code, _, err = worker(folder, db)
    assert code == 1   # --once: a piece of work was left as it is
    assert f"run {run_id}: its compensation is left to a worker that can import its undo functions" in err
    assert lines(folder, "undone") == []
    s = store(db)
    try:
        assert [a.run_id for a in s.compensation_asks()] == [run_id]
    finally:
        s.close()


def test_asking_is_refused_for_a_run_that_has_not_ended_and_asks_nothing_with_nothing_to_undo(folder: Path) -> None:
    db = str(folder / "t.db")
    run_id = paused_trip(db)

    async def go() -> None:
        rt = Runtime(store=store(db))
        try:
            with pytest.raises(InvalidRequest, match="only an ended run is compensated"):
                await rt.compensate(run_id, queue=True)
            with pytest.raises(InvalidRequest, match="queue must be True or False"):
                await rt.compensate(run_id, queue="yes")  # type: ignore[arg-type]
            assert rt.store.compensation_asks() == []
            await rt.cancel(run_id)
            for queue in (False, True):   # "no" would read as true: an in-doubt undo made again
                with pytest.raises(InvalidRequest, match="retry_in_doubt must be True or False"):
                    await rt.compensate(run_id, retry_in_doubt="no", queue=queue)  # type: ignore[arg-type]
            assert rt.store.compensation_asks() == [] and lines(folder, "undone") == []
            first = await rt.compensate(run_id)   # undone here
            assert first.complete and not first.queued
            again = await rt.compensate(run_id, queue=True)   # nothing left: asks nothing
            assert again.complete and not again.queued and rt.store.compensation_asks() == []
        finally:
            rt.close()
    asyncio.run(go())
    assert lines(folder, "undone") == ["hotel-Oslo"]


def test_an_undo_whose_result_has_no_json_form_is_recorded_as_made_and_the_worker_goes_on(folder: Path) -> None:
    """The undo ran: its result is left out of the journal, which says it was made. Left in
    doubt (or the worker stopped by the error), asking again would undo the booking twice."""
    db = str(folder / "t.db")
    run_id = paused_trip(db, "odd_trip")
    assert main(["--db", db, "cancel", run_id]) == 0
    assert main(["--db", db, "compensate", run_id, "--queue", "--retry-in-doubt"]) == 0
    code, out, err = worker(folder, db)
    assert code == 0, err
    assert f"compensated {run_id}:" in out and "not JSON-serialisable" in out and "compensation complete" in out
    assert lines(folder, "undone") == ["hotel-Oslo"]
    s = store(db)
    try:
        assert s.compensation_asks() == []
        last = s.journal([run_id])[-1]
        assert (last.status, last.result) == (EffectStatus.COMPENSATED, None)
    finally:
        s.close()
    code, _, err = worker(folder, db)   # nothing left: the booking is not released again
    assert code == 0, err
    assert lines(folder, "undone") == ["hotel-Oslo"]


def test_asking_a_worker_for_an_undo_no_worker_can_import_is_refused(folder: Path) -> None:
    """A lambda undo is held by the process that ran the effect alone: the ask would wait for ever."""
    db = str(folder / "t.db")
    import asked_graphs

    async def go() -> None:
        rt = Runtime(store=store(db))
        try:
            run = await rt.start(asked_graphs.local_trip, {"city": "Oslo"})
            await rt.cancel(run.id)
            with pytest.raises(InvalidRequest, match="'hotel' of node 'book' is a lambda.*compensate it here, "
                                                     "without queue"):
                await rt.compensate(run.id, queue=True)
            other = Runtime(store=store(db))
            try:
                with pytest.raises(InvalidRequest, match="only the process that ran it holds it"):
                    await other.compensate(run.id, queue=True)
            finally:
                other.close()
            assert rt.store.compensation_asks() == [] and lines(folder, "undone") == []
            report = await rt.compensate(run.id)
            assert report.complete and lines(folder, "undone") == ["hotel-Oslo"]
        finally:
            rt.close()
    asyncio.run(go())


def test_a_cancel_whose_policy_meets_a_lambda_undo_undoes_it_where_it_is_held_and_asks_no_worker(
        folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    """No worker could make such an ask: it would wait for ever. The process that ran the
    effect holds the undo and makes it; another undoes what it can, as a cancel without
    queue does, says what was left, and asks nothing."""
    db = str(folder / "t.db")
    import asked_graphs

    async def go() -> None:
        rt = Runtime(store=store(db))
        try:
            held = await rt.start(asked_graphs.local_trip, {"city": "Oslo"}, compensate_on=["cancelled"])
            await rt.cancel(held.id, queue=True)
            assert lines(folder, "undone") == ["hotel-Oslo"] and rt.store.compensation_asks() == []
        finally:
            rt.close()
    asyncio.run(go())

    run_id = paused_trip(db, "local_trip", compensate_on=["cancelled"])   # its process has ended

    async def cancel() -> None:
        rt = Runtime(store=store(db))
        try:
            await rt.cancel(run_id, queue=True)
            assert rt.store.compensation_asks() == []
        finally:
            rt.close()
    asyncio.run(cancel())
    assert lines(folder, "undone") == ["hotel-Oslo"]
    assert any(f"run {run_id} ended cancelled" in r.getMessage() and "1 were not undone" in r.getMessage()
               and "not_runnable" in r.getMessage() for r in caplog.records)
