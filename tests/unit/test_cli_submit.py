"""``harness submit MODULE:GRAPH --input JSON``: queues a run for ``harness worker`` and
prints its id (``--json``: the run); nothing of it runs here."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from runtime import RunKind, RunStatus, SqlStore
from server.cli import main

GRAPHS = textwrap.dedent('''
    from pydantic import BaseModel
    from runtime import Graph

    class S(BaseModel):
        n: int = 0

    graph = Graph("submitted_work", state=S)

    @graph.node()
    def step(state):
        return {"n": state.n + 1}
''')


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "submit_graphs.py").write_text(GRAPHS)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "submit_graphs", raising=False)
    monkeypatch.delenv("HARNESS_DB", raising=False)
    return str(tmp_path / "q.db")


def stored(db: str) -> list:
    store = SqlStore(f"sqlite:///{db}")
    try:
        return store.list_runs(None, limit=100)
    finally:
        store.close()


def test_submit_prints_the_id_of_a_queued_run_a_worker_then_drives(db: str, capsys: pytest.CaptureFixture[str]):
    code = main(["--db", db, "submit", "submit_graphs:graph", "--input", '{"n": 41}', "--max-steps", "5"])
    out, err = capsys.readouterr()
    [run] = stored(db)
    assert (code, out, err) == (0, f"{run.id}\n", "")
    assert run.status == RunStatus.QUEUED and run.input == {"n": 41} and run.limits["max_steps"] == 5
    assert main(["--db", db, "worker", "--once"]) == 0
    assert run.id in capsys.readouterr().out
    [done] = stored(db)
    assert done.status == RunStatus.SUCCEEDED


def test_submit_json_prints_the_run(db: str, capsys: pytest.CaptureFixture[str]):
    code = main(["--db", db, "submit", "submit_graphs:graph", "--json", "--thread", "t1"])
    printed = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (printed["status"], printed["thread_id"], printed["graph_name"]) == ("queued", "t1", "submitted_work")
    assert printed["id"] == stored(db)[0].id


def test_submit_to_a_thread_queues_its_next_turn(db: str, capsys: pytest.CaptureFixture[str]):
    assert main(["--db", db, "submit", "submit_graphs:graph", "--thread", "chat"]) == 0
    assert main(["--db", db, "worker", "--once"]) == 0
    first = stored(db)[0]
    assert main(["--db", db, "submit", "submit_graphs:graph", "--thread", "chat", "--input", '{"n": 7}']) == 0
    turn = stored(db)[0]
    assert turn.id != first.id and turn.status == RunStatus.QUEUED
    assert (turn.kind, turn.thread_id, turn.parent_run_id, turn.options.get("turn")) == \
        (RunKind.MAIN, "chat", first.id, 2)


@pytest.mark.parametrize(("args", "named"), [
    (["--input", "{oops"], "--input is not valid JSON"),
    (["--input", "[1]"], "input must be an object"),
    (["--input", '{"n": "x"}'], "n: Input should be a valid integer"),
    (["--max-steps", "0"], "--max-steps"),
])
def test_a_mistake_is_one_line_and_queues_nothing(db: str, capsys: pytest.CaptureFixture[str],
                                                  args: list[str], named: str):
    code = main(["--db", db, "submit", "submit_graphs:graph", *args])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and named in err
    assert not Path(db).exists() or stored(db) == []
