"""Real processes sharing one database: two ``harness worker`` processes drive many
queued runs (each effect called once, each run driven by one worker from its claim to
its end), and two ``harness resume`` processes answering one question at once (one
wins, the other is told it was answered; the run goes on once)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runtime import Runtime, RunStatus, SqlStore, resolve_ref
from runtime.core.records import EventType

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

GRAPHS = textwrap.dedent('''
    import os
    from pathlib import Path
    from pydantic import BaseModel
    from runtime import Graph

    CALLS = Path(__file__).with_name("calls")

    def call(tag):
        fd = os.open(CALLS, os.O_WRONLY | os.O_APPEND | os.O_CREAT)   # one line per call, whoever calls
        os.write(fd, (tag + "\\n").encode())
        os.close(fd)
        return tag

    class S(BaseModel):
        n: int = 0

    class Approval(BaseModel):
        approve: bool

    work = Graph("shared_work", state=S)

    @work.node()
    async def a(state, ctx):
        await ctx.effect("a", lambda info: call(f"a{state.n}"))
        return {}

    @work.node()
    def b(state, ctx):
        ctx.effect("b", lambda info: call(f"b{state.n}"))
        return {}

    asked = Graph("shared_question", state=S)

    @asked.node()
    async def ask(state, ctx):
        answer = await ctx.interrupt({"question": "go?"}, response=Approval)
        await ctx.effect("send", lambda info: call(f"send{state.n}"))
        return {}
''')


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "shared_graphs.py").write_text(GRAPHS)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "shared_graphs", raising=False)
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.db'}"
    return str(request.getfixturevalue("pg_url"))


def submit(url: str, ref: str, n: int) -> list[str]:
    async def go() -> list[str]:
        rt = Runtime(store=SqlStore(url))
        try:
            return [(await rt.submit(resolve_ref(ref), {"n": i})).id for i in range(n)]
        finally:
            rt.close()
    return asyncio.run(go())


def harness(folder: Path, url: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)])}
    return subprocess.Popen([sys.executable, "-m", "server.cli", "--db", url, *args], cwd=folder, env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(procs: list[subprocess.Popen[str]]) -> list[tuple[int, str, str]]:
    done = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=120)
        finally:
            p.kill()
        done.append((p.returncode, out, err))
    return done


def test_two_workers_drive_every_run_once_and_call_every_effect_once(db: str, tmp_path: Path):
    ids = submit(db, "shared_graphs:work", 24)
    ended = finish([harness(tmp_path, db, "worker", "shared_graphs:work", "--once", "--poll", "0.02")
                    for _ in range(2)])
    assert [code for code, _, _ in ended] == [0, 0], ended
    assert all("Traceback" not in err for _, _, err in ended)
    calls = (tmp_path / "calls").read_text().split()
    assert sorted(calls) == sorted(f"{e}{n}" for e in "ab" for n in range(24))
    store = SqlStore(db)
    try:
        for run_id in ids:
            assert store.get_run(run_id).status == RunStatus.SUCCEEDED
            # claimed once and driven to its end by that worker: never recovered from a live one
            types = [ev.type for ev in store.events(run_id)]
            assert types.count(EventType.RUN_CLAIM) == 1 and EventType.RUN_RECOVER not in types, types
    finally:
        store.close()


def test_two_processes_answering_one_question_at_once_one_wins(db: str, tmp_path: Path):
    ids = submit(db, "shared_graphs:asked", 6)
    finish([harness(tmp_path, db, "worker", "shared_graphs:asked", "--once", "--poll", "0.02")])
    procs = {run_id: [harness(tmp_path, db, "resume", run_id, "--response", '{"approve": true}')
                      for _ in range(2)] for run_id in ids}
    store = SqlStore(db)
    try:
        for run_id, pair in procs.items():
            (c1, _, e1), (c2, _, e2) = finish(pair)
            assert sorted([c1, c2]) == [0, 2], (e1, e2)
            loser = e1 if c1 else e2
            assert "already answered" in loser and "Traceback" not in loser, loser
            assert store.get_run(run_id).status == RunStatus.SUCCEEDED
    finally:
        store.close()
    assert sorted((tmp_path / "calls").read_text().split()) == sorted(f"send{n}" for n in range(6))
