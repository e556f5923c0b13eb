"""The run page at a past checkpoint tells what had happened by then from what came after:
an effect still going there is in progress (not in doubt), and the journal, attempts,
interrupts and trace mark what was recorded after the checkpoint. The latest checkpoint
shows the run as it is now."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from conftest import app_over
from local_client import TestClient
from pydantic import BaseModel

from runtime import Graph, NodeContext, Runtime, RunStatus, SqlStore, append
from runtime.core.records import (
    EffectStatus,
    Interrupt,
    InterruptKind,
    InterruptStatus,
    JournalEntry,
    Run,
    RunKind,
)
from server.web.journal import journal_rows

Client = TestClient[Any]


class Batch(BaseModel):
    items: list[int] = []
    got: Annotated[list[str], append] = []
    approved: bool = False
    url: str = ""


def publishing_graph(store: SqlStore, hang: bool = False) -> Graph:
    """A map whose items 1 and 2 fetch until checkpoint #2 (item 0 folded) is stored, then a
    question, then a publish: checkpoint #2 has two effects going, #1 precedes the question.
    ``hang``: item 1's fetch never ends (until the run is cancelled)."""
    g = Graph("past_publish", Batch)

    @g.node()
    def plan(s: Batch) -> dict[str, Any]:
        return {"items": [0, 1, 2]}

    @g.node(after=["plan"], map_over="items")
    async def fetch(s: Batch, ctx: NodeContext, item: int) -> dict[str, Any]:
        async def get() -> str:
            while item and len(store.checkpoints(ctx.run_id)) < 3:
                await asyncio.sleep(0.005)
            if hang and item == 1:
                await asyncio.Event().wait()
            return f"page {item}"

        return {"got": [await ctx.effect("http.get", get, request={"item": item})]}

    @g.node(after=["fetch"])
    async def ask(s: Batch, ctx: NodeContext) -> dict[str, Any]:
        answer = await ctx.interrupt({"question": "publish?"})
        return {"approved": bool(answer)}

    @g.node(after=["ask"])
    async def publish(s: Batch, ctx: NodeContext) -> dict[str, Any]:
        return {"url": await ctx.effect("cms.publish", lambda: "https://cms/1", request={"n": len(s.got)})}

    return g


class Published:
    def __init__(self, path: Path) -> None:
        self.store = SqlStore(f"sqlite:///{path}")
        self.rt = Runtime(store=self.store, max_concurrency=4)
        graph = publishing_graph(self.store)

        async def go() -> Run:
            run = await self.rt.start(graph, {})
            assert run.status == RunStatus.INTERRUPTED, run.error
            return await self.rt.resume(run.id, True)

        run = asyncio.run(go())
        assert run.status == RunStatus.SUCCEEDED, run.error
        self.run_id = run.id
        self.cps = self.store.checkpoints(run.id)
        # the shape the tests rely on: #2 folded item 0 while items 1 and 2 ran; #5 is the pause
        assert self.cps[2].nodes == ("fetch[0]",) and self.cps[2].node_states["fetch[1]"] == "running"
        assert self.cps[5].node_states["ask"] == "interrupted"


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    p = Published(tmp_path_factory.mktemp("past") / "h.db")
    yield p
    p.rt.close()


@pytest.fixture(scope="module")
def web(published: Published) -> Iterator[Client]:
    with TestClient(app_over(published.rt)) as c:
        yield c


def drawer(html: str) -> str:
    start = html.index('id="drawer"')
    return html[start:html.index("</section>", start)]


def journal_row(html: str, node: str) -> str:
    found = re.search(rf"<tr[^>]*><td>{re.escape(node)}</td>.*?</tr>", html, re.S)
    assert found, node
    return found.group(0)


# ------------------------------------------------------------------ effects still going


def test_effects_still_going_at_a_past_checkpoint_are_in_progress_not_in_doubt(
        published: Published, web: Client) -> None:
    shown = drawer(web.get(f"/runs/{published.run_id}?cp=2&node=fetch").text)
    assert "IN DOUBT" not in shown
    effects = re.findall(r"<p>effect http\.get#0 (.*?)</p>", shown, re.S)
    assert len(effects) == 3
    assert effects[0] == '<span class="badge ef-live">LIVE</span>'   # item 0 had its result
    for going in effects[1:]:
        assert re.sub(r"\s+", " ", going) == (
            '<span class="badge ef-running" title="in progress: started, no outcome recorded yet">RUNNING</span> '
            'in progress at this checkpoint, then <span class="later">after it:</span> '
            '<span class="badge ef-live">LIVE</span>')


