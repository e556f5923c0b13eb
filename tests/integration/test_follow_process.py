"""Another process follows a live run from the store and sees the same sequence of
recorded events as the process streaming it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import BaseModel

from runtime import Graph, NodeContext, Runtime, SqlStore, append

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


class S(BaseModel):
    log: Annotated[list[str], append] = []


def graph(marker: Path) -> Graph:
    g = Graph("followed", state=S)

    @g.node()
    async def a(state: S, ctx: NodeContext) -> dict:
        ctx.emit({"step": "a"})
        for _ in range(500):   # until the follower has seen this event (10 s at most)
            if marker.exists():
                break
            await asyncio.sleep(0.02)
        ctx.emit({"token": "ephemeral"}, ephemeral=True)
        return {"log": ["a"]}

    @g.node(after=["a"])
    def b(state: S, ctx: NodeContext) -> dict:
        ctx.emit({"step": "b"})
        return {"log": ["b"]}

    return g


async def test_a_second_process_following_a_run_sees_the_same_sequence(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'harness.db'}"
    marker = tmp_path / "following"
    rt = Runtime(store=SqlStore(url))
    live, follower = [], None
    try:
        async for ev in rt.stream(graph(marker), {}):
            live.append(ev)
            if follower is None:
                follower = subprocess.Popen(
                    [sys.executable, str(HERE / "follow_worker.py"), url, ev.run_id, str(marker)],
                    stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        rt.close()
    assert follower is not None
    out, _ = follower.communicate(timeout=30)
    assert follower.returncode == 0
    assert marker.exists(), "the run did not wait for its follower"
    followed = [json.loads(line) for line in out.splitlines()]
    assert followed == [ev.to_json() for ev in live if not ev.ephemeral]
    assert any(ev.ephemeral for ev in live)
    assert [e["data"]["payload"] for e in followed if e["type"] == "custom"] == [{"step": "a"}, {"step": "b"}]
