"""Stopping ``harness worker`` (a real process, real signals) never ends the runs it drives:
the first SIGTERM lets them finish and takes no more runs; a second stops it at once,
and another worker recovers what it left, as after a crash."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from runtime import Runtime, RunStatus, SqlStore, resolve_ref
from server.cli import main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

GRAPHS = textwrap.dedent('''
    import asyncio
    from pathlib import Path
    from pydantic import BaseModel
    from runtime import Graph

    GO = Path(__file__).with_name("go")   # its node ends once this file exists

    class S(BaseModel):
        n: int = 0

    gated = Graph("gated_work", state=S)

    @gated.node()
    async def wait_for_go(state):
        while not GO.exists():
            await asyncio.sleep(0.02)
        return {"n": state.n + 1}
''')


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "stop_graphs.py").write_text(GRAPHS)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "stop_graphs", raising=False)
    return tmp_path


def submit(db: Path, n: int) -> str:
    async def go() -> str:
        rt = Runtime(store=SqlStore(f"sqlite:///{db}"))
        try:
            return (await rt.submit(resolve_ref("stop_graphs:gated"), {"n": n})).id
        finally:
            rt.close()
    return asyncio.run(go())


def status(db: Path, run_id: str) -> RunStatus:
    store = SqlStore(f"sqlite:///{db}")
    try:
        return store.get_run(run_id).status
    finally:
        store.close()


@contextmanager
def worker_driving(folder: Path, db: Path, run_id: str) -> Iterator[subprocess.Popen[str]]:
    """A ``harness worker`` process, once it drives ``run_id``; killed on the way out."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)])}
    proc = subprocess.Popen([sys.executable, "-m", "server.cli", "--db", str(db), "worker", "stop_graphs:gated",
                             "--poll", "0.05"], cwd=folder, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while status(db, run_id) != RunStatus.RUNNING:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the worker never took the run"
            time.sleep(0.05)
        yield proc
    finally:
        proc.kill()


def test_a_stopped_worker_finishes_the_runs_it_drives_and_takes_no_more(folder: Path):
    db = folder / "w.db"
    first = submit(db, 1)
    with worker_driving(folder, db, first) as proc:
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None   # still driving the run it took
        later = submit(db, 2)
        time.sleep(0.5)
        assert status(db, later) == RunStatus.QUEUED   # taken by no one: the worker is stopping
        (folder / "go").touch()
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert status(db, first) == RunStatus.SUCCEEDED and first in out
    assert "taking no more runs" in err and "Traceback" not in err
    assert status(db, later) == RunStatus.QUEUED


def test_a_second_signal_stops_at_once_and_another_worker_recovers_the_run(folder: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]):
    db = folder / "w.db"
    run_id = submit(db, 1)
    with worker_driving(folder, db, run_id) as proc:
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGTERM, err   # it died of the signal, as without a handler
    assert "stopped at once" in err and "Traceback" not in err
    assert status(db, run_id) == RunStatus.RUNNING   # not cancelled: its process is gone
    (folder / "go").touch()
    monkeypatch.chdir(folder)
    code = main(["--db", str(db), "worker", "stop_graphs:gated", "--once", "--poll", "0.05"])
    assert code == 0 and run_id in capsys.readouterr().out
    assert status(db, run_id) == RunStatus.SUCCEEDED
