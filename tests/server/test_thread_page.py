"""The thread page tells each run apart without opening it: its kind, status, graph,
when it started and the checkpoint it came from, each with a link."""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Any

from conftest import Seeded
from local_client import TestClient

Client = TestClient[Any]


def chat_graph() -> Any:
    """A conversation: each turn appends its message, and the reply appends one more."""
    from pydantic import BaseModel

    from runtime import Graph, append

    class Chat(BaseModel):
        messages: Annotated[list[str], append] = []

    g = Graph("chat", state=Chat)

    @g.node()
    def reply(s: Chat) -> dict:
        return {"messages": [f"reply to {s.messages[-1]}"]}

    return g


def rows(html: str) -> dict[str, str]:
    """Each run's line on the page, by run id."""
    return {rid: body for rid, body in re.findall(
        r'<li [^>]*class="branch[^"]*">\s*<span class="kind">[\w ]+</span>\s*<a href="/runs/(run_\w+)">(.*?)</li>',
        html, re.S)}


def test_each_run_shows_its_kind_status_graph_start_and_base(seeded: Seeded, client: Client) -> None:
    rt, failed = seeded.rt, seeded.failed
    cps = rt.store.checkpoints(failed)
    fork = asyncio.run(rt.fork(cps[1].id, patch={"n": 2}))
    replay = asyncio.run(rt.replay(failed))
    page = client.get(f"/threads/{failed}").text
    lines = rows(page)
    assert set(lines) == {failed, fork.id, replay.run_id}
    kinds = dict(re.findall(r'class="branch kind-(\w+)">\s*<span class="kind">\w+</span>\s*<a href="/runs/(run_\w+)">',
                            page))
    assert {v: k for k, v in kinds.items()} == {failed: "main", fork.id: "fork", replay.run_id: "replay"}
    for rid, line in lines.items():
        run = asyncio.run(rt.get_run(rid))
        assert f'<span class="badge st-{run.status.value}">' in line
        assert f'<span class="graph" title="graph version {run.graph_version}">api_failing ' in line
        started = re.search(r"started <time>([^<]+)</time>", line)
        assert started and started.group(1).startswith("20")
    # the fork links the checkpoint it came from, which opens its run at that checkpoint
    base = re.search(r'<a class="base" href="([^"]+)"[^>]*>([^<]+)</a>', lines[fork.id])
    assert base and base.groups() == (f"/checkpoints/{cps[1].id}", f"from #1 of {failed}")
    opened = client.get(base.group(1), follow_redirects=False)
    assert opened.headers["location"] == f"/runs/{failed}?cp=1"
    assert f'<a class="base" href="/checkpoints/{cps[0].id}" title="checkpoint {cps[0].id}">from #0 of {failed}</a>' \
        in lines[replay.run_id]   # a replay re-runs the recording from its start
    assert 'class="base"' not in lines[failed]   # the thread's first run came from no checkpoint


def test_a_continuation_says_which_checkpoint_it_goes_on_from(seeded: Seeded, client: Client) -> None:
    last = seeded.rt.store.checkpoints(seeded.failed)[-1]
    cont = asyncio.run(seeded.rt.resume(seeded.failed))
    page = client.get(f"/threads/{seeded.failed}").text
    assert re.search(rf'class="branch kind-continuation">\s*<span class="kind">continuation</span>\s*'
                     rf'<a href="/runs/{cont.id}">', page)
    assert f'<a class="base" href="/checkpoints/{last.id}" title="checkpoint {last.id}">from #{last.seq} of ' \
           f'{seeded.failed}</a>' in rows(page)[cont.id]


