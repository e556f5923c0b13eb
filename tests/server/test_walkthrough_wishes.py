"""What users asked of the debugger after a walkthrough, each pinned: a long wait drawn
short on the attempts waterfall, removed list items in index order, a running run's opened
panels kept through refreshes while what they show is the same, a fork's live effects said
on the thread page."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Seeded, app_over, review_graph
from local_client import TestClient
from pydantic import BaseModel
from test_live_follow import cancel, held_run
from test_pages import HTMX, csrf

from runtime import Graph, NodeContext, Runtime, RunStatus, SqlStore
from runtime.core.records import NodeAttempt
from runtime.core.states import NodeStatus

Client = TestClient[Any]

#: how long the person took to answer in these tests: 2 h 14 min
ANSWERED_AFTER = 2 * 3600 + 14 * 60


class Later:
    """A clock a test moves on: hours pass between a question and its answer in no time."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def time(self) -> float:
        return time.time() + self.ahead


def test_a_long_wait_is_drawn_as_a_short_break_and_the_bars_keep_their_true_times(tmp_path: Path) -> None:
    clock = Later()
    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'h.db'}"), clock=clock)
    try:
        graph = review_graph()
        run = asyncio.run(rt.start(graph, {"doc": "notes"}))
        assert run.status == RunStatus.INTERRUPTED
        clock.ahead = ANSWERED_AFTER
        assert asyncio.run(rt.resume(run.id, {"approve": True})).status == RunStatus.SUCCEEDED
        with TestClient(app_over(rt)) as c:
            html = c.get(f"/runs/{run.id}/panels/attempts", headers={"HX-Request": "true"}).text
    finally:
        rt.close()
    assert re.search(r'<span class="gap-label[^"]*">⋯ 2 h 14 min waiting ⋯</span>', html)
    bars = {label: (float(left), float(width)) for label, left, width in re.findall(
        r'<span class="bar-label">(\w+ #\d)</span>.*?<span class="bar [^"]*" style="margin-left: ([\d.]+)%; '
        r'width: ([\d.]+)%"', html)}
    assert set(bars) == {"draft #1", "ask #1", "ask #2"}
    # the hours of waiting take a short break's width, not the whole axis
    asked_end = bars["ask #1"][0] + bars["ask #1"][1]
    assert 0 < bars["ask #2"][0] - asked_end <= 5
    # what ran before the wait keeps its share of the axis (unbroken, it would be squashed to
    # nothing at the left); how its share compares with the last attempt's varies with load
    assert asked_end > 30
    # what the bars say is the real time
    assert "started 2 h 14 min after attempt 1 ended" in html


def test_the_waterfall_breaks_only_long_idle_stretches_and_marks_checkpoints_inside_them(shared: Seeded) -> None:
    from server.web.waterfall import axis, bars, mark

    run = shared.rt.store.get_run(shared.succeeded)
    t0 = run.created_at
    attempts = [NodeAttempt(run.id, "a", 1, NodeStatus.SUCCEEDED, t0 + 0.010, t0 + 0.020),
                NodeAttempt(run.id, "b", 1, NodeStatus.INTERRUPTED, t0 + 0.020, t0 + 0.030),
                NodeAttempt(run.id, "b", 2, NodeStatus.SUCCEEDED, t0 + 0.030 + ANSWERED_AFTER,
                            t0 + 0.040 + ANSWERED_AFTER)]
    shown = axis(attempts, run)
    [gap] = shown.breaks
    assert (gap.start, gap.end) == (t0 + 0.030, t0 + 0.030 + ANSWERED_AFTER)
    drawn = bars(attempts, run, shown)
    # the 40 ms that ran share the axis but the break: each 10 ms attempt a quarter of it
    assert [b["width"] for b in drawn] == [pytest.approx((100 - gap.width) / 4)] * 3
    assert drawn[2]["left"] == pytest.approx(drawn[1]["left"] + drawn[1]["width"] + gap.width)
    assert gap.left < (mark(shown, t0 + 3600) or 0) < gap.left + gap.width
    # a pause under a second, or short beside the time attempts ran, stays on scale
    for pause, ran in ((0.9, 0.01), (3.0, 10.0)):
        retried = [NodeAttempt(run.id, "b", 1, NodeStatus.FAILED, t0, t0 + ran),
                   NodeAttempt(run.id, "b", 2, NodeStatus.SUCCEEDED, t0 + ran + pause, t0 + 2 * ran + pause)]
        assert axis(retried, run).breaks == ()
    # attempts that took no time after a long wait (a clock that stood still): all idle, nothing broken
    instant = [NodeAttempt(run.id, "a", 1, NodeStatus.SUCCEEDED, t0 + 5, t0 + 5)]
    still = axis(instant, run)
    assert still.breaks == () and [b["left"] for b in bars(instant, run, still)] == [pytest.approx(100)]


# ------------------------------------------------------------------ removed list items


class Shelf(BaseModel):
    count: int = 5
    items: list[int] = []
    sent: str = ""


def shelf_graph(kept: int | None = None) -> Graph:
    """``stock`` fills ``items`` (and sends them out as an effect's request); with ``kept``,
    another version of it that keeps only that many."""
    g = Graph("shelf", Shelf)

    @g.node()
    async def stock(s: Shelf, ctx: NodeContext) -> dict[str, Any]:
        items = list(range(s.count if kept is None else kept))
        sent = await ctx.effect("shelf.send", lambda: "sent", request={"items": items})
        return {"items": items, "sent": sent}

    return g


