"""``harness fork ... --queue`` and ``harness replay ... --queue``: the branch is left QUEUED
for the workers and the command returns at once, naming the run and how to follow it; a
real ``harness worker`` process then drives it with the effects mode and mocks it was
given, so a mocked fork never calls an effect for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runtime import InterruptKind, RunStatus, SqlStore
from server.cli import main

ROOT = Path(__file__).resolve().parents[2]

GRAPHS = textwrap.dedent('''
    import os
    from pathlib import Path
    from pydantic import BaseModel
    from runtime import Graph

    CALLS = Path(__file__).with_name("calls")

    def charge(amount):
        fd = os.open(CALLS, os.O_WRONLY | os.O_APPEND | os.O_CREAT)   # one line per real call, any process
        os.write(fd, f"{amount}\\n".encode())
        os.close(fd)
        return f"receipt-{amount}"

    class Order(BaseModel):
        amount: int = 10
        receipt: str = ""

    checkout = Graph("queued_checkout", state=Order)

    @checkout.node()
    def price(state):
        return {"amount": state.amount}

    @checkout.node(after=["price"])
    async def pay(state, ctx):
        return {"receipt": await ctx.effect("charge", lambda info: charge(state.amount),
                                            request={"amount": state.amount})}

    # a new version: one more node; only the replay given it runs it
    checkout_v2 = Graph("queued_checkout", state=Order)
    checkout_v2.node()(price)
    checkout_v2.node(after=["price"])(pay)

    @checkout_v2.node(after=["pay"])
    def thank(state):
        return {}
''')


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "queued_graphs.py").write_text(GRAPHS)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "queued_graphs", raising=False)
    monkeypatch.delenv("HARNESS_DB", raising=False)
    return tmp_path


def calls(folder: Path) -> list[str]:
    path = folder / "calls"
    return path.read_text().split() if path.exists() else []


def worker(folder: Path, db: str) -> tuple[int, str, str]:
    """A real ``harness worker`` process, until no run is left to take."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)])}
    done = subprocess.run([sys.executable, "-m", "server.cli", "--db", db, "worker", "queued_graphs:checkout",
                           "--once", "--poll", "0.05"], cwd=folder, env=env, text=True, capture_output=True,
                          timeout=120)
    return done.returncode, done.stdout, done.stderr


class Store:
    def __init__(self, db: str) -> None:
        self.db = db

    def __enter__(self) -> SqlStore:
        self.store = SqlStore(f"sqlite:///{self.db}")
        return self.store

    def __exit__(self, *exc: object) -> None:
        self.store.close()


def recorded(folder: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, str, str]:
    """A checkout run made here: (the database, the run, its checkpoint after ``price``)."""
    db = str(folder / "q.db")
    assert main(["--db", db, "--json", "run", "queued_graphs:checkout", "--input", '{"amount": 10}']) == 0
    run_id = json.loads(capsys.readouterr().out)["run"]["id"]
    assert calls(folder) == ["10"]
    with Store(db) as store:
        cp = next(c.id for c in store.checkpoints(run_id) if "price" in c.nodes)
    return db, run_id, cp


def test_a_queued_mocked_fork_is_driven_by_a_worker_process_without_calling_an_effect(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, _, cp = recorded(folder, capsys)
    code = main(["--db", db, "--json", "fork", cp, "--patch", '{"amount": 7}', "--mock", 'charge="mocked-7"',
                 "--max-steps", "9", "--queue"])
    out, err = capsys.readouterr()
    assert code == 0, err
    fork_id = json.loads(out)["run"]["id"]
    with Store(db) as store:
        queued = store.get_run(fork_id)
    assert queued.status == RunStatus.QUEUED and queued.lease_owner is None
    assert calls(folder) == ["10"]   # nothing of it ran in the command

    code, out, err = worker(folder, db)
    assert code == 0, err
    assert fork_id in out
    with Store(db) as store:
        done = store.get_run(fork_id)
        assert done.status == RunStatus.SUCCEEDED, done.error
        assert done.limits["max_steps"] == 9
        [served] = store.journal([fork_id])
        assert served.source == "mocks" and served.result == "mocked-7"
    assert calls(folder) == ["10"]   # the worker served the mock: the effect was never called for real


def test_a_queued_fork_the_recording_cannot_serve_pauses_in_the_worker_instead_of_going_live(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, _, cp = recorded(folder, capsys)
    assert main(["--db", db, "fork", cp, "--patch", '{"amount": 99}', "--queue"]) == 0
    out = capsys.readouterr().out
    fork_id = out.split()[0]
    assert f"follow it with: harness watch {fork_id}" in out   # the run named, and how to follow it

    code, _, err = worker(folder, db)
    assert code == 0, err
    with Store(db) as store:
        assert store.get_run(fork_id).status == RunStatus.INTERRUPTED
        [question] = store.interrupts(fork_id)
    assert question.kind == InterruptKind.UNRECORDED and question.node == "pay"
    assert calls(folder) == ["10"]


def test_a_queued_replay_is_driven_by_a_worker_process_and_its_report_read_after(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, run_id, _ = recorded(folder, capsys)
    assert main(["--db", db, "replay", run_id, "--queue"]) == 0
    out = capsys.readouterr().out
    replay_id = out.split()[0]
    assert "queued" in out.splitlines()[0] and f"harness watch {replay_id}" in out
    assert f"harness replay {replay_id} --report" in out

    code, _, err = worker(folder, db)
    assert code == 0, err
    assert main(["--db", db, "--json", "replay", replay_id, "--report"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "succeeded" and report["same"] is True
    assert calls(folder) == ["10"]


def test_a_queued_replay_of_new_code_is_run_by_a_worker_that_imports_it_by_reference(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, run_id, _ = recorded(folder, capsys)
    assert main(["--db", db, "--json", "replay", run_id, "--graph", "queued_graphs:checkout_v2", "--queue"]) == 0
    replay_id = json.loads(capsys.readouterr().out)["run"]["id"]

    code, _, err = worker(folder, db)   # started with the recorded version only
    assert code == 0, err
    assert main(["--db", db, "--json", "replay", replay_id, "--report"]) == 1   # it differs: a new node
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "succeeded"
    assert {n["node"]: n["verdict"] for n in report["nodes"]} == {"price": "same", "pay": "same", "thank": "new"}
    assert calls(folder) == ["10"]


def test_a_replay_report_is_not_queued(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, run_id, _ = recorded(folder, capsys)
    assert main(["--db", db, "replay", run_id, "--report", "--queue"]) == 2
    assert "--queue makes a new one" in capsys.readouterr().err
