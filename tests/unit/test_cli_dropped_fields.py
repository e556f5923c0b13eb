"""A turn run by a new graph version that has no longer a field of the thread leaves its
value behind: the command line says so where it shows that turn (``run``, ``show``,
``thread``), not only in the JSON's ``options``."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from server.cli import main

VERSION = textwrap.dedent('''
    from typing import Annotated
    from pydantic import BaseModel
    from runtime import Graph, append

    class Chat(BaseModel):
        messages: Annotated[list[str], append] = []
        {extra}

    graph = Graph("chat_dropped", state=Chat)

    @graph.node()
    def reply(state):
        return {{"messages": ["ok"]}}
''')


@pytest.fixture
def versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    stem = f"chat_dropped_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{stem}_v1.py").write_text(VERSION.format(extra='user: str = ""'))
    (tmp_path / f"{stem}_v2.py").write_text(VERSION.format(extra=""))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_DB", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    return f"{stem}_v1:graph", f"{stem}_v2:graph"


def harness(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    return code, out


def test_the_turn_that_dropped_a_field_says_which(versions: tuple[str, str], capsys: pytest.CaptureFixture[str]):
    v1, v2 = versions
    _, out = harness(capsys, "run", v1, "--input", json.dumps({"messages": ["hi"], "user": "ada"}), "--thread", "t")
    assert "dropped fields" not in out
    _, out = harness(capsys, "run", v2, "--input", json.dumps({"messages": ["again"]}), "--thread", "t")
    assert "dropped fields: 'user'" in out
    _, out = harness(capsys, "--json", "thread", "t")
    first, turn = (r["id"] for r in json.loads(out)["runs"])
    assert "dropped fields" not in harness(capsys, "show", first)[1]
    assert "dropped fields: 'user'" in harness(capsys, "show", turn)[1]
    _, out = harness(capsys, "thread", "t")
    lines = out.splitlines()
    assert lines[0].startswith("turn 1") and lines[1].startswith("turn 2")
    assert lines[2].strip().startswith("dropped fields: 'user'")
