"""Options of ``harness`` itself: ``--db``/``--json`` on either side of the command,
one-line parse errors, and a quiet stderr unless ``-v`` asks for log records."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from server.cli import main

GRAPH = textwrap.dedent('''
    import logging
    import warnings
    from pydantic import BaseModel
    from runtime import Graph

    class State(BaseModel):
        n: int = 0

    graph = Graph("options_demo", state=State)

    @graph.node()
    def step(state):
        return {"n": state.n + 1}

    noisy = Graph("noisy", state=State)

    @noisy.node()
    def talk(state):
        logging.getLogger("shop.orders").warning("stock is low")
        logging.getLogger("runtime.demo").info("step ran")
        warnings.warn("this call is deprecated", UserWarning)
        return {"n": 1}
''')
SCRIPT = Path(sys.executable).with_name("harness")


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "opts_graph.py").write_text(GRAPH)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_DB", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    return tmp_path


def harness(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def script(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60, cwd=workdir,
                          check=False)


# ------------------------------------------------------------------ --db and --json everywhere

def test_db_and_json_before_the_command(workdir: Path, capsys: pytest.CaptureFixture[str]):
    code, out, err = harness(capsys, "--db", "before.db", "--json", "run", "opts_graph:graph")
    assert code == 0, err
    assert json.loads(out)["run"]["status"] == "succeeded"
    assert (workdir / "before.db").exists() and not (workdir / "harness.db").exists()


def test_the_commands_own_db_wins_over_the_one_before_it(workdir: Path, capsys: pytest.CaptureFixture[str]):
    harness(capsys, "run", "opts_graph:graph", "--db", "b.db")
    code, out, _ = harness(capsys, "--db", "a.db", "runs", "--db", "b.db", "--json")
    assert code == 0 and len(json.loads(out)) == 1
    code, out, _ = harness(capsys, "--db", "b.db", "runs", "--db", "a.db")
    assert code == 0 and out.strip() == "no runs"


def test_installed_script_takes_db_before_the_command(workdir: Path):
    proc = script(workdir, "--db", "x.db", "run", "opts_graph:graph", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["state"] == {"n": 1} and (workdir / "x.db").exists()


# ------------------------------------------------------------------ parse errors

@pytest.mark.parametrize("args, message", [
    (["frobnicate"], "argument command: invalid choice: 'frobnicate'"),
    (["runs", "--colour", "red"], "unrecognized arguments: --colour red"),
    (["show"], "the following arguments are required: run"),
    ([], "the following arguments are required: command"),
    # a thread id is refused naming the option it came with, not the Python argument
    (["run", "options_demo:graph", "--thread", " "], "argument --thread: must not be blank"),
    (["runs", "--thread", ""], "argument --thread: must not be empty"),
    (["thread", "  "], "argument thread: must not be blank"),
])
def test_a_wrong_command_line_is_one_line_and_exit_2(workdir: Path, capsys: pytest.CaptureFixture[str],
                                                    args: list[str], message: str):
    code, out, err = harness(capsys, *args)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("harness: ") and message in err and "--help)" in err


def test_help_names_every_command_and_the_verbose_option(workdir: Path, capsys: pytest.CaptureFixture[str]):
    code, out, _ = harness(capsys, "--help")
    assert code == 0 and "-v, --verbose" in out and "log records" in out
    for command in ("run", "runs", "show", "resume", "cancel", "history", "diff", "fork", "replay",
                    "compensate", "export", "import"):
        assert f"    {command} " in out


# ------------------------------------------------------------------ stderr stays quiet

def test_log_records_and_warnings_stay_off_stderr_by_default(workdir: Path):
    proc = script(workdir, "run", "opts_graph:noisy", "--db", "a.db")
    assert proc.returncode == 0 and "succeeded" in proc.stdout
    assert proc.stderr == ""


def test_verbose_shows_the_runtimes_info_records_on_stderr(workdir: Path):
    proc = script(workdir, "run", "opts_graph:noisy", "--db", "a.db", "-v")
    assert proc.returncode == 0 and "succeeded" in proc.stdout
    assert "harness: INFO runtime.demo: step ran" in proc.stderr.splitlines()


def test_verbose_shows_warnings_from_anywhere_on_stderr(workdir: Path):
    proc = script(workdir, "--verbose", "run", "opts_graph:noisy", "--db", "a.db")
    lines = proc.stderr.splitlines()
    assert "harness: WARNING shop.orders: stock is low" in lines
    assert any(line.startswith("harness: WARNING py.warnings:") and "this call is deprecated" in line
               for line in lines)


def test_verbose_keeps_stdout_clean_json(workdir: Path):
    proc = script(workdir, "run", "opts_graph:noisy", "--db", "a.db", "-v", "--json")
    assert json.loads(proc.stdout)["state"] == {"n": 1}


def test_version_prints_the_installed_packages(capsys: pytest.CaptureFixture[str]):
    from importlib.metadata import version
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"harness {version('shadow-harness')}\n"
