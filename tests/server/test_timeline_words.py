"""The timeline says what happened at each checkpoint: the nodes it folded, and the nodes
whose status changed there otherwise (failed, asked, skipped); "–" only where nothing is
known."""

from __future__ import annotations

import re
from typing import Any

from conftest import Seeded
from local_client import TestClient

from runtime import Graph, MemoryStore, Runtime
from runtime.core.states import NodeStatus
from server.web import timeline

Client = TestClient[Any]


def folded(html: str) -> dict[int, str]:
    """Each timeline entry's words, by checkpoint seq."""
    return {int(seq): words for seq, words in re.findall(
        r'data-seq="(\d+)".*?<span class="folded"[^>]*>([^<]*)</span>', html, re.S)}


def test_a_checkpoint_where_a_node_failed_says_so(shared: Seeded, reader: Client) -> None:
    words = folded(reader.get(f"/runs/{shared.failed}").text)
    assert words == {0: "–", 1: "first", 2: "failed: second"}


def test_a_checkpoint_where_a_node_asked_says_so(shared: Seeded, reader: Client) -> None:
    words = folded(reader.get(f"/runs/{shared.interrupted}", headers={"HX-Request": "true"}).text)
    assert words[2] == "asked: ask"


def test_skips_and_many_changes_are_worded_and_counted() -> None:
    states = {"a": NodeStatus.SKIPPED, "b": NodeStatus.FAILED, **{f"w[{i}]": NodeStatus.SKIPPED for i in range(5)}}
    assert timeline.say(["a"], states) == "skipped: a"
    assert timeline.say(["w[0]", "w[1]", "w[2]", "w[3]", "w[4]", "b"], states) == \
        "failed: b · skipped: w[0], w[1], w[2] and 2 more"
    assert timeline.say(["a"], states, folded=["a"]) == ""


async def test_a_checkpoint_that_folded_a_node_also_says_what_was_skipped_there() -> None:
    g = Graph("folds-and-skips")

    # async nodes: a ``def`` node's thread may still run when the skip's checkpoint is taken
    # (on a loaded machine), and then that checkpoint says c is running, not where it folded
    @g.node()
    async def a(state: Any) -> dict[str, Any]:
        return {"x": 1}

    @g.node(after=["a"], when=lambda s: False)
    async def b(state: Any) -> dict[str, Any]:
        return {"y": 1}

    @g.node(after=["a"])
    async def c(state: Any) -> dict[str, Any]:
        return {"z": 1}

    rt = Runtime(MemoryStore())
    run = await rt.start(g.compile(), {})
    window = rt.store.checkpoint_summaries(run.id, 0, 100)
    folds = {c.seq: c.nodes for c in window}
    said = timeline.happened(rt, run.id, window)
    # where c was folded, b was skipped; that c was started at a's checkpoint is no news
    assert [(folds[seq], words) for seq, words in said.items()] == [(("c",), "skipped: b")]


async def test_a_forks_patch_checkpoint_names_the_fields_edited() -> None:
    from pydantic import BaseModel

    class P(BaseModel):
        n: int = 0
        tier: str = "free"

    g = Graph("patched", state=P)

    @g.node()
    def a(state: P) -> dict[str, Any]:
        return {"n": state.n + 1}

    @g.node(after=["a"])
    def b(state: P) -> dict[str, Any]:
        return {"n": state.n + 1}

    rt = Runtime(MemoryStore())
    run = await rt.start(g.compile(), {})
    fork = await rt.fork(rt.store.checkpoints(run.id)[1].id, patch={"tier": "pro", "n": 5})
    window = rt.store.checkpoint_summaries(fork.id, 0, 100)
    said = timeline.happened(rt, fork.id, window)
    [patch] = [c.seq for c in window if c.source == "patch"]
    assert said[patch] == "patched: n, tier"
