"""Live updates over server-sent events: a run's stream carries its events, status and
checkpoints and ends with the run; the inbox stream says when the questions change."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Annotated, Any

from local_client import AsyncTestClient, TestClient

from runtime import Graph, RunStatus, Runtime, SqlStore, append
from server.web import create_app


def slow_graph() -> Graph:
    g = Graph("slow")

    @g.node()
    async def first(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.emit({"progress": "half"})
        await asyncio.sleep(0.3)
        return {"x": 1}

    @g.node(after=["first"])
    async def second(state: Any) -> dict[str, Any]:
        return {"y": 2}

    return g


def asking(name: str, then: bool = False) -> Graph:
    """A graph that asks a question first (and, ``then``, runs a node after the answer)."""
    g = Graph(name)

    @g.node()
    async def ask(state: Any, ctx: Any) -> dict[str, Any]:
        return {"a": await ctx.interrupt({"q": "?"})}

    if then:
        @g.node(after=["ask"])
        async def after(state: Any) -> dict[str, Any]:
            return {"b": 1}

    return g


def parse(text: str) -> list[tuple[str, str]]:
    out, event = [], "message"
    for line in text.splitlines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            out.append((event, line[5:].strip()))
            event = "message"
    return out


def first_run(viewer: Runtime) -> str:
    """The id of the run another Runtime over the same file has just started."""
    deadline = time.monotonic() + 10
    while not viewer.store.list_runs() and time.monotonic() < deadline:
        time.sleep(0.01)
    return viewer.store.list_runs()[0].id


def test_a_run_stream_carries_its_events_and_ends_with_the_run(tmp_path: Path) -> None:
    """The run is driven by another Runtime over the same file (as another process would);
    the page follows it from the store."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    driver, viewer = Runtime(store=SqlStore(url)), Runtime(store=SqlStore(url))
    done = threading.Event()
    worker = threading.Thread(target=lambda: (asyncio.run(driver.start(slow_graph(), {})), done.set()))
    worker.start()
    try:
        run_id = first_run(viewer)
        with TestClient(create_app(viewer)) as client:
            page = client.get(f"/runs/{run_id}")
            live_page = 'sse-connect="/runs/' in page.text
            r = client.get(f"/runs/{run_id}/live", timeout=10)
        messages = parse(r.text)
        worker.join(10)
        assert done.is_set()
        assert live_page or "succeeded" in page.text   # a running run's page follows it live
        kinds = [k for k, _ in messages]
        assert "checkpoint" in kinds
        assert kinds[-1] == "end" and messages[-1][1] == "succeeded"
        lines = [d for k, d in messages if k == "event"]
        assert any("node.succeed" in d and "second" in d for d in lines)
        assert any("custom" in d and "half" in d for d in lines)
        assert any(k == "status" and "succeeded" in d for k, d in messages)
    finally:
        worker.join(10)
        driver.close()
        viewer.close()


async def test_the_stream_of_an_unknown_run_is_404(tmp_path: Path) -> None:
    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'h.db'}"))
    try:
        async with AsyncTestClient(create_app(rt)) as client:
            assert (await client.get("/runs/nope/live")).status_code == 404
    finally:
        rt.close()


def ticking_graph() -> Graph:
    g = Graph("ticking")

    @g.node()
    async def tick(state: Any, ctx: Any) -> dict[str, Any]:
        for i in range(15):
            ctx.emit({"tick": i})
            await asyncio.sleep(0.1)
        return {"x": 1}

    return g


