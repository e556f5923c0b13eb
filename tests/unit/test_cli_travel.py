"""The time-travel commands of ``harness``: history, diff, fork, replay, compensate,
export and import, against real SQLite files."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from server.cli import main

#: a refund graph: lookup -> pay (an effect with a module-level compensation) -> finish.
#: FACTOR, EXTRA and NOTE are replaced to make changed versions of the code.
GRAPH = textwrap.dedent('''
    from typing import Annotated
    from pydantic import BaseModel
    from runtime import Graph, append

    UNDONE: list[str] = []

    class State(BaseModel):
        order_id: int
        amount: float = 0.0
        receipt: str = ""
        notes: Annotated[list[str], append] = []
        x: int = 0

    def undo(info):
        UNDONE.append(info.result)
        return "refund reversed"

    graph = Graph("travel", state=State)

    @graph.node()
    def lookup(state):
        return {"amount": state.order_id * FACTOR, "x": 2, "notes": ["looked up"]}

    @graph.node(after=["lookup"])
    async def pay(state, ctx):
        receipt = await ctx.effect("payments.refund", lambda: f"rcpt-{state.order_id}",
                                   request={"order": state.order_id, "amount": state.amount}, compensate=undo)
        EXTRA
        return {"receipt": receipt, "notes": [f"paid {state.amount}"]}

    @graph.node(after=["pay"])
    def finish(state):
        return {"x": state.x + 3, "notes": ["NOTE"]}
''')
VERSIONS = {
    "": {"FACTOR": "10.0", "EXTRA": "pass", "NOTE": "done"},
    "_v2": {"FACTOR": "20.0", "EXTRA": "pass", "NOTE": "finished"},
    "_v3": {"FACTOR": "10.0", "EXTRA": 'await ctx.effect("mail.send", lambda: "sent", request={"to": "ada"})',
            "NOTE": "done"},
}


class Harness:
    """Runs ``harness`` in-process against a SQLite file in the test's directory."""

    def __init__(self, workdir: Path, module: str, capsys: pytest.CaptureFixture[str]):
        self.dir, self.module, self.capsys = workdir, module, capsys

    def __call__(self, *args: str, db: str = "a.db") -> tuple[int, str, str]:
        code = main([*args, "--db", str(self.dir / db)])
        out, err = self.capsys.readouterr()
        return code, out, err

    def json(self, *args: str, db: str = "a.db") -> Any:
        code, out, err = self(*args, "--json", db=db)
        assert code in (0, 1), err
        return json.loads(out)

    def start(self, order_id: int = 3) -> str:
        doc = self.json("run", f"{self.module}:graph", "--input", json.dumps({"order_id": order_id}))
        assert doc["run"]["status"] == "succeeded"
        return str(doc["run"]["id"])

    def checkpoints(self, run_id: str, db: str = "a.db") -> list[str]:
        return [cp["id"] for cp in self.json("history", run_id, "--no-state", db=db)]

    def run_count(self) -> int:
        return len(self.json("runs"))


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Harness:
    module = f"travel_{tmp_path.name.replace('-', '_')}"
    for suffix, values in VERSIONS.items():
        text = GRAPH
        for key, value in values.items():
            text = text.replace(key, value)
        (tmp_path / f"{module}{suffix}.py").write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_DB", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    return Harness(tmp_path, module, capsys)


def test_history_lists_checkpoints_oldest_first(harness: Harness):
    run_id = harness.start()
    code, out, _ = harness("history", run_id)
    lines = out.splitlines()
    assert code == 0 and run_id in lines[0] and "succeeded" in lines[0] and len(lines) == 5
    assert "#0" in lines[1] and "input" in lines[1] and "next: lookup" in lines[1]
    assert "folded: lookup" in lines[2] and "next: pay" in lines[2] and "pending writes: 1" in lines[2]
    assert "folded: finish" in lines[4] and "next: -" in lines[4] and "pending writes: 0" in lines[4]

    views = harness.json("history", run_id)
    assert [v["seq"] for v in views] == [0, 1, 2, 3]
    assert [v["source"] for v in views] == ["input", "step", "step", "step"]
    assert [v["ready"] for v in views] == [["lookup"], ["pay"], ["finish"], []]
    assert views[-1]["state"]["notes"] == ["looked up", "paid 30.0", "done"]
    assert all("state" not in v for v in harness.json("history", run_id, "--no-state"))



