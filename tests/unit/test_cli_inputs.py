"""Bad values on the ``harness`` command line: each is one line on stderr, exit 2,
and changes nothing — never a traceback, never a silently different run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from server.cli import main
from server.cli.transfer import DOCUMENT_DEPTH
from server.inputs import MAX_DEPTH

GRAPH = textwrap.dedent('''
    from typing import Any
    from pydantic import BaseModel
    from runtime import Graph

    class State(BaseModel):
        order_id: int = 0
        data: Any = None
        total: int = 0
        approved: Any = None

    graph = Graph("inputs_demo", state=State)

    @graph.node()
    def total(state):
        return {"total": state.order_id * 2}

    @graph.node(after=["total"])
    async def confirm(state, ctx):
        return {"approved": await ctx.interrupt({"question": "ok?"})}
''')
DEEP = "[" * 100_000 + "]" * 100_000
HUGE = "9" * 5_000
SCRIPT = Path(sys.executable).with_name("harness")


class Harness:
    """``harness`` in-process against a SQLite file in the test's directory."""

    def __init__(self, workdir: Path, module: str, capsys: pytest.CaptureFixture[str]):
        self.dir, self.graph, self.capsys = workdir, f"{module}:graph", capsys

    def __call__(self, *args: str) -> tuple[int, str, str]:
        code = main([*args, "--db", str(self.dir / "a.db")])
        out, err = self.capsys.readouterr()
        return code, out, err

    def json(self, *args: str) -> Any:
        code, out, err = self(*args, "--json")
        assert code in (0, 1), err
        return json.loads(out)

    def paused_run(self) -> str:
        doc = self.json("run", self.graph, "--input", '{"order_id": 2}')
        assert doc["run"]["status"] == "interrupted"
        return str(doc["run"]["id"])

    def runs(self) -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = self.json("runs")
        return runs


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Harness:
    module = f"inputs_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(GRAPH)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_DB", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    return Harness(tmp_path, module, capsys)


def one_line_mistake(code: int, out: str, err: str, *needles: str) -> None:
    assert code == 2 and out == "" and "Traceback" not in err and err.count("\n") == 1, err[:300]
    for needle in needles:
        assert needle in err, err


# ------------------------------------------------------------------ nested too deep

def test_deeply_nested_input_is_one_line(harness: Harness):
    one_line_mistake(*harness("run", harness.graph, "--input", '{"data": ' + DEEP + "}"),
                     f"--input nests deeper than {MAX_DEPTH} levels")
    assert harness.runs() == []


@pytest.mark.parametrize("option", ["--response", "--answers"])
def test_a_deeply_nested_answer_is_one_line_and_the_run_still_waits(harness: Harness, option: str):
    run_id = harness.paused_run()
    one_line_mistake(*harness("resume", run_id, option, DEEP), f"{option} nests deeper than")
    assert harness.json("show", run_id)["run"]["status"] == "interrupted"


@pytest.mark.parametrize("option", [["--patch", "{\"data\": " + DEEP + "}"], ["--mock", "x=" + DEEP]])
def test_a_deeply_nested_fork_option_is_one_line_and_forks_nothing(harness: Harness, option: list[str]):
    cp = harness.json("show", harness.paused_run())["checkpoints"][0]["id"]
    one_line_mistake(*harness("fork", cp, *option), f"{option[0]}", f"nests deeper than {MAX_DEPTH} levels")
    assert len(harness.runs()) == 1


def test_nesting_just_past_the_limit_is_refused_before_the_runtime_sees_it(harness: Harness):
    too_deep = '{"data": ' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "}"
    one_line_mistake(*harness("run", harness.graph, "--input", too_deep),
                     f"--input nests deeper than {MAX_DEPTH} levels")


def test_nesting_at_the_limit_is_accepted(harness: Harness):
    deep = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    doc = harness.json("run", harness.graph, "--input", '{"data": ' + deep + "}")
    assert doc["run"]["status"] == "interrupted" and doc["state"]["data"] == json.loads(deep)