def test_the_journal_panel_at_a_past_checkpoint_agrees_with_the_drawer(published: Published, web: Client) -> None:
    html = web.get(f"/runs/{published.run_id}/panels/journal?cp=2").text
    assert "IN DOUBT" not in html
    assert 'ef-live">LIVE</span></td>' in journal_row(html, "fetch[0]")
    for item in ("fetch[1]", "fetch[2]"):
        assert "in progress at this checkpoint, then" in journal_row(html, item)


def test_the_latest_checkpoint_shows_the_journal_as_it_is_now(published: Published, web: Client) -> None:
    html = web.get(f"/runs/{published.run_id}/panels/journal?cp={published.cps[-1].seq}").text
    assert "this checkpoint" not in html and "after-cp" not in html
    assert html.count('<span class="badge ef-live">LIVE</span>') == 4


def test_an_effect_a_cancel_cut_off_is_in_doubt_now(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'h.db'}")
    rt = Runtime(store=store, max_concurrency=4)

    async def go() -> Run:
        task = asyncio.ensure_future(rt.start(publishing_graph(store, hang=True), {}))
        while True:
            await asyncio.sleep(0.01)
            runs = store.list_runs(None, None, 1)
            if runs and any(e.node == "fetch[1]" for e in store.journal([runs[0].id])) \
                    and len(store.checkpoints(runs[0].id)) >= 4:   # items 0 and 2 folded
                break
        await rt.cancel(runs[0].id)
        return await task

    try:
        run = asyncio.run(go())
        assert run.status == RunStatus.CANCELLED
        with TestClient(app_over(rt)) as web:
            now = web.get(f"/runs/{run.id}/panels/journal").text
            assert '<span class="badge ef-in-doubt">IN DOUBT</span></td>' in journal_row(now, "fetch[1]")
            # where it was still going, it is said to be, and what it came to
            then = journal_row(web.get(f"/runs/{run.id}/panels/journal?cp=2").text, "fetch[1]")
            assert "in progress at this checkpoint, then" in then and 'ef-in-doubt">IN DOUBT' in then
    finally:
        rt.close()


# ------------------------------------------------------------------ what came after


def test_the_journal_marks_effects_begun_after_the_checkpoint(published: Published, web: Client) -> None:
    html = web.get(f"/runs/{published.run_id}/panels/journal?cp=1").text
    publish = journal_row(html, "publish")
    assert publish.startswith('<tr class="after-cp">')
    assert '<span class="badge ef-live">LIVE</span> <span class="later">after this checkpoint</span>' in publish
    # at the pause (before the answer) too: the publish came after it
    assert journal_row(web.get(f"/runs/{published.run_id}/panels/journal?cp=5").text, "publish") \
        .startswith('<tr class="after-cp">')


def test_the_drawer_leaves_out_effects_begun_after_the_checkpoint(published: Published, web: Client) -> None:
    assert "effect cms.publish" not in drawer(web.get(f"/runs/{published.run_id}?cp=5&node=publish").text)
    assert "effect cms.publish" in drawer(web.get(f"/runs/{published.run_id}?node=publish").text)


def test_the_attempts_mark_what_ran_or_ended_after_the_checkpoint(published: Published, web: Client) -> None:
    html = web.get(f"/runs/{published.run_id}/panels/attempts?cp=2").text
    rows = dict(re.findall(r"<tr([^>]*)><td>([^<]+)</td><td>\d+</td>", html))
    assert {node: cls for cls, node in re.findall(r"<tr([^>]*)><td>([^<]+)</td><td>\d+</td>", html)} == {
        "plan": "", "fetch[0]": "", "fetch[1]": "", "fetch[2]": "", "ask": ' class="after-cp"',
        "publish": ' class="after-cp"'}, rows
    fetch1 = re.search(r"<tr><td>fetch\[1\]</td>.*?</tr>", html, re.S)
    assert fetch1 and ('<span class="badge st-running">running</span> at this checkpoint, then '
                       '<span class="later">after it:</span> <span class="badge st-succeeded">succeeded</span>'
                       ) in fetch1.group(0)
    # the waterfall greys the bars that began after it and draws where the checkpoint fell
    assert re.search(r'<div class="bar-row after-cp"><span class="bar-label">publish #1</span>', html)
    assert 'class="cp-mark" style="left: ' in html
    head = web.get(f"/runs/{published.run_id}/panels/attempts?cp={published.cps[-1].seq}").text
    assert "after-cp" not in head and "cp-mark" not in head and "this checkpoint" not in head