def test_a_stream_that_outlives_its_connection_closes_without_end_and_goes_on_from_the_last_event(
        tmp_path: Path) -> None:
    """Past ``MAX_LIFETIME`` the stream closes without ``end`` (which would make the page stop
    following a run still going); the browser's reconnect names the last event it was sent."""
    from server.web import live

    url = f"sqlite:///{tmp_path / 'h.db'}"
    driver, viewer = Runtime(store=SqlStore(url)), Runtime(store=SqlStore(url))
    worker = threading.Thread(target=lambda: asyncio.run(driver.start(ticking_graph(), {})))
    live.MAX_LIFETIME, saved_life = -1.0, live.MAX_LIFETIME   # past it at once: closes before its second event
    worker.start()
    try:
        run_id = first_run(viewer)
        with TestClient(create_app(viewer)) as client:
            first = client.get(f"/runs/{run_id}/live", timeout=10)
            assert [k for k, _ in parse(first.text)][-1] != "end"
            last = [line[3:].strip() for line in first.text.splitlines() if line.startswith("id:")][-1]
            live.MAX_LIFETIME = 30
            again = client.get(f"/runs/{run_id}/live", headers={"Last-Event-ID": last}, timeout=10)
            ids = [int(line[3:]) for line in again.text.splitlines() if line.startswith("id:")]
            assert ids and ids[0] == int(last) + 1   # nothing sent twice, nothing missed
            assert parse(again.text)[-1] == ("end", "succeeded")
            for bad in ("-5", str(2**64)):
                assert client.get(f"/runs/{run_id}/live?after={bad}").status_code == 400
    finally:
        live.MAX_LIFETIME = saved_life
        worker.join(10)
        driver.close()
        viewer.close()


def test_reconnecting_after_every_event_loses_and_repeats_nothing(tmp_path: Path) -> None:
    """Each connection closes at its first chance: what the run's one stream sends (events,
    checkpoints, the end) arrives all the same, each once, over the reconnects."""
    from server.web import live

    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'h.db'}"))
    try:
        run = asyncio.run(rt.start(slow_graph(), {}))
        with TestClient(create_app(rt)) as client:
            whole = parse(client.get(f"/runs/{run.id}/live", timeout=10).text)
            live.MAX_LIFETIME, saved = -1.0, live.MAX_LIFETIME
            try:
                pieces: list[tuple[str, str]] = []
                last, connections = None, 0
                while not pieces or pieces[-1][0] != "end":
                    connections += 1
                    assert connections < 50
                    r = client.get(f"/runs/{run.id}/live", headers={"Last-Event-ID": last} if last else {},
                                   timeout=10)
                    ids = [line[3:].strip() for line in r.text.splitlines() if line.startswith("id:")]
                    last = ids[-1] if ids else last
                    pieces += parse(r.text)
            finally:
                live.MAX_LIFETIME = saved
        assert connections > 3
        assert [m for m in pieces if m[0] != "status"] == [m for m in whole if m[0] != "status"]
    finally:
        rt.close()


def test_the_inbox_stream_says_when_questions_change(tmp_path: Path) -> None:
    from server.web import live

    url = f"sqlite:///{tmp_path / 'h.db'}"
    driver, viewer = Runtime(store=SqlStore(url)), Runtime(store=SqlStore(url))
    g = asking("ask")

    live.INBOX_POLL, saved = 0.05, live.INBOX_POLL
    live.MAX_LIFETIME, saved_life = 3.0, live.MAX_LIFETIME   # long enough for a loaded machine
    try:
        def ask_then_answer() -> None:
            time.sleep(0.2)
            run = asyncio.run(driver.start(g, {}))
            time.sleep(1.0)   # the stream has seen the question by now, whenever it started
            asyncio.run(driver.resume(run.id, "yes"))

        worker = threading.Thread(target=ask_then_answer)
        worker.start()
        with TestClient(create_app(viewer)) as client:
            r = client.get("/inbox/live", timeout=10)
        worker.join(10)
        messages = parse(r.text)
        assert messages[0][0] == "count"
        assert ("changed", "0") in messages   # the answered question left the inbox
        assert messages[-1][0] == "end"
    finally:
        live.INBOX_POLL, live.MAX_LIFETIME = saved, saved_life
        driver.close()
        viewer.close()


