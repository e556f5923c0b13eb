"""A ``harness worker`` frozen (SIGSTOP) past its lease: another worker takes the run over
within about ``--lease-ttl`` plus a poll and ends it; the frozen one, once thawed, says
in one line that it lost the run's lease, and the node's work after the takeover is
the other worker's alone."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime import RunStatus, SqlStore

from test_worker_outage import GRAPHS, submit, wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def worker(folder: Path, url: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)])}
    return subprocess.Popen([sys.executable, "-m", "server.cli", "--db", url, "worker", "--poll", "0.2",
                             "--lease-ttl", "2"], cwd=folder, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def freeze(p: subprocess.Popen[str], url: str) -> None:
    """SIGSTOP ``p``; on SQLite, at a moment it holds no write transaction (a process frozen
    holding the file's write lock holds up every writer: README). On PostgreSQL any moment
    will do: the server ends a transaction the frozen process left idle."""
    while True:
        p.send_signal(signal.SIGSTOP)
        if not url.startswith("sqlite"):
            return
        probe = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=0)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.rollback()
            return
        except sqlite3.OperationalError:   # frozen mid-write: let it finish, and try again
            p.send_signal(signal.SIGCONT)
            time.sleep(0.02)
        finally:
            probe.close()


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "outage_graphs.py").write_text(GRAPHS)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "outage_graphs", raising=False)
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'takeover.db'}"
    return str(request.getfixturevalue("pg_url"))


def test_a_worker_frozen_past_its_lease_says_it_lost_the_run(url: str, tmp_path: Path):
    store = SqlStore(url)
    first = worker(tmp_path, url)
    second: subprocess.Popen[str] | None = None
    taker = None
    try:
        run_id = submit(url, 3.0)
        wait_for("the first worker to take the run", lambda: store.get_run(run_id).status == RunStatus.RUNNING, 15)
        owner = store.get_run(run_id).lease_owner
        freeze(first, url)
        frozen = time.monotonic()
        second = worker(tmp_path, url)
        wait_for("the second worker to take the run over", lambda: store.get_run(run_id).lease_owner != owner, 15)
        taken_after = time.monotonic() - frozen
        taker = store.get_run(run_id).lease_owner
        first.send_signal(signal.SIGCONT)
        wait_for("the run to end", lambda: store.get_run(run_id).status == RunStatus.SUCCEEDED, 30)
        # the lease (2 s) plus the second worker's start and a poll; not the default 30 s lease
        assert taken_after < 10, taken_after
        time.sleep(1)   # for the first worker to meet the lease it lost
    finally:
        first.send_signal(signal.SIGCONT)
        for p in (first, second):
            if p is not None:
                p.send_signal(signal.SIGTERM)
        store.close()
    out1, err1 = first.communicate(timeout=30)
    assert second is not None
    out2, err2 = second.communicate(timeout=30)
    assert (first.returncode, second.returncode) == (0, 0), (err1, err2)
    assert "Traceback" not in err1 + err2
    said = [line for line in err1.splitlines() if "lost its lease" in line]
    assert len(said) == 1 and run_id in said[0] and f"to {taker} " in said[0], err1
    assert run_id in out2 and run_id not in out1
