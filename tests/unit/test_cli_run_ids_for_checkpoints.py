"""A run id given where a checkpoint id is expected (``fork``, ``diff``) is refused with the
run's latest checkpoint and the command that lists the others: runs are what ``runs``
lists, so the slip is an easy one. The other way round (a checkpoint id to a command that
takes a run: ``history``, ``show``, ``resume``, ``cancel``, ``watch``, ``export``,
``compensate``) is refused naming the run it belongs to."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from server.cli import main

GRAPH = textwrap.dedent('''
    from pydantic import BaseModel
    from runtime import Graph

    class State(BaseModel):
        n: int = 0

    graph = Graph("run_ids", state=State)

    @graph.node()
    def one(state):
        return {"n": state.n + 1}

    @graph.node(after=["one"])
    def two(state):
        return {"n": state.n + 2}
''')


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"run_ids_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(GRAPH)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_DB", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    return name


def harness(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main([*args, "--db", "r.db"])
    out, err = capsys.readouterr()
    return code, out, err


def recorded(module: str, capsys: pytest.CaptureFixture[str]) -> tuple[str, list[str]]:
    """A succeeded run's id and its checkpoint ids, oldest first."""
    run_id = json.loads(harness(capsys, "--json", "run", f"{module}:graph")[1])["run"]["id"]
    return run_id, [cp["id"] for cp in json.loads(harness(capsys, "--json", "history", run_id, "--no-state")[1])]


@pytest.mark.parametrize("command", [["fork", "RUN"], ["fork", "RUN", "--queue"], ["diff", "RUN", "CP"],
                                     ["diff", "CP", "RUN"]])
def test_a_run_id_for_a_checkpoint_names_its_latest_checkpoint(module: str, command: list[str],
                                                               capsys: pytest.CaptureFixture[str]):
    run_id, cps = recorded(module, capsys)
    code, out, err = harness(capsys, *(run_id if a == "RUN" else cps[0] if a == "CP" else a for a in command))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"no checkpoint with id {run_id!r}: that is a run's id; its latest checkpoint is {cps[-1]}" in err
    assert f"(harness history {run_id} lists them all)" in err


def test_an_id_that_is_neither_is_said_unknown_with_no_hint(module: str, capsys: pytest.CaptureFixture[str]):
    run_id, _ = recorded(module, capsys)
    code, _, err = harness(capsys, "diff", "cp_nope", run_id)
    assert code == 2 and err.strip() == "harness: no checkpoint with id 'cp_nope'"
    code, _, err = harness(capsys, "fork", "run_nope")
    assert code == 2 and err.strip() == "harness: no checkpoint with id 'run_nope'"


@pytest.mark.parametrize("command", ["history", "show", "resume", "cancel", "watch", "export", "compensate"])
def test_a_checkpoint_id_for_a_run_names_the_run_it_belongs_to(module: str, command: str,
                                                               capsys: pytest.CaptureFixture[str]):
    run_id, cps = recorded(module, capsys)
    code, out, err = harness(capsys, command, cps[1])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"no run with id {cps[1]!r}: that is checkpoint #1 of run {run_id}" in err
    assert f"harness history {run_id}" in err and f"harness fork {cps[1]}" in err
    code, _, err = harness(capsys, command, "run_nope")   # neither: no hint
    assert code == 2 and "run_nope" in err and "checkpoint #" not in err
