"""``harness resume RUN --queue``: an answer given from the command line leaves the run to
the workers; the command returns at once, and the next ``harness worker`` goes on with it."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from pathlib import Path

import pytest

from runtime import Runtime, RunStatus, SqlStore, resolve_ref
from server.cli import main

GRAPHS = textwrap.dedent('''
    from pydantic import BaseModel
    from runtime import Graph

    class Approval(BaseModel):
        approve: bool

    class S(BaseModel):
        approved: bool = False
        paid: int = 0

    PAID = []
    graph = Graph("asked_work", state=S)

    @graph.node()
    async def ask(state, ctx):
        return {"approved": (await ctx.interrupt({"question": "pay?"}, response=Approval)).approve}

    @graph.node(after=["ask"])
    def pay(state):
        PAID.append(1)
        return {"paid": len(PAID)}
''')


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "asked_graphs.py").write_text(GRAPHS)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "asked_graphs", raising=False)
    return str(tmp_path / "q.db")


def status(db: str, run_id: str) -> RunStatus:
    store = SqlStore(f"sqlite:///{db}")
    try:
        return store.get_run(run_id).status
    finally:
        store.close()


def test_an_answer_given_with_queue_is_left_to_the_next_worker(db: str, capsys: pytest.CaptureFixture[str]):
    async def submit() -> str:
        rt = Runtime(store=SqlStore(f"sqlite:///{db}"))
        try:
            return (await rt.submit(resolve_ref("asked_graphs:graph"), {})).id
        finally:
            rt.close()

    run_id = asyncio.run(submit())
    assert main(["--db", db, "worker", "asked_graphs:graph", "--once"]) == 0
    assert status(db, run_id) == RunStatus.INTERRUPTED
    capsys.readouterr()

    code = main(["--db", db, "--json", "resume", run_id, "--response", '{"approve": true}', "--queue"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["run"]["status"] == "queued"
    import asked_graphs   # the command's process ran nothing of the run
    assert asked_graphs.PAID == []   # type: ignore[attr-defined]

    assert main(["--db", db, "worker", "asked_graphs:graph", "--once"]) == 0
    assert status(db, run_id) == RunStatus.SUCCEEDED
    assert asked_graphs.PAID == [1]   # type: ignore[attr-defined]
