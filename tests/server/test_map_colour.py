"""The graph drawing colours a map by its items: a map whose items all wait on a person
is drawn interrupted, not running (its own group record stays "running" until the
items end), while a map with items still to run is drawn running."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from local_client import TestClient
from pydantic import BaseModel

from runtime import Graph, NodeContext, RunStatus, Runtime, SqlStore, append
from runtime.core.states import NodeStatus
from server.web import dag
from server.web.app import create_app

from test_pages import status_sheet


class Batch(BaseModel):
    items: list[int] = []
    done: Annotated[list[int], append] = []


def asking_map() -> Graph:
    g = Graph("colour_map", Batch)

    @g.node()
    def plan(s: Batch) -> dict[str, Any]:
        return {"items": [1, 2, 3]}

    @g.node(after=["plan"], map_over="items")
    async def check(s: Batch, ctx: NodeContext, item: int) -> dict[str, Any]:
        if item > 1:   # the first item goes through; the others ask
            await ctx.interrupt({"question": f"keep {item}?"})
        return {"done": [item]}

    return g


@pytest.fixture
def paused(tmp_path: Path) -> Iterator[tuple[TestClient[Any], str, Runtime]]:
    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'h.db'}"), max_concurrency=4)
    run = asyncio.run(rt.start(asking_map(), {}))
    assert run.status == RunStatus.INTERRUPTED, run
    with TestClient(create_app(rt)) as client:
        yield client, run.id, rt
    rt.close()


def fill_of(html: str, label: str) -> str:
    """The status the sheet fills the drawn node whose link is titled ``label`` with."""
    found = re.search(rf'<g id="(n\d+)" class="node">\s*<g id="a_n\d+"><a [^>]*xlink:title="{label}"', html)
    assert found, f"no drawn node {label}"
    nid = found.group(1)
    rule = re.search(rf"(?:^|,)#{nid} path,#{nid} polygon[^{{]*\{{fill:var\(--st-(\w+)\)\}}", status_sheet(html), re.M)
    assert rule, status_sheet(html)
    return rule.group(1)


def test_a_map_whose_items_wait_on_questions_is_drawn_interrupted(paused: tuple[TestClient[Any], str, Runtime]) -> None:
    client, run_id, rt = paused
    head = asyncio.run(rt.history(run_id))[-1]
    states = {k: v.value for k, v in head.node_states.items()}
    assert states["check"] == "running" and states["check[1]"] == "interrupted", states
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    assert fill_of(page.text, "check") == "interrupted"


def test_a_map_with_items_still_to_run_is_drawn_running() -> None:
    lay = dag.Layout(svg="", ids={"plan": "n0", "check": "n1"}, groups={}, loops={})
    st = NodeStatus
    settled = {"plan": st.SUCCEEDED, "check": st.RUNNING, "check[0]": st.SUCCEEDED, "check[1]": st.PENDING}
    assert "#n1 path,#n1 polygon{fill:var(--st-running)}" in dag.status_css(lay, settled)
    done = {"plan": st.SUCCEEDED, "check": st.SUCCEEDED, "check[0]": st.SUCCEEDED, "check[1]": st.SUCCEEDED}
    assert "#n0 path,#n0 polygon,#n1 path,#n1 polygon{fill:var(--st-succeeded)}" in dag.status_css(lay, done)