async def test_live_only_chunks_of_runs_this_server_drives_reach_the_page() -> None:
    """Ephemeral events (model token chunks) are never stored; a run started from the
    debugger publishes them to the pages following it."""
    from runtime.core.streams import StreamEvent
    from server.web.live import merged
    from server.web.background import LiveHub

    hub = LiveHub()

    async def recorded() -> Any:
        yield StreamEvent("r1", 1, "run.created")
        await asyncio.sleep(0.05)
        yield StreamEvent("r1", 2, "run.succeed", data={"status": "succeeded"})

    seen = []

    async def follow() -> None:
        async for ev in merged(recorded(), hub, "r1"):
            seen.append((ev.type, ev.ephemeral, ev.data.get("payload")))

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.01)
    hub.publish(StreamEvent("r1", 1, "custom", data={"payload": {"token": "Hel"}}, ephemeral=True))
    hub.publish(StreamEvent("other", 1, "custom", data={"payload": {"token": "x"}}, ephemeral=True))
    await task
    assert seen == [("run.created", False, None), ("custom", True, {"token": "Hel"}), ("run.succeed", False, None)]
    assert hub._queues == {}   # the page's subscription ends with the run


def test_live_only_chunks_the_servers_stream_dropped_are_said_to_be_missed() -> None:
    """A run's stream that fell behind drops token chunks and says how many: the page
    shows that, not an empty chunk."""
    from runtime.core.streams import StreamEvent
    from server.web.live import _chunk

    notice = StreamEvent("r1", 7, "stream.dropped", data={"count": 12}, ephemeral=True)
    assert _chunk(notice) == '<span class="chunk dropped">[12 live-only events missed]</span>'


def test_a_run_started_from_the_debugger_streams_its_token_chunks_live(tmp_path: Path) -> None:
    import re

    g = Graph("typing")

    @g.node()
    async def prep(state: Any) -> dict[str, Any]:
        return {"topic": "tides"}

    @g.node(after=["prep"])
    async def write(state: Any, ctx: Any) -> dict[str, Any]:
        await asyncio.sleep(0.4)   # the page subscribes meanwhile
        for token in ("The ", "moon ", "pulls."):
            ctx.emit({"token": token}, ephemeral=True)
            await asyncio.sleep(0.02)
        return {"text": "The moon pulls."}

    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'h.db'}"))
    try:
        run = asyncio.run(rt.start(g, {}))
        cp = asyncio.run(rt.history(run.id))[1]   # after prep: a fork re-runs write
        with TestClient(create_app(rt)) as client:
            page = client.get(f"/checkpoints/{cp.id}/fork")
            token = re.search(r'name="_csrf_token" value="([^"]+)"', page.text)
            assert token is not None
            r = client.post(f"/checkpoints/{cp.id}/fork", data={"_csrf_token": token.group(1), "patch": "",
                                                                   "effects": "mock", "action": "create"},
                            follow_redirects=False)
            assert r.status_code == 303
            fork_id = r.headers["location"].rsplit("/", 1)[-1]
            live = client.get(f"/runs/{fork_id}/live", timeout=10)
        chunks = [d for k, d in parse(live.text) if k == "chunk"]
        assert "".join(re.sub(r"<[^>]+>", "", c) for c in chunks) == "The moon pulls."
    finally:
        rt.close()


def test_loops_and_maps_show_their_iteration_and_item_counts_beside_the_graph(tmp_path: Path) -> None:
    import examples.agent as agent

    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'h.db'}"))
    try:
        run = asyncio.run(rt.start(agent.graph, {"question": "tides"}))
        with TestClient(create_app(rt)) as client:
            page = client.get(f"/runs/{run.id}").text
            assert "<strong>model</strong>: 4 iterations (4 succeeded)" in page
            assert "<strong>read</strong>: 3 items (3 succeeded)" in page
            first = client.get(f"/runs/{run.id}?cp=1", headers={"HX-Request": "true", "HX-Target": "main"}).text
            start = client.get(f"/runs/{run.id}?cp=0").text
        assert 'id="dag-counts" hx-swap-oob="true"' in first   # stepping updates them beside the graph
        assert "<strong>model</strong>: 1 iteration (1 succeeded)" in first
        # before the loop began it has run no iteration, not "1 iteration (1 pending)"
        assert "<strong>model</strong>:" not in start and "<strong>read</strong>:" not in start
    finally:
        rt.close()