def removed_paths(html: str) -> list[str]:
    """The paths of the removed rows of the change tables on a page, in the order shown."""
    return re.findall(r'class="(?:mono )?op-removed">(?:<td class="mono">|<span class="mono">)?([\w.]+)<', html)


REMOVED = ["items.1", "items.2", "items.3", "items.4"]


def test_removed_list_items_are_listed_by_ascending_index_wherever_changes_are_shown(
        seeded: Seeded, client: Client) -> None:
    rt = seeded.rt
    run = asyncio.run(rt.start(shelf_graph(), {}))
    filled = rt.store.checkpoints(run.id)[-1]
    assert filled.seq > 0 and run.status == RunStatus.SUCCEEDED
    url = f"/checkpoints/{filled.id}/fork"
    preview = client.post(url, data={"_csrf_token": csrf(client, url), "action": "preview",
                                     "patch": '{"items": [0]}'}, headers=HTMX).text
    assert removed_paths(preview) == REMOVED
    fork = asyncio.run(rt.fork(filled.id, {"items": [0]}))
    patched = next(c for c in rt.store.checkpoints(fork.id) if removed_paths(client.get(
        f"/runs/{fork.id}", params={"cp": c.seq}).text))
    assert removed_paths(client.get(f"/runs/{fork.id}", params={"cp": patched.seq}).text) == REMOVED
    assert removed_paths(client.get("/diff", params={"a": filled.id, "b": patched.id}).text) == REMOVED
    # the runtime's own order is unchanged: from the highest index down
    assert [c.dotted() for c in asyncio.run(rt.diff(filled.id, patched.id))] == [
        "items[4]", "items[3]", "items[2]", "items[1]"]

    replay = asyncio.run(rt.replay(run.id, graph=shelf_graph(kept=1))).run_id
    report = client.get(f"/runs/{replay}/report").text
    # the node's writes, then its effect's request: each from index 1 up
    assert removed_paths(report) == REMOVED * 2


# ------------------------------------------------------------------ panels kept through refreshes


def lazy_panels(html: str) -> dict[str, str]:
    """The journal and attempts panels' opening tags, by panel."""
    return {name: tag for tag, name in re.findall(r'(<details class="panel lazy" data-panel="(journal|attempts)"[^>]*>)',
                                                   html)}


def test_a_running_runs_refresh_keeps_its_panels_while_what_they_show_is_the_same(
        seeded: Seeded, client: Client) -> None:
    held = held_run(seeded, client)
    deadline = time.monotonic() + 10   # its first node's attempt recorded: the fork then only waits
    while not seeded.rt.store.node_attempts(held):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    first = lazy_panels(client.get(f"/runs/{held}").text)
    again = lazy_panels(client.get(f"/runs/{held}", headers=HTMX).text)   # a live refresh of #main
    assert again == first and set(first) == {"journal", "attempts"}
    for name, tag in first.items():
        # kept by an id naming what it shows; following the head, it asks for the head too
        assert re.search(rf'id="panel-{name}-head-running-[\w-]+" hx-preserve hx-get="/runs/{held}/panels/{name}"', tag)
    pinned = lazy_panels(client.get(f"/runs/{held}", params={"cp": 0}, headers=HTMX).text)
    assert pinned["journal"] != first["journal"] and f'/panels/journal?cp=0"' in pinned["journal"]
    cancel(seeded, held)
    ended = lazy_panels(client.get(f"/runs/{held}", headers=HTMX).text)     # the refresh at its end
    assert all("hx-preserve" not in tag for tag in ended.values())       # loaded again, as it ended


# ------------------------------------------------------------------ a fork's effects run live


def test_the_thread_page_says_how_many_of_a_mocked_forks_effects_ran_live(seeded: Seeded, client: Client) -> None:
    rt = seeded.rt
    priced = rt.store.checkpoints(seeded.succeeded)[1]
    served = asyncio.run(rt.fork(priced.id))                     # the recorded charge, served
    asked = asyncio.run(rt.fork(priced.id, {"amount": 5}))       # a charge never recorded: asked about
    assert served.status == RunStatus.SUCCEEDED and asked.status == RunStatus.INTERRUPTED
    assert asyncio.run(rt.resume(asked.id, {"action": "live"})).status == RunStatus.SUCCEEDED
    assert seeded.world.charges == ["7", "7"]
    page = client.get(f"/threads/{seeded.succeeded}").text
    lines = dict(re.findall(r'<li [^>]*>\s*<span class="kind">\w+</span>\s*<a href="/runs/(run_\w+)">(.*?)</li>', page, re.S))
    badges = {rid: re.findall(r'<span class="badge ef-mocked">([^<]*)</span>', line) for rid, line in lines.items()}
    assert badges == {seeded.succeeded: [], served.id: ["effects mocked"], asked.id: ["effects mocked, 1 run live"]}
    # the run page's journal says the same of it
    journal = client.get(f"/runs/{asked.id}/panels/journal", headers=HTMX).text
    assert journal.count(">LIVE<") == 1