def test_history_without_the_graphs_code_says_what_runs_next_cannot_be_decided(harness: Harness):
    run_id = harness.start()
    (harness.dir / f"{harness.module}.py").unlink()   # the code the run's reference names is gone
    sys.modules.pop(harness.module, None)
    importlib.invalidate_caches()
    code, out, _ = harness("history", run_id)
    lines = out.splitlines()
    # not "next: -", which says nothing runs next: without ``when=`` to ask, it is not known
    assert code == 0 and len(lines) == 6 and "next: -" not in out
    assert all("next: ?" in line for line in lines[1:5]) and "folded: lookup" in lines[2]
    assert "the graph's code is not loaded here" in lines[5] and "--graph MODULE:GRAPH" in lines[5]
    assert [v["ready"] for v in harness.json("history", run_id, "--no-state")] == [None] * 4

def test_diff_between_two_checkpoints(harness: Harness):
    cps = harness.checkpoints(harness.start())
    code, out, _ = harness("diff", cps[0], cps[1])
    assert code == 0
    assert out.splitlines() == ["~ amount: 0.0 -> 30.0", '+ notes[0]: "looked up"', "~ x: 0 -> 2"]
    changes = harness.json("diff", cps[1], cps[3])
    assert {"path": ["x"], "op": "changed", "old": 2, "new": 5} in changes
    assert harness("diff", cps[2], cps[2])[1].strip() == "no differences"
    assert harness.json("diff", cps[3], cps[3]) == []


def test_fork_with_a_patch_pauses_on_an_unrecorded_effect_then_resume_answers_it(harness: Harness):
    run_id = harness.start()
    before_pay = harness.checkpoints(run_id)[1]
    code, out, err = harness("fork", before_pay, "--patch", '{"order_id": 5}')
    assert code == 0, err
    fork_id = out.split()[0]
    assert "interrupted" in out.splitlines()[0] and f"(from {run_id})" in out.splitlines()[0]
    assert ("effect 'payments.refund' #0 has no recorded result for request "
            '{"order": 5, "amount": 30.0} (recorded: {"order": 3, "amount": 30.0})') in out
    assert f"""harness resume {fork_id} --response '{{"action": "mock", "result": <json>}}'""" in out

    code, out, err = harness("resume", fork_id, "--response", '{"action": "mock", "result": "rcpt-manual"}')
    assert code == 0 and "succeeded" in out.splitlines()[0], err
    history = harness.json("history", fork_id)
    assert [v["source"] for v in history][:2] == ["fork", "patch"]
    assert history[0]["parent_id"] == before_pay
    assert history[-1]["state"] == {"order_id": 5, "amount": 30.0, "receipt": "rcpt-manual",
                                    "notes": ["looked up", "paid 30.0", "done"], "x": 5}


@pytest.mark.parametrize("options, receipt", [
    (["--mock", 'payments.refund="R=6"'], "R=6"),   # NAME=JSON splits on the first '='
    (["--effects", "live"], "rcpt-6"),
])
def test_fork_with_mocks_or_live_effects_completes(harness: Harness, options: list[str], receipt: str):
    cp = harness.checkpoints(harness.start())[1]
    doc = harness.json("fork", cp, "--patch", '{"order_id": 6}', *options)
    assert doc["run"]["status"] == "succeeded" and doc["run"]["kind"] == "fork"
    assert doc["state"]["receipt"] == receipt and doc["interrupts"] == []


def test_a_fork_names_the_mocks_no_effect_called(harness: Harness):
    cp = harness.checkpoints(harness.start())[1]
    mocks = ["--mock", 'payments.refund="R"', "--mock", 'payments.refnd="typo"']
    doc = harness.json("fork", cp, "--patch", '{"order_id": 6}', *mocks)
    assert doc["run"]["status"] == "succeeded" and doc["unused_mocks"] == ["payments.refnd"]
    code, out, _ = harness("fork", cp, "--patch", '{"order_id": 7}', *mocks)
    assert code == 0 and "mocks never used: 'payments.refnd'" in out
    code, out, _ = harness("fork", cp, "--patch", '{"order_id": 8}', *mocks[:2])
    assert code == 0 and "never used" not in out


@pytest.mark.parametrize("options, message", [
    (["--patch", '{"x": "many"}'], "patch does not fit State: field 'x': Input should be a valid integer"),
    (["--patch", '{"colour": "red"}'], "patch names unknown state field(s) 'colour'"),
    (["--patch", "[1]"], "a patch is an object of state fields"),
    (["--patch", "{oops"], "--patch is not valid JSON"),
    (["--mock", "payments.refund"], "--mock takes NAME=JSON"),
    (["--mock", "payments.refund={"], "--mock payments.refund is not valid JSON"),
    (["--graph", "MODULE_v2:graph"], "a fork continues that graph"),
    (["--effects", "live", "--mock", "payments.refund=1"], "with --effects live every effect runs for real"),
])
def test_a_bad_fork_is_one_line_exit_2_and_creates_no_run(harness: Harness, options: list[str], message: str):
    cp = harness.checkpoints(harness.start())[1]
    runs = harness.run_count()
    code, out, err = harness("fork", cp, *[o.replace("MODULE", harness.module) for o in options])
    assert code == 2 and out == "" and "Traceback" not in err
    assert message in err and err.count("\n") == 1
    assert harness.run_count() == runs