def test_values_at_the_limit_survive_fork_export_and_import(harness: Harness):
    deep = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    field = '{"data": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}"
    run_id = harness.json("run", harness.graph, "--input", field)["run"]["id"]
    assert harness.json("resume", run_id, "--response", deep)["state"]["approved"] == json.loads(deep)
    cp = harness.json("show", run_id)["checkpoints"][0]["id"]
    harness.json("fork", cp, "--patch", field, "--mock", f"x={deep}")
    assert harness("export", run_id, "--out", "thread.json")[0] == 0
    document = json.loads((harness.dir / "thread.json").read_text())
    assert len(document["runs"]) == 2
    code, out, err = main(["import", "thread.json", "--db", str(harness.dir / "b.db")]), *harness.capsys.readouterr()
    assert code == 0 and "imported 2 run(s)" in out, err


def test_a_deeply_nested_import_file_is_one_line(harness: Harness):
    (harness.dir / "thread.json").write_text(DEEP)
    one_line_mistake(*harness("import", "thread.json"), f"thread.json nests deeper than {DOCUMENT_DEPTH} levels")


def test_installed_script_refuses_a_deeply_nested_import_file_in_one_line(harness: Harness):
    (harness.dir / "thread.json").write_text('{"runs": ' + DEEP + "}")
    proc = subprocess.run([str(SCRIPT), "import", "thread.json", "--db", "a.db"], capture_output=True, text=True,
                          timeout=60, cwd=harness.dir, check=False)
    one_line_mistake(proc.returncode, proc.stdout, proc.stderr,
                     f"thread.json nests deeper than {DOCUMENT_DEPTH} levels")


def test_installed_script_refuses_a_deeply_nested_input_in_one_line(harness: Harness):
    deep = "[" * 60_000 + "]" * 60_000   # one argument may hold at most 128 KiB
    proc = subprocess.run([str(SCRIPT), "run", harness.graph, "--input", '{"data": ' + deep + "}", "--db", "a.db"],
                          capture_output=True, text=True, timeout=60, cwd=harness.dir, check=False)
    one_line_mistake(proc.returncode, proc.stdout, proc.stderr, f"--input nests deeper than {MAX_DEPTH} levels")


# ------------------------------------------------------------------ numbers JSON cannot hold

def test_an_integer_over_4300_digits_in_input_is_one_line(harness: Harness):
    one_line_mistake(*harness("run", harness.graph, "--input", '{"data": ' + HUGE + "}"),
                     "--input is not accepted: an integer has 5000 digits")
    assert harness.runs() == []


def test_an_integer_over_4300_digits_in_a_response_is_one_line(harness: Harness):
    run_id = harness.paused_run()
    one_line_mistake(*harness("resume", run_id, "--response", HUGE), "--response is not accepted: an integer")
    assert harness.json("show", run_id)["run"]["status"] == "interrupted"


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_number_json_cannot_hold_is_refused_not_stored_as_null(harness: Harness, value: str):
    one_line_mistake(*harness("run", harness.graph, "--input", '{"data": ' + value + "}"),
                     f"--input is not accepted: {'the number ' if value == '1e400' else ''}{value}")
    assert harness.runs() == []


@pytest.mark.parametrize("value", ['{"data": 1, "data": 2}', '{"data": {"a": 1, "b": 2, "a": 3}}'])
def test_a_key_given_twice_is_refused_not_silently_the_last(harness: Harness, value: str):
    one_line_mistake(*harness("run", harness.graph, "--input", value), "--input is not accepted: key ")
    assert harness.runs() == []


# ------------------------------------------------------------------ numeric options

@pytest.mark.parametrize("value", ["nan", "inf", "-5", "0", "soon"])
def test_a_deadline_must_be_a_positive_finite_number_of_seconds(harness: Harness, value: str):
    one_line_mistake(*harness("run", harness.graph, f"--deadline={value}"),
                     f"argument --deadline: must be a number of seconds above 0, got '{value}'")
    assert harness.runs() == []


@pytest.mark.parametrize("value", ["1.5", "0", "-2"])
def test_max_steps_must_be_a_whole_number_of_at_least_1(harness: Harness, value: str):
    one_line_mistake(*harness("run", harness.graph, f"--max-steps={value}"),
                     f"argument --max-steps: must be a whole number of at least 1, got '{value}'")
    assert harness.runs() == []


