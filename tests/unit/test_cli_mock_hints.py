"""A mocked branch that pauses on an unrecorded effect says which of its mocks no effect
has called, naming the effect a misspelt one likely meant: said at the pause, where it
can still be answered, not only once the branch has ended."""

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
        query: str = ""
        found: str = ""

    graph = Graph("mock_hints", state=State)

    @graph.node()
    def plan(state):
        return {"query": state.query or "cats"}

    @graph.node(after=["plan"])
    async def look(state, ctx):
        found = await ctx.effect("search", lambda: f"hits for {state.query}", request={"q": state.query})
        return {"found": found}
''')


class Harness:
    def __init__(self, capsys: pytest.CaptureFixture[str]):
        self.capsys = capsys

    def __call__(self, *args: str) -> str:
        code = main([*args, "--db", "h.db"])
        out, err = self.capsys.readouterr()
        assert code == 0, err
        return out

    def fork_point(self, module: str) -> str:
        """The checkpoint after ``plan`` of a recorded run: a fork from it calls ``search`` again."""
        run_id = json.loads(self("--json", "run", f"{module}:graph"))["run"]["id"]
        return str(json.loads(self("--json", "history", run_id, "--no-state"))[1]["id"])


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"mock_hints_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(GRAPH)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_DB", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    return name


def test_a_fork_paused_by_a_misspelt_mock_says_which_effect_it_meant(module: str, capsys: pytest.CaptureFixture[str]):
    harness = Harness(capsys)
    cp = harness.fork_point(module)
    out = harness("fork", cp, "--patch", '{"query": "dogs"}', "--mock", 'serch="x"')
    assert "waiting: interrupt" in out and "effect 'search' #0 has no recorded result" in out
    assert "mock 'serch' was never used; did you mean 'search'?" in out
    fork = out.split()[0]
    assert "did you mean 'search'?" in harness("watch", fork).splitlines()[-1]
    assert "did you mean 'search'?" in harness("show", fork)


def test_a_mock_no_effect_resembles_is_said_unused_so_far_at_the_pause(module: str,
                                                                      capsys: pytest.CaptureFixture[str]):
    harness = Harness(capsys)
    cp = harness.fork_point(module)
    out = harness("fork", cp, "--patch", '{"query": "dogs"}', "--mock", 'mail.send="sent"')
    assert "mock 'mail.send' was not used so far (no effect of that name was called)" in out
    assert "did you mean" not in out


def test_the_hint_goes_once_the_pause_is_answered_and_the_json_keeps_its_shape(
        module: str, capsys: pytest.CaptureFixture[str]):
    harness = Harness(capsys)
    cp = harness.fork_point(module)
    doc = json.loads(harness("--json", "fork", cp, "--patch", '{"query": "dogs"}', "--mock", 'serch="x"'))
    assert doc["run"]["status"] == "interrupted" and doc["unused_mocks"] == []   # known only once it ends
    assert doc["uncalled_mocks"] == ["serch"]   # what the text's hint is made of, for scripts
    out = harness("resume", doc["run"]["id"], "--response", '{"action": "mock", "result": "y"}')
    assert "succeeded" in out and "did you mean" not in out and "mocks never used: 'serch'" in out


def test_a_fork_whose_mocks_served_every_effect_says_nothing_of_them(module: str,
                                                                    capsys: pytest.CaptureFixture[str]):
    harness = Harness(capsys)
    cp = harness.fork_point(module)
    out = harness("fork", cp, "--patch", '{"query": "dogs"}', "--mock", 'search="x"')
    assert "succeeded" in out and "mock '" not in out and "never used" not in out