def test_replay_of_an_unchanged_run_matches(harness: Harness):
    run_id = harness.start()
    code, out, _ = harness("replay", run_id)
    lines = out.splitlines()
    assert code == 0 and f"of {run_id}" in lines[0] and "succeeded" in lines[0]
    assert [line.split() for line in lines[1:4]] == [["lookup", "same"], ["pay", "same"], ["finish", "same"]]
    assert lines[-1] == "replay matches the recording"
    report = harness.json("replay", run_id)
    assert report["same"] is True and report["source_run_id"] == run_id


def test_replay_with_changed_code_exits_1_and_shows_the_differences(harness: Harness):
    run_id = harness.start()
    code, out, _ = harness("replay", run_id, "--graph", f"{harness.module}_v2:graph")
    assert code == 1
    assert "writes ~ amount: 30.0 -> 60.0" in out
    assert "effect payments.refund #0: changed" in out and "request ~ amount: 30.0 -> 60.0" in out
    assert 'writes ~ notes[0]: "done" -> "finished"' in out
    assert out.splitlines()[-1] == "3 node(s) differ"

    # from a checkpoint: the nodes finished there keep their recorded writes
    report = harness.json("replay", harness.checkpoints(run_id)[2], "--graph", f"{harness.module}_v2:graph")
    assert [(n["node"], n["verdict"]) for n in report["nodes"]] == [
        ("lookup", "inherited"), ("pay", "inherited"), ("finish", "different")]


def test_a_replay_that_pauses_says_how_to_answer_and_reports_again(harness: Harness):
    run_id = harness.start()
    new_code = f"{harness.module}_v3:graph"
    code, out, _ = harness("replay", run_id, "--graph", new_code)
    assert code == 1 and "interrupted" in out.splitlines()[0]
    replay_id = out.split()[1]
    assert "effect mail.send #0: new" in out and f"harness replay {replay_id} --report" in out
    code, _, err = harness("resume", replay_id, "--response", '{"action": "mock", "result": "sent"}')
    assert code == 0, err
    report = harness.json("replay", replay_id, "--report")
    assert report["status"] == "succeeded" and report["run_id"] == replay_id
    assert [(n["node"], n["verdict"]) for n in report["nodes"]] == [
        ("lookup", "same"), ("pay", "different"), ("finish", "same")]
    code, _, err = harness("replay", run_id, "--report")
    assert code == 2 and "is a main run, not a replay" in err


def test_compensate_undoes_an_effect_once(harness: Harness):
    run_id = harness.start()
    undone = importlib.import_module(harness.module).UNDONE
    code, out, _ = harness("compensate", run_id)
    assert code == 0 and "pay  payments.refund #0  compensated" in out and "compensation complete" in out
    code, out, _ = harness("compensate", run_id)
    assert code == 0 and "already compensated" in out
    assert undone == ["rcpt-3"]
    doc = harness.json("compensate", run_id)
    assert doc["complete"] is True and [s["status"] for s in doc["steps"]] == ["already"]

    fork = harness.json("fork", harness.checkpoints(run_id)[1], "--mock", 'payments.refund="x"')
    code, out, _ = harness("compensate", fork["run"]["id"])
    assert code == 0 and "nothing to compensate" in out  # mocked effects never touched the world


