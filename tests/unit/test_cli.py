"""The harness command: the way a user drives runs from a shell."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from server.cli import main

GRAPH = textwrap.dedent('''
    from pydantic import BaseModel
    from runtime import Graph

    class Answer(BaseModel):
        approve: bool

    class State(BaseModel):
        order_id: int
        approved: bool = False
        total: int = 0

    graph = Graph("cli_demo", state=State)

    @graph.node()
    def total(state):
        return {"total": state.order_id * 2}

    @graph.node(after=["total"])
    async def confirm(state, ctx):
        answer = await ctx.interrupt({"question": "ok?"}, response=Answer)
        return {"approved": answer.approve}

    two = Graph("cli_two", state=State)

    @two.node()
    async def ask_a(state, ctx):
        await ctx.interrupt({"question": "a?"})

    @two.node()
    async def ask_b(state, ctx):
        await ctx.interrupt({"question": "b?"})

    broken = Graph("broken")
    broken.add_node("a", lambda s: None, after=["missing"])
''')


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    mod = f"cli_graph_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{mod}.py").write_text(GRAPH)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_DB", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    (tmp_path / "module_name").write_text(mod)
    return tmp_path


def harness(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_show_resume_round_trip(workdir: Path, capsys: pytest.CaptureFixture[str]):
    mod = (workdir / "module_name").read_text()
    code, out, err = harness(capsys, "run", f"{mod}:graph", "--input", '{"order_id": 21}', "--json")
    assert code == 0, err
    doc = json.loads(out)
    run_id = doc["run"]["id"]
    assert doc["run"]["status"] == "interrupted" and doc["state"]["total"] == 42
    assert doc["interrupts"][0]["payload"]["value"] == {"question": "ok?"}
    assert (workdir / "harness.db").exists()  # the default store is a SQLite file here

    code, out, err = harness(capsys, "resume", run_id, "--response", '{"approve": "perhaps"}')
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "approve: Input should be a valid boolean" in err

    code, out, _ = harness(capsys, "resume", run_id, "--response", '{"approve": true}')
    assert code == 0 and "succeeded" in out.splitlines()[0]
    code, out, _ = harness(capsys, "show", run_id, "--json")
    doc = json.loads(out)
    assert doc["state"] == {"order_id": 21, "approved": True, "total": 42}
    assert [cp["seq"] for cp in doc["checkpoints"]] == list(range(len(doc["checkpoints"])))


def test_resume_without_an_answer_says_which_option_gives_one(workdir: Path, capsys: pytest.CaptureFixture[str]):
    mod = (workdir / "module_name").read_text()
    run_id = json.loads(harness(capsys, "run", f"{mod}:graph", "--input", '{"order_id": 1}', "--json")[1])["run"]["id"]
    code, out, err = harness(capsys, "resume", run_id)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "is waiting for an answer to int_" in err
    assert f"answer with --response JSON (harness show {run_id} shows the question)" in err
    two = json.loads(harness(capsys, "run", f"{mod}:two", "--input", '{"order_id": 1}', "--json")[1])["run"]["id"]
    code, _, err = harness(capsys, "resume", two)
    assert code == 2 and "answer with --answers '{\"ID\": ANSWER, ...}'" in err


def test_runs_lists_newest_first_and_filters(workdir: Path, capsys: pytest.CaptureFixture[str]):
    mod = (workdir / "module_name").read_text()
    harness(capsys, "run", f"{mod}:graph", "--input", '{"order_id": 1}')
    harness(capsys, "run", f"{mod}:graph", "--input", '{"order_id": 2}')
    code, out, _ = harness(capsys, "runs", "--json")
    runs = json.loads(out)
    assert code == 0 and len(runs) == 2 and runs[0]["created_at"] >= runs[1]["created_at"]
    code, out, _ = harness(capsys, "runs", "--status", "succeeded")
    assert out.strip() == "no runs"


def test_cancel_a_paused_run(workdir: Path, capsys: pytest.CaptureFixture[str]):
    mod = (workdir / "module_name").read_text()
    _, out, _ = harness(capsys, "run", f"{mod}:graph", "--input", '{"order_id": 1}', "--json")
    run_id = json.loads(out)["run"]["id"]
    code, out, _ = harness(capsys, "cancel", run_id, "--reason", "duplicate order")
    assert code == 0 and "cancelled" in out
    code, _, err = harness(capsys, "cancel", run_id)
    assert code == 2 and "already cancelled" in err


def test_one_response_to_several_questions_says_how_to_answer_them_from_the_shell(
        workdir: Path, capsys: pytest.CaptureFixture[str]):
    mod = (workdir / "module_name").read_text()
    _, out, _ = harness(capsys, "run", f"{mod}:two", "--input", '{"order_id": 1}', "--json")
    run_id = json.loads(out)["run"]["id"]
    code, out, err = harness(capsys, "resume", run_id, "--response", "true")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "2 pending interrupts" in err and "from the command line: --answers" in err
    _, out, _ = harness(capsys, "show", run_id, "--json")
    assert json.loads(out)["run"]["status"] == "interrupted"


@pytest.mark.parametrize("args, message", [
    (["show", "run_nope"], "no run with id 'run_nope'"),
    (["run", "no_such_module:graph"], "cannot import 'no_such_module'"),
    (["run", "MODULE:broken"], "invalid graph: node 'a'"),
    (["run", "MODULE:graph", "--input", "{oops"], "--input is not valid JSON"),
    (["run", "MODULE:graph", "--input", '{"order_id": "x"}'], "order_id: Input should be a valid integer"),
    (["run", "plan.json"], "cannot read plan plan.json"),
    (["run", "MODULE:graph", "--input", '"abc"'], "input must be an object"),
    (["runs", "--db", "postgresql://u@localhost/x"], "database"),
])
def test_user_mistakes_are_one_line_and_exit_2(workdir: Path, capsys: pytest.CaptureFixture[str],
                                              args: list[str], message: str):
    mod = (workdir / "module_name").read_text()
    code, out, err = harness(capsys, *[a.replace("MODULE", mod) for a in args])
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_installed_console_script_runs_a_plan(tmp_path: Path):
    repo = Path(__file__).resolve().parents[2]
    exe = Path(sys.executable).with_name("harness")
    proc = subprocess.run([str(exe), "run", str(repo / "examples" / "pipeline.json"), "--db",
                           str(tmp_path / "x.db"), "--json"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["run"]["status"] == "succeeded"
    assert doc["state"]["report"] == "3 items; urgent: inbox-0"


def test_a_module_that_fails_to_import_is_one_line(workdir: Path, capsys: pytest.CaptureFixture[str]):
    (workdir / "broken_mod.py").write_text("raise NameError('oops in module')\n")
    code, out, err = harness(capsys, "run", "broken_mod:graph")
    assert code == 2 and "importing 'broken_mod' failed: NameError: oops in module" in err
    assert err.count("\n") == 1


def test_a_run_whose_code_the_command_cannot_find_names_the_option_that_gives_it(
        workdir: Path, capsys: pytest.CaptureFixture[str]):
    """A run started from a script that registered its graph in code: the command line is
    told to give the code with --graph, not to pass it to Runtime(graphs=[...])."""
    import asyncio

    from runtime import Graph, Runtime, SqlStore

    g = Graph("made_in_a_script")

    @g.node()
    async def ask(state, ctx):
        await ctx.interrupt({"question": "go on?"})

    db = str(workdir / "script.db")
    rt = Runtime(store=SqlStore(f"sqlite:///{db}"), graphs=[g])
    try:
        run = asyncio.run(rt.start(g, {}))
    finally:
        rt.close()
    code, out, err = harness(capsys, "resume", run.id, "--response", "true", "--db", db)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "'made_in_a_script'" in err and "give its code with --graph MODULE:GRAPH" in err
    assert "Runtime(graphs=" not in err
    # cancelling it runs no code: it needs none
    code, out, err = harness(capsys, "cancel", run.id, "--reason", "not needed", "--db", db)
    assert code == 0 and err == "" and "cancelled" in out


def test_a_cancel_whose_policy_cannot_undo_an_effect_here_says_so(workdir: Path, capsys: pytest.CaptureFixture[str]):
    """The run undoes its effects when cancelled (compensate_on), and the undo is nothing this
    command can run: the cancel goes through, and says the compensation is incomplete."""
    import asyncio

    from runtime import Graph, Runtime, SqlStore

    g = Graph("booked_then_asked")
    undone: list[str] = []

    @g.node()
    async def book(state, ctx):
        await ctx.effect("book", lambda: "seat 4", compensate=lambda info: undone.append(info.key))
        await ctx.interrupt({"question": "pay?"})

    db = str(workdir / "script.db")
    rt = Runtime(store=SqlStore(f"sqlite:///{db}"), graphs=[g])
    try:
        run = asyncio.run(rt.start(g, {}, compensate_on=["cancelled"]))
    finally:
        rt.close()
    code, out, err = harness(capsys, "cancel", run.id, "--db", db)
    assert code == 1 and "cancelled" in out and undone == []
    assert "compensation incomplete: 1 effect(s) not undone (book book #0)" in err
    assert f"harness compensate {run.id}" in err
