"""The harness command on conversation threads: ``run --thread``, ``runs --thread``
and ``thread T``."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from server.cli import main

CHAT = textwrap.dedent('''
    from typing import Annotated
    from pydantic import BaseModel
    from runtime import Graph, append

    class Chat(BaseModel):
        messages: Annotated[list[str], append] = []

    graph = Graph("chat_cli", state=Chat)

    @graph.node()
    def reply(state):
        return {"messages": [f"echo {state.messages[-1]}"]}
''')


@pytest.fixture
def chat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    mod = f"chat_cli_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{mod}.py").write_text(CHAT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_DB", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    return f"{mod}:graph"


def harness(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_turns_of_a_thread_from_the_command_line(chat: str, capsys: pytest.CaptureFixture[str]):
    for word in ("hi", "again"):
        code, _, err = harness(capsys, "run", chat, "--input", json.dumps({"messages": [word]}), "--thread", "c1")
        assert code == 0, err
    code, out, _ = harness(capsys, "thread", "c1", "--json")
    data = json.loads(out)
    assert code == 0 and data["thread_id"] == "c1"
    assert data["state"]["messages"] == ["hi", "echo hi", "again", "echo again"]
    assert [r["kind"] for r in data["runs"]] == ["main", "main"]
    assert data["runs"][1]["parent_run_id"] == data["runs"][0]["id"]
    code, out, _ = harness(capsys, "runs", "--thread", "c1", "--json")
    assert [r["id"] for r in json.loads(out)] == [r["id"] for r in reversed(data["runs"])]


def test_thread_prints_its_runs_and_state_as_text(chat: str, capsys: pytest.CaptureFixture[str]):
    harness(capsys, "run", chat, "--input", '{"messages": ["hi"]}', "--thread", "c2")
    harness(capsys, "run", chat, "--input", '{"messages": ["again"]}', "--thread", "c2")
    code, out, _ = harness(capsys, "thread", "c2")
    lines = out.splitlines()
    assert code == 0 and lines[-1] == 'state: {"messages": ["hi", "echo hi", "again", "echo again"]}'
    assert [line.split("run_")[0].strip() for line in lines[:-1]] == ["turn 1", "turn 2"]


def test_an_unknown_thread_is_one_line_and_exit_2(chat: str, capsys: pytest.CaptureFixture[str]):
    code, _, err = harness(capsys, "thread", "nope")
    assert code == 2 and "nope" in err and len(err.strip().splitlines()) == 1


def test_a_blank_thread_id_is_refused_as_blank(chat: str, capsys: pytest.CaptureFixture[str]):
    code, _, err = harness(capsys, "run", chat, "--input", '{"messages": ["hi"]}', "--thread", " ")
    assert code == 2 and err.strip() == ("harness: argument --thread: must not be blank (whitespace only), "
                                         "got ' ' (see: harness run --help)")
    code, _, err = harness(capsys, "runs", "--thread", "")
    assert code == 2 and err.strip() == "harness: argument --thread: must not be empty, got '' (see: harness runs --help)"


ASKING = textwrap.dedent('''
    from typing import Annotated
    from pydantic import BaseModel
    from runtime import Graph, append

    class Chat(BaseModel):
        messages: Annotated[list[str], append] = []

    class Approval(BaseModel):
        approve: bool

    graph = Graph("chat_asks", state=Chat)

    @graph.node()
    async def reply(state, ctx):
        answer = await ctx.interrupt({"question": "send it?"}, response=Approval)
        return {"messages": [f"sent={answer.approve}"]}
''')


def test_thread_says_what_its_paused_latest_turn_waits_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]):
    mod = f"chat_asks_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{mod}.py").write_text(ASKING)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_DB", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    code, _, err = harness(capsys, "run", f"{mod}:graph", "--input", '{"messages": ["hi"]}', "--thread", "c3")
    assert code == 0, err
    code, out, _ = harness(capsys, "thread", "c3")
    _, shown, _ = harness(capsys, "runs", "--thread", "c3", "--json")
    run_id = json.loads(shown)[0]["id"]
    lines = out.splitlines()
    assert code == 0 and lines[1] == 'state: {"messages": ["hi"]}'
    assert lines[2].startswith("waiting: interrupt int_") and lines[2].endswith(
        """from node 'reply' (user): {"question": "send it?"}""")
    assert lines[3] == f"  answer with: harness resume {run_id} --response '<json>'"
    code, out, _ = harness(capsys, "thread", "c3", "--json")
    assert code == 0 and json.loads(out)["runs"][0]["status"] == "interrupted"   # the JSON is the data only