def test_export_then_import_into_a_fresh_database_is_identical(harness: Harness):
    run_id = harness.start()
    cps = harness.checkpoints(run_id)
    fork = harness.json("fork", cps[1], "--patch", '{"order_id": 4}')["run"]["id"]   # paused
    replay = harness.json("replay", run_id)["run_id"]
    code, out, _ = harness("export", run_id, "--out", "thread.json")
    assert code == 0 and "3 run(s)" in out
    document = json.loads((harness.dir / "thread.json").read_text())
    assert document["format"] == "shadow-harness/thread" and len(document["runs"]) == 3

    code, out, err = harness("import", "thread.json", db="b.db")
    assert code == 0 and "imported 3 run(s)" in out and "(effects mocked)" in out, err
    for rid in (run_id, fork, replay):
        assert harness.json("history", rid, db="b.db") == harness.json("history", rid)
    again = json.loads(harness("export", run_id, db="b.db")[1])
    # the same records, each run marked as imported, with its effects mocked here
    assert {r["run"]["options"].pop("imported")["effects"] for r in again["runs"]} == {"mock"}
    assert again == document
    code, out, err = harness("import", "thread.json", "--effects", "live", db="live.db")
    assert code == 0 and "(effects live)" in out, err
    assert harness.json("show", run_id, db="live.db")["run"]["options"]["imported"]["effects"] == "live"
    code, out, err = harness("import", "thread.json", "--effects", "real", db="d.db")
    assert code == 2 and "invalid choice: 'real'" in err

    code, out, err = harness("import", "thread.json", db="b.db")
    assert code == 2 and out == "" and f"run {run_id} already exists" in err and err.count("\n") == 1

    document["runs"][0]["checkpoints"][0]["seq"] = "first"  # the right fields, a wrong type
    (harness.dir / "thread.json").write_text(json.dumps(document))
    code, out, err = harness("import", "thread.json", db="c.db")
    assert code == 2 and out == "" and "runs[0].checkpoints[0].seq: Input should be a valid integer" in err
    assert err.count("\n") == 1
    assert harness.json("runs", db="c.db") == []  # nothing was imported


@pytest.mark.parametrize("content, message", [
    ("garbage\n", "thread.json is not valid JSON"),
    ('{"format": "something else"}', "not an exported thread"),
    ('{"format": "shadow-harness/thread", "version": 1, "runs": []}', "exported thread has no runs"),
    (None, "cannot read thread.json: No such file or directory"),
])
def test_importing_something_else_is_one_line_exit_2(harness: Harness, content: str | None, message: str):
    if content is not None:
        (harness.dir / "thread.json").write_text(content)
    code, out, err = harness("import", "thread.json")
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


def test_installed_script_imports_a_thread_from_stdin(harness: Harness):
    run_id = harness.start()
    code, document, _ = harness("export", run_id)  # stdout: the document itself
    assert code == 0 and json.loads(document)["thread_id"] == run_id
    proc = subprocess.run([str(Path(sys.executable).with_name("harness")), "import", "-", "--db", "b.db", "--json"],
                          input=document, capture_output=True, text=True, timeout=60, cwd=harness.dir, check=False)
    assert proc.returncode == 0, proc.stderr
    assert [r["id"] for r in json.loads(proc.stdout)] == [run_id]
    assert harness.json("history", run_id, db="b.db") == harness.json("history", run_id)


FACTORY = textwrap.dedent('''
    from pydantic import BaseModel
    from runtime import Graph

    CHARGED: list[int] = []

    class State(BaseModel):
        x: int = 1
        charged: int = 0

    def build(delta):
        g = Graph("pay", state=State)

        @g.node()
        async def charge(s, ctx):
            amount = s.x * 100 + delta
            return {"charged": await ctx.effect("pay.charge", lambda: CHARGED.append(amount) or amount,
                                                request={"amount": amount})}
        return g

    graph = build(0)      # the code that made the recording
    graph_v2 = build(1)   # a candidate: the same source, so the same version
''')


def test_replaying_candidate_code_of_the_same_version_leaves_the_recording_on_its_own_code(harness: Harness):
    """A candidate built by the same factory has the recording's version. Checking it with a
    replay must not make it the code that later replays, forks and resumes of the recorded run
    execute, in this process or the next."""
    module = f"{harness.module}_factory"
    (harness.dir / f"{module}.py").write_text(FACTORY)
    run_id = harness.json("run", f"{module}:graph", "--input", '{"x": 3}')["run"]["id"]
    code, out, _ = harness("replay", run_id, "--graph", f"{module}:graph_v2")
    assert code == 1 and "request ~ amount: 300 -> 301" in out
    code, out, _ = harness("replay", run_id)
    assert code == 0 and out.splitlines()[-1] == "replay matches the recording"
    fork = harness.json("fork", harness.checkpoints(run_id)[0])
    assert fork["run"]["status"] == "succeeded" and fork["state"]["charged"] == 300
    assert importlib.import_module(module).CHARGED == [300]   # recorded once; nothing ran again


def test_show_names_how_each_later_run_came_from_the_run(harness: Harness):
    run_id = harness.start()
    cp = harness.checkpoints(run_id)[1]
    fork = harness.json("fork", cp, "--mock", 'payments.refund="r"')["run"]["id"]
    replay = harness.json("replay", run_id)["run_id"]
    code, out, _ = harness("show", run_id)
    assert code == 0
    assert f"forked as: {fork} (succeeded)" in out and f"replayed as: {replay} (succeeded)" in out
    assert "continued by" not in out