def test_a_loop_inside_a_loop_shows_every_instance_of_its_nodes_in_fold_order(tmp_path: Path) -> None:
    import re

    from pydantic import BaseModel

    class Turns(BaseModel):
        outer: int = 0
        inner: int = 0

    g = Graph("nested", Turns)

    @g.node(after=["again"], max_iterations=3)
    def begin(s: Turns) -> dict[str, Any]:
        return {"outer": s.outer + 1, "inner": 0}

    @g.node(after=["begin", "more"], max_iterations=3)
    def step(s: Turns) -> dict[str, Any]:
        return {"inner": s.inner + 1}

    @g.node(after=["step"], when=lambda s: s.inner < 2)
    def more(s: Turns) -> None:
        return None

    @g.node(after=["step"], when=lambda s: s.outer < 2)
    def again(s: Turns) -> None:
        return None

    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'h.db'}"))
    try:
        run = asyncio.run(rt.start(g, {}))
        with TestClient(create_app(rt)) as client:
            page = client.get(f"/runs/{run.id}").text
            assert "<strong>step</strong>: 4 iterations (4 succeeded)" in page
            assert "<strong>begin</strong>: 2 iterations (2 succeeded)" in page
            drawer = client.get(f"/runs/{run.id}?node=step").text
            shown = re.findall(r'<details class="instance" open><summary>([^ <]+) ', drawer)
            assert shown == ["step", "step#0.1", "step#1.0", "step#1.1"]
            one = client.get(f"/runs/{run.id}?node=step%231.0").text
            assert re.findall(r'<details class="instance" open><summary>([^ <]+) ', one) == ["step#1.0"]
    finally:
        rt.close()


def test_a_map_inside_a_loop_is_counted_on_one_line(tmp_path: Path) -> None:
    from pydantic import BaseModel

    class Rounds(BaseModel):
        round: int = 0
        items: list[int] = []
        done: Annotated[list[int], append] = []

    g = Graph("rounds", Rounds)

    @g.node(after=["work"], max_iterations=5)
    def plan(s: Rounds) -> dict[str, Any]:
        return {"round": s.round + 1, "items": [s.round * 10 + i for i in range(3)]}

    @g.node(after=["plan"], map_over="items", when=lambda s: s.round <= 3)
    def work(s: Rounds, item: int) -> dict[str, Any]:
        return {"done": [item]}

    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'h.db'}"))
    try:
        run = asyncio.run(rt.start(g, {}))
        assert run.status == RunStatus.SUCCEEDED, run.error
        with TestClient(create_app(rt)) as client:
            page = client.get(f"/runs/{run.id}").text
        assert page.count("<strong>work</strong>:") == 1
        assert "<strong>work</strong>: 4 iterations (3 succeeded, 1 skipped); 9 items (9 succeeded)" in page
    finally:
        rt.close()


def test_the_page_of_a_paused_run_reloads_once_it_is_answered_elsewhere(tmp_path: Path) -> None:
    """Someone answers the question from another tab or process: the page watching the
    paused run learns it at its next look, and reloads (then follows the run if it runs).
    It holds no connection open meanwhile: a browser allows only a few per host."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    driver, viewer = Runtime(store=SqlStore(url)), Runtime(store=SqlStore(url))
    g = asking("ask-then-go", then=True)

    run = asyncio.run(driver.start(g, {}))
    assert run.status == RunStatus.INTERRUPTED
    try:
        with TestClient(create_app(viewer)) as client:
            page = client.get(f"/runs/{run.id}").text
            moved = f"/runs/{run.id}/moved?after={run.event_seq}"
            assert f'hx-get="{moved}" hx-trigger="every 2s"' in page and "sse-connect" not in page
            still = client.get(moved)
            assert still.status_code == 204 and "hx-refresh" not in still.headers
            asyncio.run(driver.resume(run.id, "yes"))
            gone_on = client.get(moved)
            assert gone_on.status_code == 200 and gone_on.headers["hx-refresh"] == "true"
            assert 'sse-connect' not in client.get(f"/runs/{run.id}").text   # ended: nothing to follow
            assert client.get("/runs/nope/moved?after=0").status_code == 404
    finally:
        driver.close()
        viewer.close()