def test_interrupts_say_when_they_were_asked_and_answered(published: Published, web: Client) -> None:
    def section(cp: int) -> str:
        html = web.get(f"/runs/{published.run_id}?cp={cp}").text
        start = html.index("<h2>Interrupts")
        return re.sub(r"\s+", " ", html[start:html.index("</details>", start)])

    before = section(1)
    assert "1, 1 asked after this checkpoint" in before
    assert re.search(r'<div class="interrupt after-cp">.*<span class="badge st-answered">answered</span> '
                     r'<span class="later">asked after this checkpoint</span>', before)
    pause = section(5)
    assert '<div class="interrupt">' in pause and "asked after" not in pause
    assert ('<span class="badge st-pending">pending</span> at this checkpoint, then <span class="later">after it:</span> '
            '<span class="badge st-answered">answered</span>') in pause
    now = section(published.cps[-1].seq)
    assert "this checkpoint" not in now and '<span class="badge st-answered">answered</span>' in now


def test_the_trace_marks_the_events_after_the_checkpoint(published: Published, web: Client) -> None:
    cp = published.cps[2]
    html = web.get(f"/runs/{published.run_id}/panels/events?cp=2").text
    assert f"Checkpoint #2 reflects the events up to #{cp.event_seq}" in html
    assert f'<tr id="ev-{cp.event_seq}">' in html
    # a line where it was taken, above the first event after it; the later ones greyed
    assert f'<tr id="ev-{cp.event_seq + 1}" class="after-cp cp-line">' in html
    assert f'<tr id="ev-{cp.event_seq + 2}" class="after-cp">' in html
    assert html.count("cp-line") == 1
    head = web.get(f"/runs/{published.run_id}/panels/events?cp={published.cps[-1].seq}").text
    assert "after-cp" not in head and "reflects the events" not in head


# ------------------------------------------------------------------ the labels, record by record


def _run(status: RunStatus, head_seq: int = 5) -> Run:
    return Run("run_1", "run_1", "g", "v1", status, RunKind.MAIN, {}, 0.0, 10.0, head_seq=head_seq)


def _entry(status: EffectStatus, at: float, attempt: int = 1) -> JournalEntry:
    return JournalEntry("run_1", "pay", "bank.pay", 0, attempt, "k1", status, {"amount": 1}, at=at)


def _labels(entries: list[JournalEntry], run: Run, until: float | None,
            asked: tuple[Interrupt, ...] = ()) -> tuple[str, str | None, bool]:
    [row] = journal_rows(entries, run, until, asked)
    return row.label, row.later, row.after


def test_an_effect_never_settled_in_a_run_that_ended_is_in_doubt_now_and_was_going_before() -> None:
    run = _run(RunStatus.FAILED)
    entries = [_entry(EffectStatus.STARTED, 1.0)]
    assert _labels(entries, run, None) == ("IN DOUBT", None, False)
    assert _labels(entries, run, 2.0) == ("RUNNING", "IN DOUBT", False)


def test_an_effect_the_runtime_asked_about_was_in_doubt_from_the_question_on() -> None:
    run = _run(RunStatus.SUCCEEDED)
    asked = Interrupt("int_1", "run_1", "pay", "effect:bank.pay#0@run_1/1", InterruptKind.IN_DOUBT, {},
                      InterruptStatus.ANSWERED, created_at=3.0, answer={"action": "result"}, answered_at=5.0)
    entries = [_entry(EffectStatus.STARTED, 1.0), _entry(EffectStatus.SUCCEEDED, 6.0, attempt=2)]
    assert _labels(entries, run, 2.0, (asked,)) == ("RUNNING", "LIVE", False)
    assert _labels(entries, run, 4.0, (asked,)) == ("IN DOUBT", "LIVE", False)
    assert _labels(entries, run, 7.0, (asked,)) == ("LIVE", None, False)


def test_an_undo_done_after_the_checkpoint_is_said_to_be_later() -> None:
    run = _run(RunStatus.FAILED)
    entries = [_entry(EffectStatus.STARTED, 1.0), _entry(EffectStatus.SUCCEEDED, 2.0),
               _entry(EffectStatus.COMPENSATING, 8.0), _entry(EffectStatus.COMPENSATED, 9.0)]
    assert _labels(entries, run, 3.0) == ("LIVE", "COMPENSATED", False)
    assert _labels(entries, run, 0.5) == ("COMPENSATED", None, True)
    assert _labels(entries, run, None) == ("COMPENSATED", None, False)
