"""``harness watch RUN``: a run's recorded events, read from the store, until it
ends or pauses — the same sequence a live stream of the run yields."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from runtime import Graph, NodeContext, Runtime, SqlStore
from server.cli import main


class S(BaseModel):
    n: int = 0


def graph() -> Graph:
    g = Graph("watched", state=S)

    @g.node()
    async def a(state: S, ctx: NodeContext) -> dict:
        ctx.emit({"progress": 1})
        return {"n": 1}

    @g.node(after=["a"])
    async def ask(state: S, ctx: NodeContext) -> dict:
        await ctx.interrupt({"question": "ok?"})
        return {"n": 2}

    return g


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "w.db")


def streamed_run(db: str) -> tuple[str, list[dict]]:
    async def go() -> tuple[str, list[dict]]:
        rt = Runtime(store=SqlStore(f"sqlite:///{db}"))
        try:
            events = [ev async for ev in rt.stream(graph(), {})]
        finally:
            rt.close()
        return events[0].run_id, [ev.to_json() for ev in events if not ev.ephemeral]
    return asyncio.run(go())


def test_watch_prints_the_recorded_stream_as_json_lines(db: str, capsys: pytest.CaptureFixture[str]):
    run_id, live = streamed_run(db)
    code = main(["watch", run_id, "--db", db, "--json"])
    out = capsys.readouterr().out
    assert code == 0
    assert [json.loads(line) for line in out.splitlines()] == live


def test_watch_prints_one_line_per_event_and_the_run_at_the_end(db: str, capsys: pytest.CaptureFixture[str]):
    run_id, live = streamed_run(db)
    code = main(["--db", db, "watch", run_id])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert len(lines) == len(live) + 1
    assert lines[0].startswith("#1") and "run.created" in lines[0]
    assert "custom a (attempt 1)" in "\n".join(lines) and "interrupted" in lines[-1]


def test_watching_an_unknown_run_is_one_line_and_exit_2(db: str, capsys: pytest.CaptureFixture[str]):
    code = main(["watch", "run_nope", "--db", db])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "run_nope" in err
