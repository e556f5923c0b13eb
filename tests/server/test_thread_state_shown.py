"""The thread page shows the conversation itself: the thread's state now (a list of
messages one per line, in order; other fields as the run page shows state) and, for
each turn, the input it gave."""

from __future__ import annotations

import asyncio
import html
import re
from pathlib import Path
from typing import Annotated, Any

from local_client import TestClient
from pydantic import BaseModel

from runtime import Graph, Runtime, SqlStore, append
from server.web import create_app


class Talk(BaseModel):
    messages: Annotated[list[str], append] = []
    mood: str = "calm"
    seen: Annotated[list[int], append] = []


def talk_graph() -> Graph:
    g = Graph("talk", state=Talk)

    @g.node()
    def reply(s: Talk) -> dict[str, Any]:
        return {"messages": [f"agent: re {s.messages[-1]}"], "seen": [len(s.messages)]}

    return g


def talk(tmp_path: Path, said: list[str]) -> tuple[str, list[str]]:
    """The page of a thread with one turn per message said, and the turns' run ids."""
    rt = Runtime(SqlStore(f"sqlite:///{tmp_path / 'h.db'}"))
    try:
        g = talk_graph()
        runs = [asyncio.run(rt.start(g, {"messages": [m]}, thread_id="t-1")).id for m in said]
        with TestClient(create_app(rt)) as client:
            return client.get("/threads/t-1").text, runs
    finally:
        rt.close()


def field(page: str, name: str) -> str:
    found = re.search(rf'<dd data-field="{name}">(.*?)</dd>', page, re.S)
    assert found, f"no field {name} in the thread's state"
    return found.group(1)


def test_the_thread_page_lists_the_messages_one_per_line_in_order(tmp_path: Path) -> None:
    page, runs = talk(tmp_path, ["customer: hi", "customer: order 7?"])
    lines = [html.unescape(li) for li in re.findall(r"<li>(.*?)</li>", field(page, "messages"))]
    assert lines == ["customer: hi", "agent: re customer: hi", "customer: order 7?", "agent: re customer: order 7?"]
    # the run the next turn follows is named, and other fields are shown as the run page shows state
    assert re.search(rf'<a href="/runs/{runs[-1]}\?cp=1" [^>]*>{runs[-1]}</a>, the run the thread\'s next turn follows',
                     html.unescape(page))
    assert '<span class="j-str">"calm"</span>' in field(page, "mood")
    assert '<span class="j-num">1</span>' in field(page, "seen") and '<span class="j-num">3</span>' in field(page, "seen")


def test_each_turn_says_the_input_it_gave(tmp_path: Path) -> None:
    page, runs = talk(tmp_path, ["customer: hi", "customer: order 7?"])
    page = page[page.index('<ul class="tree">'):]
    for run_id, said in zip(runs, ["customer: hi", "customer: order 7?"], strict=True):
        line = re.search(rf'<a href="/runs/{run_id}">{run_id}</a>(.*?)</li>', page, re.S)
        assert line, run_id
        given = re.search(r'<div class="turn-input">(.*?)</div>', line.group(1), re.S)
        assert given and html.unescape(re.sub(r"<[^>]+>", "", given.group(1))).startswith(f"input: messages: {said}")
    # the second turn gave only its message: the thread's other fields came from the turn before
    second = re.search(rf'<a href="/runs/{runs[1]}">.*?<div class="turn-input">(.*?)</div>', page, re.S)
    assert second and 'data-field="mood"' not in second.group(1)
