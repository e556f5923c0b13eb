"""``harness`` on a run that failed at a limit says what can be done next: a limit of the
run is given again, higher, on resume; a loop's ``max_iterations`` is part of the graph,
which a resume keeps, so it names the checkpoint a fork can go on from instead."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from runtime.engine.growth import bound_reached, over_bound_message
from server.cli import main

LOOP = textwrap.dedent('''
    from pydantic import BaseModel
    from runtime import Graph

    class S(BaseModel):
        n: int = 0
        stop_at: int = 100

    graph = Graph("bounded", state=S)

    @graph.node(after=["more"], max_iterations=3)
    def step(s):
        return {"n": s.n + 1}

    @graph.node(after=["step"], when=lambda s: s.n < s.stop_at)
    def more(s):
        return None
''')


@pytest.fixture
def loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    mod = f"at_limit_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{mod}.py").write_text(LOOP)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_DB", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    return f"{mod}:graph"


def harness(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    out, _ = capsys.readouterr()
    return code, out


def last_run(capsys: pytest.CaptureFixture[str]) -> str:
    _, out = harness(capsys, "runs", "--json")
    return str(json.loads(out)[0]["id"])


def test_resume_at_a_loops_bound_names_the_checkpoint_a_fork_goes_on_from(loop: str,
                                                                          capsys: pytest.CaptureFixture[str]):
    harness(capsys, "run", loop)
    run_id = last_run(capsys)
    code, out = harness(capsys, "resume", run_id)
    assert code == 1 and "limit_exceeded: loop 'step' reached max_iterations=3" in out
    _, history = harness(capsys, "history", run_id, "--json", "--no-state")
    before = json.loads(history)[5]   # step#2 folded, more#2 (the way back past the bound) not yet
    assert before["node_states"]["more#2"] == "pending"
    assert ("max_iterations of loop 'step' is part of the graph, which a resume keeps: it fails again at once"
            in out.splitlines())
    assert (f"  to go on: fork from checkpoint #5 of run {run_id}, before 'more#2' led back, with state in which "
            f"the loop ends there: harness fork {before['id']} --patch '{{\"FIELD\": VALUE}}'") in out.splitlines()
    # what it says works
    code, out = harness(capsys, "fork", before["id"], "--patch", '{"stop_at": 3}')
    assert code == 0 and "succeeded" in out.splitlines()[0]


def test_resume_at_a_run_limit_says_to_give_it_again_higher(loop: str, capsys: pytest.CaptureFixture[str]):
    code, out = harness(capsys, "run", loop, "--input", '{"stop_at": 3}', "--max-steps", "3")
    run_id = last_run(capsys)
    assert code == 1 and "limit_exceeded: run reached max_steps=3" in out
    assert out.splitlines()[-1] == ("to go on with a higher limit (usage counts across continuations): harness "
                                    f"resume {run_id} --max-steps N (N above the 3 steps taken)")
    # without it, a continuation could start nothing: refused, and nothing is made
    code = main(["resume", run_id])
    err = capsys.readouterr().err
    assert code == 2 and err == (f"harness: run {run_id} has used what its limits allow (steps 3 of max_steps 3, "
                                 f"raise max_steps): a continuation could start nothing; resume it giving "
                                 f"higher limits\n")
    assert last_run(capsys) == run_id
    code, out = harness(capsys, "resume", run_id, "--max-steps", "10")
    assert code == 0 and "succeeded" in out.splitlines()[0]


def test_a_continued_run_says_nothing_more_about_its_limit(loop: str, capsys: pytest.CaptureFixture[str]):
    harness(capsys, "run", loop)
    run_id = last_run(capsys)
    harness(capsys, "resume", run_id)
    _, out = harness(capsys, "show", run_id)
    assert "max_iterations of loop" not in out and out.splitlines()[-1].startswith("continued by: ")


@pytest.mark.parametrize("its", [(3,), (1, 3), (0, 2, 3)])
def test_a_loops_bound_is_read_back_from_its_message(its: tuple[int, ...]):
    assert bound_reached(over_bound_message("w/step", 3, its, "w/more#1.2")) == ("w/step", "w/more#1.2")
    assert bound_reached("run reached max_steps=2 before node 'step#1' could start") is None