def test_conversation_turns_are_numbered_and_say_which_turn_they_follow(tmp_path) -> None:
    from runtime import Runtime, SqlStore
    from server.web import create_app

    g = chat_graph()

    rt = Runtime(SqlStore(f"sqlite:///{tmp_path / 'h.db'}"))
    try:
        first = asyncio.run(rt.start(g, {"messages": ["hi"]}, thread_id="chat-1"))
        second = asyncio.run(rt.start(g, {"messages": ["more"]}, thread_id="chat-1"))
        last = rt.store.checkpoints(first.id)[-1]
        with TestClient(create_app(rt)) as client:
            page = client.get("/threads/chat-1").text
        assert re.search(rf'<span class="kind">turn 1</span>\s*<a href="/runs/{first.id}">', page)
        assert re.search(rf'<span class="kind">turn 2</span>\s*<a href="/runs/{second.id}">', page)
        assert f'>after #{last.seq} of {first.id}</a>' in page
    finally:
        rt.close()


def test_a_turn_after_a_fork_has_the_number_the_store_gives_it(tmp_path) -> None:
    """Turns are numbered as the store numbers them (``options["turn"]``, as ``harness thread``
    shows): the turn after a fork of turn N is N + 1, however many turns the thread has."""
    from runtime import Runtime, SqlStore
    from server.web import create_app

    g = chat_graph()

    def turn_labels(page: str) -> list[tuple[str, str]]:
        return re.findall(r'<span class="kind">([\w ]+)</span>\s*<a href="/runs/(run_\w+)">', page)

    rt = Runtime(SqlStore(f"sqlite:///{tmp_path / 'h.db'}"))
    try:
        async def talk(thread: str, turns: int) -> list[str]:
            return [(await rt.start(g, {"messages": [f"m{n}"]}, thread_id=thread)).id for n in range(turns)]

        # two turns, a fork of the first, one more turn: that one is turn 2 (of the fork's line)
        one, two = asyncio.run(talk("conv2", 2))
        fork = asyncio.run(rt.fork(rt.store.checkpoints(one)[-1].id))
        [after_fork] = asyncio.run(talk("conv2", 1))
        assert rt.store.get_run(after_fork).options["turn"] == 2
        # three turns, a fork of the first, one more: turn 2 again, not turn 4
        a, b, c = asyncio.run(talk("conv3", 3))
        fork3 = asyncio.run(rt.fork(rt.store.checkpoints(a)[-1].id))
        [next3] = asyncio.run(talk("conv3", 1))
        with TestClient(create_app(rt)) as client:
            conv2 = turn_labels(client.get("/threads/conv2").text)
            conv3 = turn_labels(client.get("/threads/conv3").text)
        # a branch is listed under the run it came from, before that run's line goes on
        assert conv2 == [("turn 1", one), ("fork", fork.id), ("turn 2", after_fork), ("turn 2", two)]
        assert conv3 == [("turn 1", a), ("fork", fork3.id), ("turn 2", next3), ("turn 2", b), ("turn 3", c)]
    finally:
        rt.close()


def test_a_thread_id_holding_url_characters_is_linked_and_read_by_its_page_and_the_api() -> None:
    """Conversation ids such as ``slack/C1/123.4`` are common: the links the pages make, and
    the thread's URL encoded as any client would, reach it (a literal '%' too)."""
    import html
    from urllib.parse import quote

    from runtime import Runtime
    from server.web import create_app

    ids = ["slack/C1/123.4", "q?x=1", "h#1", "ü/ß", "50%2Foff", "a/../b", "b", "./c", "..."]
    rt = Runtime()
    for t in ids:
        asyncio.run(rt.start(chat_graph(), {"messages": ["hi"]}, thread_id=t))
    with TestClient(create_app(rt)) as client:
        links = {html.unescape(u) for u in re.findall(r'href="(/threads/[^"]*)"', client.get("/runs").text)}
        assert len(links) == len(ids)
        for link in links:
            page = client.get(link)
            assert page.status_code == 200 and "reply to hi" in page.text, link
            assert page.text.count("/runs/run_") >= 1
        for t in ids:
            got = client.get("/api/threads/" + quote(t, safe=""))   # one segment, as a client sends an id
            assert got.status_code == 200 and got.json()["thread_id"] == t
    rt.close()