@pytest.mark.parametrize("value", ["-1", "0"])
def test_runs_limit_must_be_at_least_1(harness: Harness, value: str):
    harness.paused_run()
    one_line_mistake(*harness("runs", f"--limit={value}"), "argument --limit: must be a whole number of at least 1")


def test_runs_limit_caps_the_list(harness: Harness):
    harness.paused_run()
    harness.paused_run()
    assert len(harness.json("runs", "--limit", "1")) == 1


# ------------------------------------------------------------------ JSON of the wrong kind

@pytest.mark.parametrize("patch, kind", [("[]", "an array"), ("null", "null"), ('"x"', "a string")])
def test_a_patch_that_is_not_an_object_is_refused_not_ignored(harness: Harness, patch: str, kind: str):
    cp = harness.json("show", harness.paused_run())["checkpoints"][0]["id"]
    one_line_mistake(*harness("fork", cp, "--patch", patch), "--patch: a patch is an object of state fields",
                     f"not {kind}")
    assert len(harness.runs()) == 1


@pytest.mark.parametrize("given", ["[]", "null"])
def test_input_that_is_not_an_object_is_refused_not_taken_as_empty(harness: Harness, given: str):
    one_line_mistake(*harness("run", harness.graph, "--input", given), "--input: input must be an object")
    assert harness.runs() == []


@pytest.mark.parametrize("given", ["[1]", '"abc"'])
def test_answers_that_are_not_an_object_are_one_line(harness: Harness, given: str):
    run_id = harness.paused_run()
    one_line_mistake(*harness("resume", run_id, "--answers", given), "--answers: answers are an object")
    assert harness.json("show", run_id)["run"]["status"] == "interrupted"


def test_response_and_answers_together_are_refused_and_the_run_still_waits(harness: Harness):
    run_id = harness.paused_run()
    interrupt = harness.json("show", run_id)["interrupts"][0]["id"]
    one_line_mistake(*harness("resume", run_id, "--response", "1", "--answers", json.dumps({interrupt: 2})),
                     "--answers", "not allowed with argument --response")
    assert harness.json("show", run_id)["run"]["status"] == "interrupted"


# ------------------------------------------------------------------ import files

def test_an_import_file_that_is_not_utf8_is_one_line(harness: Harness):
    (harness.dir / "thread.json").write_bytes(b'{"format": "\xff\xfe"}')
    one_line_mistake(*harness("import", "thread.json"), "thread.json is not UTF-8 text (byte 12")
    assert harness.runs() == []


def test_an_import_file_that_is_not_json_is_one_line(harness: Harness):
    (harness.dir / "thread.json").write_text("format: yaml\n")
    one_line_mistake(*harness("import", "thread.json"), "thread.json is not valid JSON")


@pytest.mark.parametrize("content", ["[]", "null", "42"])
def test_an_import_document_that_is_not_an_object_is_one_line(harness: Harness, content: str):
    (harness.dir / "thread.json").write_text(content)
    one_line_mistake(*harness("import", "thread.json"), "not an exported thread")


# ------------------------------------------------------------------ plan files

def test_a_plan_file_that_is_not_json_is_one_line(harness: Harness):
    (harness.dir / "plan.json").write_text("{nope")
    one_line_mistake(*harness("run", "plan.json"), "invalid graph: plan.json:1:2: not valid JSON")


def test_a_failed_run_piped_into_a_reader_that_leaves_still_exits_1(tmp_path: Path):
    """``harness run … | head -1``: the reader goes away early; the exit code stays the run's."""
    (tmp_path / "pipe_graph.py").write_text(textwrap.dedent('''
        from pydantic import BaseModel
        from runtime import Graph
        class S(BaseModel):
            fail: bool = False
        graph = Graph("pipe", state=S)
        @graph.node()
        def a(state):
            if state.fail:
                raise ValueError("boom")
            return {}
    '''))
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    codes = {}
    for fail in (True, False):
        proc = subprocess.Popen([str(SCRIPT), "run", "pipe_graph:graph", "--input", json.dumps({"fail": fail}),
                                 "--db", str(tmp_path / "p.db")], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        proc.stdout.close()   # the reader leaves before anything is printed
        _, err = proc.communicate(timeout=60)
        codes[fail] = proc.returncode
        assert b"Traceback" not in err
    assert codes == {True: 1, False: 0}
