"""The debugger's HTML pages over a real SQLite store: the runs list, the run page (whole,
or only its ``main`` block for htmx), its panels, events, the fork editor, replay and its
report, resume, cancel, compensate, export and import, the thread tree and the diff page;
rejected actions (bad input, no CSRF token, wrong state) leave every run and its trace as
they were; user-supplied text is always escaped; off loopback the token rule applies."""

from __future__ import annotations

import asyncio
import gc
import json
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import pytest
from waiting import AnHourLater, wait_for
from local_client import TestClient
from pydantic import BaseModel

from runtime import Graph, NodeContext, NodeStatus, RetryPolicy, Runtime, RunStatus, SqlStore
from server.web import render, services, threads
from server.web.app import create_app
from server.web.auth import TokenMiddleware

if TYPE_CHECKING:
    from conftest import Seeded

Client = TestClient[Any]

XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
HTMX = {"HX-Request": "true", "HX-Target": "main"}
HUGE = 2**70   # beyond any integer a store holds


# ------------------------------------------------------------------ helpers


def snapshot(rt: Runtime) -> dict[str, tuple[str, int, int]]:
    """Every run with its status, trace length and last checkpoint: what a refused action must keep."""
    return {r.id: (r.status.value, len(rt.store.events(r.id, 0)), r.head_seq)
            for r in rt.store.list_runs(None, None, 1000)}


def csrf(client: Client, url: str) -> str:
    """The CSRF token of the form on ``url`` (its hidden field)."""
    page = client.get(url)
    assert page.status_code == 200, page.text
    found = re.search(r'name="_csrf_token" value="([^"]+)"', page.text)
    assert found, f"no form with a CSRF token on {url}"
    return found.group(1)


def full(html: str) -> bool:
    return html.lstrip().startswith("<!doctype html>") and "<html" in html and "</html>" in html


def status_sheet(html: str) -> str:
    found = re.search(r'<style id="dag-status">(.*?)</style>', html, re.S)
    assert found, "no status sheet"
    return found.group(1)


def event_rows(html: str) -> list[int]:
    return [int(s) for s in re.findall(r'<tr id="ev-(\d+)">', html)]


def error_page(response: Any, status: int) -> str:
    """The message of an HTML error page (or of the form re-rendered with its error)."""
    assert response.status_code == status, (response.status_code, response.text[:2000])
    assert response.headers["content-type"].startswith("text/html")
    return str(response.text)


def checkpoint_ids(rt: Runtime, run_id: str) -> list[str]:
    return [c.id for c in services.complete(rt.history(run_id))]


def no_raw_script(html: str) -> None:
    assert "<script>alert" not in html
    assert "alert(1)</script>" not in html


# ------------------------------------------------------------------ data of this module


class Note(BaseModel):
    text: str = ""
    memo: str = ""
    answer: Any = None
    fail: bool = False


def xss_graph() -> Graph:
    """Every place user text reaches: the state, an effect's request, a trace event, an
    interrupt's payload (and its answer), and an error message."""
    g = Graph("pages_xss", Note)

    @g.node()
    async def pay(s: Note, ctx: NodeContext) -> dict[str, Any]:
        ctx.emit({"note": s.text})
        await ctx.effect("payments.charge", lambda: s.text, request={"memo": s.text})
        return {"memo": s.text}

    @g.node(after=["pay"])
    async def ask(s: Note, ctx: NodeContext) -> dict[str, Any]:
        if s.fail:
            raise ValueError(s.text)
        return {"answer": await ctx.interrupt({"question": s.text})}

    return g


def tiny_graph() -> Graph:
    g = Graph("pages_tiny")

    @g.node()
    def one(s: Any) -> dict[str, Any]:
        return {"x": 1}

    return g


class Extra:
    """A second store: many runs (for paging), a long trace, and runs full of markup."""

    def __init__(self, path: Path, map_graph: Graph) -> None:
        self.rt = Runtime(store=SqlStore(f"sqlite:///{path}"), max_concurrency=4)
        xss = xss_graph()

        async def seed() -> None:
            for _ in range(55):
                await self.rt.start(tiny_graph(), {})
            big = await self.rt.start(map_graph, {"count": 60})
            self.big, self.big_head = big.id, big.head_seq
            self.paused = (await self.rt.start(xss, {"text": XSS})).id
            answered = await self.rt.start(xss, {"text": XSS})
            [question] = await self.rt.interrupts(answered.id)
            self.answered = (await self.rt.resume(answered.id, answers={question.id: {"said": XSS}})).id
            self.broken = (await self.rt.start(xss, {"text": XSS, "fail": True})).id

        asyncio.run(seed())
        assert self.rt.store.get_run(self.paused).status == RunStatus.INTERRUPTED
        assert self.rt.store.get_run(self.answered).status == RunStatus.SUCCEEDED
        assert self.rt.store.get_run(self.broken).status == RunStatus.FAILED


@pytest.fixture(scope="module")
def extra(tmp_path_factory: pytest.TempPathFactory, shared: Seeded) -> Iterator[Extra]:
    e = Extra(tmp_path_factory.mktemp("extra") / "h.db", shared.graphs["map"])
    yield e
    e.rt.close()


@pytest.fixture(scope="module")
def other(extra: Extra) -> Iterator[Client]:
    with TestClient(create_app(extra.rt)) as c:
        yield c


# ------------------------------------------------------------------ the runs list


def test_home_redirects_to_the_runs_list(reader: Client) -> None:
    r = reader.get("/", follow_redirects=False)
    assert r.status_code in (301, 302, 303, 307, 308) and r.headers["location"] == "/runs"


def run_links(html: str) -> list[str]:
    return re.findall(r'<td><a href="/runs/(run_[0-9a-f]+)">', html)


def test_runs_list_filters_by_status_kind_graph_and_search(shared: Seeded, reader: Client) -> None:
    every = reader.get("/runs")
    assert every.status_code == 200 and full(every.text)
    assert set(run_links(every.text)) == {shared.succeeded, shared.failed, shared.interrupted, shared.mapped,
                                          shared.looped}
    assert run_links(reader.get("/runs?status=failed").text) == [shared.failed]
    assert run_links(reader.get("/runs?status=interrupted").text) == [shared.interrupted]
    assert run_links(reader.get("/runs?graph=api_map").text) == [shared.mapped]
    assert len(run_links(reader.get("/runs?kind=main").text)) == 5
    forks = reader.get("/runs?kind=fork").text
    assert run_links(forks) == [] and "No runs match." in forks
    found = reader.get("/runs", params={"q": shared.looped[-8:]}).text
    assert run_links(found) == [shared.looped]
    assert f'value="{shared.looped[-8:]}"' in found   # the search box keeps what was searched
    # the filter form remembers the choice
    assert re.search(r'<option value="failed" selected>', reader.get("/runs?status=failed").text)


def test_runs_list_counts_checkpoints_and_steps_as_the_run_page_does(shared: Seeded, reader: Client) -> None:
    html = reader.get("/runs").text
    head = re.findall(r"<th[^>]*>([^<]*)</th>", html)
    assert head[7:9] == ["Checkpoints", "Steps"] and "Attempts" not in head
    assert 'title="node attempts started, retries included: what max_steps limits">Steps<' in html
    for run_id in (shared.looped, shared.failed):
        run = shared.rt.store.get_run(run_id)
        row = re.search(rf'<td><a href="/runs/{run_id}">.*?</tr>', html, re.S)
        assert row, run_id
        cells = re.findall(r"<td>([^<]*)</td>", row.group(0))
        checkpoints, steps = int(cells[-4]), int(cells[-3])
        assert checkpoints == len(shared.rt.store.checkpoints(run_id)) and steps == run.usage["steps"]
        # "steps" means one thing: the run page's usage says the same number
        assert f"<dd>{steps} step{'' if steps == 1 else 's'} · " in reader.get(f"/runs/{run_id}").text
    looped = shared.rt.store.get_run(shared.looped)
    assert looped.usage["steps"] != looped.head_seq + 1   # the two columns are told apart


def test_runs_list_fragment_is_only_the_table(shared: Seeded, reader: Client) -> None:
    r = reader.get("/runs?status=failed", headers={"HX-Request": "true", "HX-Target": "runs"})
    assert r.status_code == 200 and not full(r.text) and "<header" not in r.text
    # it refreshes the page drawn (filters as applied), not what is typed in the form
    assert r.text.lstrip().startswith('<div hidden id="runs-refresh" hx-get="/runs?status=failed&amp;page=1"')
    assert "hx-include" not in r.text
    assert run_links(r.text) == [shared.failed]


def test_a_filter_swaps_the_form_drawn_with_its_choices_and_the_table(shared: Seeded, reader: Client) -> None:
    """So the browser's history, which keeps the page as drawn, restores the filters with the runs."""
    r = reader.get("/runs?status=failed&q=run_", headers={"HX-Request": "true", "HX-Target": "runs-page"})
    assert r.status_code == 200 and not full(r.text)
    assert r.text.lstrip().startswith('<form id="runs-filter"')
    assert '<option value="failed" selected>' in r.text and 'name="q" value="run_"' in r.text
    assert 'id="runs-refresh" hx-get="/runs?status=failed&amp;q=run_&amp;page=1"' in r.text
    assert run_links(r.text) == [shared.failed]


def test_runs_list_pages(extra: Extra, other: Client) -> None:
    every = {r.id for r in extra.rt.store.list_runs(None, None, 1000)}
    assert len(every) > services.PER_PAGE
    first, second = other.get("/runs"), other.get("/runs?page=2")
    one, two = run_links(first.text), run_links(second.text)
    assert len(one) == services.PER_PAGE and set(one) | set(two) == every and not set(one) & set(two)
    assert 'href="/runs?page=2" ' in first.text and 'rel="prev"' not in first.text
    assert 'href="/runs?page=1" ' in second.text and 'rel="next"' not in second.text
    # the pager keeps the filters
    filtered = other.get("/runs?graph=pages_tiny").text
    assert 'href="/runs?graph=pages_tiny&amp;page=2"' in filtered
    assert run_links(other.get("/runs?page=3").text) == []


@pytest.mark.parametrize(("query", "named"), [("status=nope", "unknown status"), ("kind=nope", "unknown kind"),
                                              ("status=%3Cscript%3Ealert(1)%3C/script%3E", "unknown status")])
def test_runs_list_with_an_unknown_filter_is_a_422_page(reader: Client, query: str, named: str) -> None:
    r = reader.get(f"/runs?{query}")
    text = error_page(r, 422)
    assert full(text) and named in text and 'data-status="422"' in text
    no_raw_script(text)


def test_an_error_for_htmx_goes_to_the_flash(reader: Client) -> None:
    r = reader.get("/runs?status=nope", headers={"HX-Request": "true"})
    assert r.status_code == 422 and not full(r.text) and "unknown status" in r.text
    assert r.headers["hx-retarget"] == "#flash" and r.headers["hx-reswap"] == "innerHTML"


# ------------------------------------------------------------------ the run page


def test_run_page_whole_and_as_its_main_block(shared: Seeded, reader: Client) -> None:
    whole = reader.get(f"/runs/{shared.failed}")
    assert whole.status_code == 200 and full(whole.text)
    assert '<div class="dag" id="dag"><svg' in whole.text and 'id="main"' in whole.text
    assert "n must be at least 1" in whole.text                         # the run's error
    assert f'action="/runs/{shared.failed}/resume"' in whole.text      # a failed run can be resumed
    part = reader.get(f"/runs/{shared.failed}", headers=HTMX)
    assert part.status_code == 200 and not full(part.text)
    assert "<html" not in part.text and "<header" not in part.text and "<svg" not in part.text
    assert part.text.lstrip().startswith(("<style id=\"dag-status\">", "<div class=\"actions\""))
    assert '<style id="dag-status">' in part.text and '<nav class="timeline"' in part.text
    last = len(checkpoint_ids(shared.rt, shared.failed)) - 1
    assert f'<h2>Checkpoint #{last} ' in part.text and 'aria-current="step"' in part.text
    assert status_sheet(part.text) == status_sheet(whole.text)


def run_header(html: str) -> str:
    """The run's status and its facts (times, usage) as a refresh swaps them in out of band."""
    title = re.search(r'<h1 id="run-title" hx-swap-oob="true">.*?</h1>', html, re.S)
    meta = re.search(r'<dl class="meta" id="run-meta" hx-swap-oob="true">.*?</dl>', html, re.S)
    assert title and meta, "no header in the fragment"
    return title.group(0) + meta.group(0)


def test_a_refresh_of_a_running_runs_page_brings_its_header_up_to_date(seeded: Seeded, client: Client) -> None:
    start = checkpoint_ids(seeded.rt, seeded.succeeded)[0]
    held = client.post(f"/api/checkpoints/{start}/fork", json={"patch": {"hold": True}}).json()["run_id"]
    wait_for(seeded.rt, held, [RunStatus.RUNNING])
    deadline = time.monotonic() + 10
    while seeded.rt.store.get_run(held).usage.get("steps", 0) < 2:   # price done, charge held
        assert time.monotonic() < deadline, "the held run never reached charge"
        time.sleep(0.01)
    whole = client.get(f"/runs/{held}").text
    assert '<dl class="meta" id="run-meta">' in whole   # in place on the page, swapped in by a refresh

    def took(html: str) -> str:
        found = re.search(r'<dt>Started</dt><dd>[^<]* · <span id="run-took"[^>]*>([^<]+)</span></dd>', html)
        assert found
        return found.group(1)

    first = run_header(client.get(f"/runs/{held}", headers=HTMX).text)
    assert 'sse-swap="status"><span class="badge st-running">running</span>' in first
    assert "<dd>2 steps · 0 tokens · cost 0.0000</dd>" in first
    time.sleep(0.15)   # more than the 0.1 s a duration is shown to
    later = run_header(client.get(f"/runs/{held}", headers=HTMX).text)
    assert took(later) != took(first)   # its duration so far, not the time it took to start

    assert client.post(f"/api/runs/{held}/cancel", json={"reason": "enough"}).status_code == 202
    run = wait_for(seeded.rt, held, [RunStatus.CANCELLED])
    ended = run_header(client.get(f"/runs/{held}", headers=HTMX).text)
    assert 'st-cancelled">cancelled</span>' in ended and "sse-swap" not in ended   # nothing more to follow
    assert took(ended) == render.ENV.filters["fmt_duration"](run.updated_at - run.created_at)   # final
    assert "enough" in ended   # the run's error says why it ended
    time.sleep(0.05)
    assert run_header(client.get(f"/runs/{held}", headers=HTMX).text) == ended


def test_cp_selects_a_checkpoint_and_recolours_the_graph(shared: Seeded, reader: Client) -> None:
    ids = checkpoint_ids(shared.rt, shared.failed)
    start = reader.get(f"/runs/{shared.failed}?cp=0", headers=HTMX)
    end = reader.get(f"/runs/{shared.failed}?cp={len(ids) - 1}", headers=HTMX)
    assert start.status_code == end.status_code == 200
    assert f"<h2>Checkpoint #0 <span class=\"muted mono\">{ids[0]}</span>" in start.text
    assert re.search(r'class="cp-link selected" href="[^"]*\?cp=0"', start.text)
    first_sheet, last_sheet = status_sheet(start.text), status_sheet(end.text)
    assert first_sheet != last_sheet
    assert "--st-failed" not in first_sheet and "--st-pending" in first_sheet
    assert "--st-failed" in last_sheet and "--st-succeeded" in last_sheet
    assert f'/checkpoints/{ids[0]}/fork' in start.text                    # fork from the selected checkpoint
    assert "Changes since the start" in start.text and f"Changes since #{len(ids) - 2}" in end.text


def test_node_drawer_shows_instances_attempts_effects_and_source(shared: Seeded, reader: Client) -> None:
    r = reader.get(f"/runs/{shared.succeeded}?node=charge")
    assert r.status_code == 200
    drawer = r.text[r.text.index('id="drawer"'):]
    assert 'aria-label="node charge"' in r.text
    assert "attempt 1: <span class=\"badge st-succeeded\">" in drawer
    assert "effect payments.charge#0" in drawer and ">LIVE<" in drawer
    assert '<pre class="source">' in drawer and "async def charge(" in drawer
    assert "rcpt-7" in drawer                                            # its writes
    css = status_sheet(r.text)
    assert "stroke: var(--accent)" in css                                # the graph marks the selected node

    # a node shows all its instances in the order they fold; an instance asked for, itself alone
    def instances(run_id: str, node: str) -> list[str]:
        html = reader.get(f"/runs/{run_id}", params={"node": node}, headers=HTMX).text
        return re.findall(r'<details class="instance" open><summary>([^ <]+) ', html)

    assert instances(shared.mapped, "work") == ["work[0]", "work[1]", "work[2]"]   # the map itself is said apart
    assert instances(shared.mapped, "work[1]") == ["work[1]"]
    assert instances(shared.looped, "model") == ["model", "model#1"]
    assert instances(shared.looped, "model#1") == ["model#1"]
    # at the first checkpoint nothing has run yet
    early = reader.get(f"/runs/{shared.succeeded}?cp=0&node=charge").text
    drawer = early[early.index('id="drawer"'):early.index("</section>", early.index('id="drawer"'))]
    assert "charge <span class=\"badge st-pending\">" in drawer
    assert "attempt 1" not in drawer and "effect payments.charge" not in drawer


def node_row(html: str, node: str) -> str:
    """The instances cell of ``node``'s row in the selected checkpoint's node table."""
    found = re.search(rf'>{re.escape(node)}</a></td>\s*<td>(.*?)</td></tr>', html, re.S)
    assert found, f"no row for {node}"
    return found.group(1)


def test_the_node_table_counts_a_maps_items_and_a_loops_iterations(seeded: Seeded, client: Client) -> None:
    class Items(BaseModel):
        items: list[int] = []

    g = Graph("some_fail", Items)

    @g.node()
    def plan(s: Items) -> dict[str, Any]:
        return {"items": list(range(8))}

    @g.node(after=["plan"], map_over="items")
    def work(s: Items, item: int) -> None:
        if item % 3 == 1:
            raise ValueError(f"item {item} is bad")

    run = asyncio.run(seeded.rt.start(g, {}))
    assert run.status == RunStatus.FAILED
    states = services.run_page(seeded.rt, run.id).node_states
    failed = sum(1 for n, st in states.items() if n.startswith("work[") and st.value == "failed")
    assert failed and states["work"].value == "failed"   # the map's group record fails with its items
    page = client.get(f"/runs/{run.id}").text
    line = re.search(r'id="dag-counts".*?</ul>', page, re.S)
    assert line and f" {failed} failed" in line.group(0)   # the line under the graph agrees
    assert f'st-failed">failed</span>×{failed} ' in node_row(page, "work")
    items = sum(1 for n in states if n.startswith("work["))
    counts = [int(n) for n in re.findall(r"×(\d+)", node_row(page, "work"))]
    assert sum(counts) == items == 8
    # a loop's iterations are its instances: each counts
    loop = client.get(f"/runs/{seeded.looped}").text
    iterations = sum(1 for n in services.run_page(seeded.rt, seeded.looped).node_states if n.split("#")[0] == "model")
    assert iterations > 1 and f"succeeded</span>×{iterations} " in node_row(loop, "model")


def test_node_drawer_of_a_wide_map_shows_its_items_a_page_at_a_time(extra: Extra, other: Client) -> None:
    per = services.INSTANCES_PER_PAGE
    url = f"/runs/{extra.big}?cp={extra.big_head}&node=work"

    def instances(html: str) -> list[str]:
        return re.findall(r'<details class="instance" open><summary>([^ <]+) ', html)

    first, second = other.get(url, headers=HTMX).text, other.get(url + "&page=2", headers=HTMX).text
    assert instances(first) == [f"work[{i}]" for i in range(per)]   # the map's own record is no item
    assert instances(second) == [f"work[{i}]" for i in range(per, 60)]
    assert f'hx-get="/runs/{extra.big}?cp={extra.big_head}&amp;node=work&amp;page=2"' in first
    assert "← earlier items" not in first
    assert "← earlier items" in second and "later items →" not in second


def test_a_checkpoint_where_a_wide_map_is_due_lists_a_bounded_part_of_it(seeded: Seeded, client: Client) -> None:
    """Its items added to the state and ready next, each one a row or a name: the page shows the
    first of them and says how many more there are (the JSON API has them all)."""
    from server.web import pages

    wide = asyncio.run(seeded.rt.start(seeded.graphs["map"], {"count": 250}))
    planned = next(c for c in seeded.rt.store.checkpoints(wide.id) if "plan" in c.nodes)
    previous = seeded.rt.store.find_checkpoint(wide.id, planned.seq - 1)
    assert previous is not None
    html = client.get(f"/runs/{wide.id}", params={"cp": planned.seq}, headers=HTMX).text
    ready = re.search(r"ready next: ([^·]*) ·", html)
    assert ready and ready.group(1).strip() == ", ".join(f"work[{i}]" for i in range(pages.READY_SHOWN)) + \
        f" and {250 - pages.READY_SHOWN} more"
    rows = re.findall(r'<tr class="op-added"><td class="mono">items\.(\d+)</td>', html)
    assert rows == [str(i) for i in range(pages.CHANGE_ROWS)]
    # an added item had no value before: said so, not shown as a JSON null
    first = re.search(r'<tr class="op-added"><td class="mono">items\.0</td><td>added</td><td>(.*?)</td>', html)
    assert first and "absent" in first.group(1) and "null" not in first.group(1), first
    assert f"… {250 - pages.CHANGE_ROWS} more" in html
    assert f'href="/api/diff?a={previous.id}&amp;b={planned.id}"' in html
    everything = client.get("/api/diff", params={"a": previous.id, "b": planned.id}).json()["changes"]
    assert len(everything) == 250
    # the diff page likewise, past its own bound
    assert threads.DIFF_ROWS < 600
    wider = asyncio.run(seeded.rt.start(seeded.graphs["map"], {"count": 600}))
    cps = seeded.rt.store.checkpoints(wider.id)
    compared = client.get("/diff", params={"a": cps[0].id, "b": cps[-1].id}).text
    assert len(re.findall(r'<tr class="op-', compared)) == threads.DIFF_ROWS
    assert f'href="/api/diff?a={cps[0].id}&amp;b={cps[-1].id}"' in compared


def test_a_fork_page_names_the_mocks_no_effect_called(seeded: Seeded, client: Client):
    cps = seeded.rt.store.checkpoints(seeded.succeeded)
    typo = asyncio.run(seeded.rt.fork(cps[1].id, mocks={"payments.charge": "r", "payments.chrage": "typo"}))
    right = asyncio.run(seeded.rt.fork(cps[1].id, mocks={"payments.charge": "r"}))
    assert typo.status == right.status == RunStatus.SUCCEEDED
    assert "never used: payments.chrage" in client.get(f"/runs/{typo.id}").text
    assert "never used" not in client.get(f"/runs/{right.id}").text


def test_compare_offers_the_runs_latest_checkpoint_to_compare_with(seeded: Seeded, client: Client):
    cps = seeded.rt.store.checkpoints(seeded.succeeded)
    # a later run of the same thread lists its checkpoints first: not what "To" should be
    asyncio.run(seeded.rt.fork(cps[1].id, mocks={"payments.charge": "r"}))

    def chosen(a: str) -> list[str]:
        page = client.get("/diff", params={"a": a}).text
        to = page[page.index('name="b"'):]
        return re.findall(r'<option value="([^"]+)" selected>', to[:to.index("</select>")])

    assert chosen(cps[0].id) == [cps[-1].id]
    assert chosen(cps[-1].id) == [cps[-2].id]   # from the head: the checkpoint before it


@pytest.mark.parametrize("url", ["/runs/run_nope", "/runs/{failed}?cp=99", "/runs/{failed}?node=nope",
                                 "/runs/{failed}?cp=0&node=nope", "/runs/%3Cscript%3Ealert(1)%3C%2Fscript%3E",
                                 "/runs/{failed}/panels/nope", "/runs/{failed}/panels/events?cp=99",
                                 "/runs/run_nope/panels/journal", "/runs/{failed}/events/999",
                                 "/runs/run_nope/events/1", "/checkpoints/cp_nope/fork", "/runs/run_nope/replay",
                                 "/runs/{failed}/report", "/runs/run_nope/export", "/threads/nope",
                                 "/diff?a=cp_nope", "/runs/{failed}?cp=-1", f"/runs/{{failed}}?cp={HUGE}",
                                 f"/runs/{{failed}}/panels/journal?cp={HUGE}", f"/runs/{{failed}}/events/{HUGE}",
                                 "/runs/{mapped}?node=work%5B99%5D",
                                 "/runs/{looped}?node=model%239", "/runs/{failed}?node="])
def test_unknown_things_are_404_pages(shared: Seeded, reader: Client, url: str) -> None:
    url = url.format(failed=shared.failed, mapped=shared.mapped, looped=shared.looped)
    text = error_page(reader.get(url), 404)
    assert full(text) and 'data-status="404"' in text
    no_raw_script(text)


def test_page_numbers_past_the_end_are_empty_pages(shared: Seeded, reader: Client) -> None:
    assert run_links(reader.get(f"/runs?page={HUGE}").text) == []
    for name in ("events", "attempts", "nodes"):
        r = reader.get(f"/runs/{shared.failed}/panels/{name}?page={HUGE}")
        assert r.status_code == 200 and "later →" not in r.text
    assert event_rows(reader.get(f"/runs/{shared.failed}/panels/events?page={HUGE}&eq=node").text) == []


#: past a 32-bit sequence column (PostgreSQL's), though within a 64-bit integer
PAST_SEQ = 99_999_999_999


def test_seq_and_page_numbers_past_what_a_store_holds_name_nothing(rt: Runtime) -> None:
    """On every store (PostgreSQL keeps sequence numbers in 32-bit columns): the same 404s
    and empty pages as for a number just past the end, not a database error."""
    run_id = asyncio.run(rt.start(tiny_graph(), {})).id
    with TestClient(create_app(rt)) as client:
        for url in (f"/runs/{run_id}?cp={PAST_SEQ}", f"/runs/{run_id}/panels/events?cp={PAST_SEQ}",
                    f"/runs/{run_id}/events/{PAST_SEQ}"):
            error_page(client.get(url), 404)
        for query in (f"page={PAST_SEQ}", f"page={PAST_SEQ}&eq=node"):
            r = client.get(f"/runs/{run_id}/panels/events?{query}")
            assert r.status_code == 200 and event_rows(r.text) == [] and "later →" not in r.text
        for path in ("checkpoints", "events"):
            page = client.get(f"/api/runs/{run_id}/{path}", params={"after": PAST_SEQ}).json()
            assert page[path] == [] and not page["has_more"]


def test_cp_must_be_a_number(shared: Seeded, reader: Client) -> None:
    r = reader.get(f"/runs/{shared.failed}?cp=abc")
    assert r.status_code == 400 and "<strong>400</strong> cp: Expected `int | null`, got `str`" in r.text   # names it
    too_long = reader.get(f"/runs/{shared.failed}/panels/events", params={"eq": "x" * 201})
    assert too_long.status_code == 400 and "<strong>400</strong> eq: " in too_long.text


# ------------------------------------------------------------------ panels and events


@pytest.mark.parametrize("name", ["journal", "attempts", "events", "nodes"])
def test_each_panel_is_a_page_and_a_fragment(shared: Seeded, reader: Client, name: str) -> None:
    url = f"/runs/{shared.succeeded}/panels/{name}?cp=1"
    whole, part = reader.get(url), reader.get(url, headers={"HX-Request": "true"})
    assert whole.status_code == part.status_code == 200
    assert full(whole.text) and f'<a href="/runs/{shared.succeeded}?cp=1">' in whole.text
    assert not full(part.text) and "<h1>" not in part.text
    assert part.text.strip() and part.text.strip() in whole.text


def test_panels_show_what_the_run_recorded(shared: Seeded, reader: Client) -> None:
    journal = reader.get(f"/runs/{shared.succeeded}/panels/journal", headers={"HX-Request": "true"}).text
    assert "payments.charge#0" in journal and ">LIVE<" in journal and "rcpt-7" in journal
    assert "&#34;amount&#34;: 70" in journal
    attempts = reader.get(f"/runs/{shared.failed}/panels/attempts", headers={"HX-Request": "true"}).text
    assert re.findall(r"<tr><td>(\w+)</td><td>1</td>", attempts) == ["first", "second"]
    assert "<strong>invalid_input</strong>" in attempts and "n must be at least 1" in attempts
    assert attempts.count('class="bar-row"') == 2
    nodes = reader.get(f"/runs/{shared.mapped}/panels/nodes", headers={"HX-Request": "true"}).text
    assert re.findall(r'node=([^"]+)">', nodes) == ["plan", "work", "reduce"]
    assert "succeeded</span>×3" in nodes   # its 3 items; the group record is the map itself
    empty = reader.get(f"/runs/{shared.failed}/panels/journal", headers={"HX-Request": "true"}).text
    assert "No effects." in empty


def test_events_panel_searches_and_pages(shared: Seeded, reader: Client, extra: Extra, other: Client) -> None:
    url = f"/runs/{shared.mapped}/panels/events"
    found = reader.get(url, params={"eq": "work[1]"}, headers={"HX-Request": "true"}).text
    rows = event_rows(found)
    recorded = [e for e in shared.rt.store.events(shared.mapped, 0) if e.node == "work[1]"]
    assert rows == [e.seq for e in recorded] and len(rows) == 2
    assert 'value="work[1]"' in found
    assert event_rows(reader.get(url, params={"eq": "no such thing"}).text) == []
    assert "No events match." in reader.get(url, params={"eq": "no such thing"}).text

    total = len(extra.rt.store.events(extra.big, 0))
    per = services.EVENTS_PER_PAGE
    assert per < total <= 2 * per
    big = f"/runs/{extra.big}/panels/events"
    first, second = other.get(big).text, other.get(big, params={"page": 2}).text
    assert event_rows(first) == list(range(1, per + 1)) and event_rows(second) == list(range(per + 1, total + 1))
    assert "later →" in first and "← earlier" not in first
    assert "← earlier" in second and "later →" not in second
    assert event_rows(other.get(big, params={"page": 3}).text) == []
    # paging a search keeps the search
    matching = [e.seq for e in extra.rt.store.events(extra.big, 0) if e.type.startswith("node.")]
    assert len(matching) > per
    searched = other.get(big, params={"eq": "node."}).text
    assert event_rows(searched) == matching[:per]
    assert f'href="{big}?cp={extra.big_head}&amp;page=2&amp;eq=node."' in searched
    assert event_rows(other.get(big, params={"eq": "node.", "page": 2}).text) == matching[per:]
    assert "eq=" not in first
    too_long = other.get(big, params={"eq": "x" * 201})
    assert too_long.status_code == 400


def test_an_event_has_its_own_page(shared: Seeded, reader: Client) -> None:
    events = shared.rt.store.events(shared.failed, 0)
    failed = next(e for e in events if e.type == "node.fail")
    r = reader.get(f"/runs/{shared.failed}/events/{failed.seq}")
    assert r.status_code == 200 and full(r.text)
    assert f"event #{failed.seq}</h1>" in r.text and "<dd>node.fail</dd>" in r.text
    assert f'rel="prev">← #{failed.seq - 1}</a>' in r.text
    reflects = re.search(rf'href="/runs/{shared.failed}\?cp=(\d+)">#\d+</a> \(the first that reflects it\)', r.text)
    assert reflects
    # its node opens at that checkpoint, where the event shows, not at whatever the run did since
    assert f'href="/runs/{shared.failed}?cp={reflects.group(1)}&amp;node=second"' in r.text
    assert 'class="selected-row"' in r.text
    last = reader.get(f"/runs/{shared.failed}/events/{events[-1].seq}").text
    assert 'rel="next"' not in last


def test_a_succeeded_nodes_event_page_shows_what_it_wrote(shared: Seeded, reader: Client) -> None:
    events = shared.rt.store.events(shared.looped, 0)
    done = [e for e in events if e.type == "node.succeed"]
    writes = {(w.node, w.attempt): w.value for w in shared.rt.store.pending_writes(shared.looped)}
    ev = next(e for e in done if writes[(e.node, e.attempt)])
    field = next(iter(writes[(ev.node, ev.attempt)]))
    page = reader.get(f"/runs/{shared.looped}/events/{ev.seq}").text
    data = page.split("<h2>Data</h2>", 1)[1].split("</section>", 1)[0]
    assert "writes" in data and field in data


# ------------------------------------------------------------------ escaping


def test_markup_in_states_payloads_effects_and_errors_is_shown_as_text(extra: Extra, other: Client) -> None:
    pages = {}
    for run_id in (extra.paused, extra.answered, extra.broken):
        pages[f"/runs/{run_id}"] = 2
        for name in ("journal", "events", "attempts", "nodes"):
            pages[f"/runs/{run_id}/panels/{name}"] = 0
        pages[f"/checkpoints/{checkpoint_ids(extra.rt, run_id)[-1]}/fork"] = 2
    pages[f"/runs/{extra.paused}?node=pay"] = 3
    pages[f"/runs/{extra.answered}?node=ask"] = 2
    for url, at_least in pages.items():
        for headers in ({}, {"HX-Request": "true"}):
            r = other.get(url, headers=headers)
            assert r.status_code == 200, (url, r.text[:500])
            no_raw_script(r.text)
            assert r.text.count("&lt;script&gt;") >= at_least, url
    # where each kind of text shows, escaped
    journal = other.get(f"/runs/{extra.paused}/panels/journal").text
    assert f"&#34;memo&#34;: &#34;{ESCAPED}&#34;" in journal                           # the effect's request
    emitted = next(e for e in extra.rt.store.events(extra.paused, 0) if e.type == "custom")
    event = other.get(f"/runs/{extra.paused}/events/{emitted.seq}").text
    no_raw_script(event)
    assert ESCAPED in event
    answered = other.get(f"/runs/{extra.answered}").text
    assert "&#34;said&#34;: &#34;&lt;script&gt;" in answered                             # the interrupt's answer
    broken = other.get(f"/runs/{extra.broken}").text
    assert f"invalid_input: ValueError: {ESCAPED} (node ask)" in broken                # the run's error
    attempts = other.get(f"/runs/{extra.broken}/panels/attempts").text
    assert f"<strong>invalid_input</strong> ValueError: {ESCAPED}" in attempts
    fork = other.get(f"/checkpoints/{checkpoint_ids(extra.rt, extra.paused)[-1]}/fork").text
    assert f'<span class="j-str">"{ESCAPED}"</span>' in fork                            # the state
    searched = other.get("/runs", params={"q": XSS}).text
    no_raw_script(searched)
    assert f'value="{ESCAPED}"' in searched


def test_markup_in_a_fork_patch_is_echoed_as_text(extra: Extra, other: Client) -> None:
    cp = checkpoint_ids(extra.rt, extra.paused)[-1]
    url = f"/checkpoints/{cp}/fork"
    before = snapshot(extra.rt)
    for patch in (json.dumps({"text": XSS + "2"}), json.dumps({XSS: 1}), XSS):
        r = other.post(url, data={"_csrf_token": csrf(other, url), "action": "preview", "patch": patch})
        no_raw_script(r.text)
        assert r.status_code in (200, 422)
    assert snapshot(extra.rt) == before


# ------------------------------------------------------------------ fork


def test_the_fork_form_shows_the_state_its_fields_and_effects(shared: Seeded, reader: Client) -> None:
    cp = checkpoint_ids(shared.rt, shared.succeeded)[1]
    r = reader.get(f"/checkpoints/{cp}/fork")
    assert r.status_code == 200 and full(r.text)
    assert "Fork from checkpoint #1 of" in r.text
    assert "<code>order_id</code> (integer)" in r.text and "<code>hold</code> (boolean)" in r.text
    assert "Recorded effects a mocked fork can serve: payments.charge" in r.text
    assert '<span class="j-key">amount</span>: <span class="j-num">70</span>' in r.text
    assert re.search(r'<input type="radio" name="effects" value="mock" checked>', r.text)


def test_fork_preview_shows_the_diff_and_creates_nothing(seeded: Seeded, client: Client) -> None:
    cp = checkpoint_ids(seeded.rt, seeded.failed)[1]
    url = f"/checkpoints/{cp}/fork"
    token = csrf(client, url)
    before = snapshot(seeded.rt)
    r = client.post(url, data={"_csrf_token": token, "action": "preview", "patch": '{"n": 2}'})
    assert r.status_code == 200 and full(r.text)
    assert re.search(r'<tr class="op-changed"><td class="mono">n</td><td>changed</td><td><code>0</code></td>'
                     r'<td><code>2</code></td></tr>', r.text)
    assert ">{&#34;n&#34;: 2}</textarea>" in r.text                     # the patch stays in the editor
    part = client.post(url, data={"action": "preview", "patch": '{"n": 2}'},
                       headers={"HX-Request": "true", "x-csrftoken": token})
    assert part.status_code == 200 and not full(part.text) and "What the patch changes" in part.text
    same = client.post(url, data={"_csrf_token": token, "action": "preview", "patch": '{"n": 0}'})
    assert "The patch changes nothing." in same.text
    assert snapshot(seeded.rt) == before


def test_fork_create_redirects_to_the_new_run(seeded: Seeded, client: Client) -> None:
    cp = checkpoint_ids(seeded.rt, seeded.failed)[1]
    url = f"/checkpoints/{cp}/fork"
    token = csrf(client, url)
    before = set(snapshot(seeded.rt))
    r = client.post(url, data={"_csrf_token": token, "action": "create", "patch": '{"n": 2}', "effects": "mock"},
                    follow_redirects=False)
    assert r.status_code == 303
    fork_id = r.headers["location"].removeprefix("/runs/")
    assert set(snapshot(seeded.rt)) == before | {fork_id}
    run = wait_for(seeded.rt, fork_id)
    assert run.status == RunStatus.SUCCEEDED and run.kind.value == "fork" and run.parent_run_id == seeded.failed
    page = client.get(f"/runs/{fork_id}").text
    assert "second with n=2" in page and f'of <a href="/runs/{seeded.failed}">' in page

    via_htmx = client.post(url, data={"action": "create", "patch": '{"n": 3}'},
                           headers={"HX-Request": "true", "x-csrftoken": token}, follow_redirects=False)
    assert via_htmx.status_code == 200 and via_htmx.text == ""
    second = via_htmx.headers["hx-redirect"].removeprefix("/runs/")
    assert wait_for(seeded.rt, second).status == RunStatus.SUCCEEDED
    assert set(snapshot(seeded.rt)) == before | {fork_id, second}

    # the thread tree: both forks hang off checkpoint #1 with the field their patch edited
    thread = client.get(f"/threads/{seeded.failed}")
    assert thread.status_code == 200
    items = re.findall(r'<li style="margin-left: ([\d.]+)rem" class="branch kind-(\w+)">\s*'
                       r'<span class="kind">\w+</span>\s*<a href="/runs/(run_\w+)">', thread.text)
    assert [(depth, kind, rid) for depth, kind, rid in items] == [
        ("0.0", "main", seeded.failed), ("1.6", "fork", fork_id), ("1.6", "fork", second)]
    assert thread.text.count("patched: <code>n</code>") == 2
    assert thread.text.count(f"from #1 of {seeded.failed}") == 2
    assert thread.text.count("effects mocked") == 2
    # comparing starts at the thread's first checkpoint (its first run has no base)
    [first] = re.findall(r'href="/diff\?a=([^"]+)">Compare checkpoints', thread.text)
    assert first == seeded.rt.store.checkpoints(seeded.failed)[0].id
    assert client.get(f"/diff?a={first}").status_code == 200


@pytest.mark.parametrize(("patch", "named"), [
    ('{"bogus": 1}', "unknown state field(s) &#39;bogus&#39;"),
    ('{"n": "two"}', "The patch does not fit the state: field &#39;n&#39; must be a whole number"),
    ("[1]", "must be a JSON object of state fields, got list"),
    ('{"n": ', "patch is not valid JSON"),
    ("null", "must be a JSON object of state fields, got null"),   # typed, not left empty: not "no patch"
    ("[" * 100_000 + "]" * 100_000, "patch nests deeper than 100 levels"),   # read as the JSON API reads it
    ('{"n": NaN}', "patch is not accepted"),
])
def test_an_invalid_patch_is_a_422_with_its_message_and_creates_nothing(seeded: Seeded, client: Client,
                                                                         patch: str, named: str) -> None:
    cp = checkpoint_ids(seeded.rt, seeded.failed)[1]
    url = f"/checkpoints/{cp}/fork"
    token = csrf(client, url)
    before = snapshot(seeded.rt)
    for action in ("preview", "create"):
        r = client.post(url, data={"_csrf_token": token, "action": action, "patch": patch}, follow_redirects=False)
        text = error_page(r, 422)
        message = re.search(r'<p class="error field-error" role="alert">(.*?)</p>', text, re.S)
        assert message and named in message.group(1), text
        part = client.post(url, data={"action": action, "patch": patch}, follow_redirects=False,
                           headers={"HX-Request": "true", "x-csrftoken": token})
        assert part.status_code == 422 and named in part.text and not full(part.text)
    assert snapshot(seeded.rt) == before


@pytest.mark.parametrize(("fields", "named"), [
    ({"effects": "maybe"}, "effects must be &#39;mock&#39; or &#39;live&#39;"),
    ({"mocks": "[1]"}, "mocks must be a JSON object"),
    ({"mocks": "null"}, "mocks must be a JSON object of {effect name: result}, got null")])
def test_invalid_fork_options_are_422_and_create_nothing(seeded: Seeded, client: Client, fields: dict[str, str],
                                                         named: str) -> None:
    cp = checkpoint_ids(seeded.rt, seeded.failed)[1]
    url = f"/checkpoints/{cp}/fork"
    before = snapshot(seeded.rt)
    r = client.post(url, data={"_csrf_token": csrf(client, url), "action": "create", "patch": '{"n": 2}', **fields})
    assert named in error_page(r, 422)
    assert snapshot(seeded.rt) == before


# ------------------------------------------------------------------ CSRF


def test_a_refused_csrf_token_tells_an_htmx_page_to_reload(shared: Seeded, reader: Client) -> None:
    """A page kept open while the server restarted holds a token the new server refuses: the
    message goes where the page shows messages (the page's htmx settings swap it in) and says
    what to do."""
    reader.get(f"/runs/{shared.interrupted}")
    r = reader.post(f"/runs/{shared.interrupted}/cancel", data={"reason": "no"},
                    headers={"HX-Request": "true", "x-csrftoken": "from-an-earlier-server"})
    assert r.status_code == 403 and r.headers["hx-retarget"] == "#flash"
    assert "reload it and try again" in r.text and not full(r.text)
    config = re.search(r'<meta name="htmx-config" content=\'(.*?)\'>', reader.get("/runs").text)
    assert config and any(rule.get("swap") and re.fullmatch(rule["code"], "403")
                          for rule in json.loads(config.group(1))["responseHandling"])
    assert shared.rt.store.get_run(shared.interrupted).status == RunStatus.INTERRUPTED


def test_posts_without_the_csrf_token_are_refused_and_change_nothing(seeded: Seeded, client: Client,
                                                                      empty_rt: Runtime) -> None:
    cp = checkpoint_ids(seeded.rt, seeded.failed)[1]
    client.get(f"/checkpoints/{cp}/fork")          # the client holds a CSRF cookie: only the token is missing
    assert client.cookies.get("csrftoken")
    before = snapshot(seeded.rt)
    posts: list[tuple[str, dict[str, str]]] = [
        (f"/checkpoints/{cp}/fork", {"action": "create", "patch": '{"n": 2}'}),
        (f"/checkpoints/{cp}/fork", {"action": "preview", "patch": '{"n": 2}'}),
        (f"/runs/{seeded.succeeded}/replay", {}),
        (f"/runs/{seeded.failed}/resume", {}),
        (f"/runs/{seeded.interrupted}/cancel", {"reason": "no"}),
        (f"/runs/{seeded.succeeded}/compensate", {}),
    ]
    for url, data in posts:
        for token in ({}, {"_csrf_token": "forged"}):
            r = client.post(url, data={**data, **token}, follow_redirects=False)
            assert r.status_code == 403, (url, r.status_code, r.text[:300])
        r = client.post(url, data=data, headers={"x-csrftoken": "forged"}, follow_redirects=False)
        assert r.status_code == 403, url
    document = client.get(f"/runs/{seeded.failed}/export").content
    with TestClient(create_app(empty_rt)) as fresh:
        fresh.get("/import")
        r = fresh.post("/import", files={"file": ("t.json", document, "application/json")},
                       headers={"x-csrftoken": "forged"})
        assert r.status_code == 403
        assert snapshot(empty_rt) == {}
    assert snapshot(seeded.rt) == before and seeded.world.refunds == []


# Litestar's CSRF middleware parses a multipart body to look for the token and, when it
# refuses the request, leaves the uploaded file for the garbage collector to close
@pytest.mark.filterwarnings("ignore:Unclosed file <tempfile.SpooledTemporaryFile:ResourceWarning")
def test_an_import_without_the_csrf_token_is_refused_and_writes_nothing(seeded: Seeded, client: Client,
                                                                        empty_rt: Runtime) -> None:
    document = client.get(f"/runs/{seeded.failed}/export").content
    with TestClient(create_app(empty_rt)) as fresh:
        fresh.get("/import")
        for data in ({}, {"_csrf_token": "forged"}):
            r = fresh.post("/import", data=data, files={"file": ("t.json", document, "application/json")})
            assert r.status_code == 403
        gc.collect()
    assert snapshot(empty_rt) == {}


# ------------------------------------------------------------------ replay


def order_v2(order: Graph) -> Graph:
    """The order graph as a later version: pricing changed, and with it the charge's request."""
    recorded = order.compile()
    g = Graph(recorded.name, recorded.state_model)

    @g.node(timeout=30)
    def price(s: Any) -> dict[str, Any]:
        return {"amount": s.order_id * 11}

    g.node(after=["price"])(recorded.nodes["charge"].fn)
    return g


def test_replay_form_offers_other_versions_and_its_report_lists_verdicts(seeded: Seeded, client: Client) -> None:
    v2 = seeded.rt.register(order_v2(seeded.graphs["order"]))
    own = seeded.rt.store.get_run(seeded.succeeded).graph_version
    assert v2.version != own
    url = f"/runs/{seeded.succeeded}/replay"
    form = client.get(url)
    assert form.status_code == 200 and f'<option value="{v2.version}">' in form.text
    assert f'<option value="{own}">' not in form.text                  # its own version is the default
    r = client.post(url, data={"_csrf_token": csrf(client, url), "version": v2.version}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].endswith("/report")
    replay_id = r.headers["location"].removeprefix("/runs/").removesuffix("/report")
    replay = wait_for(seeded.rt, replay_id)
    assert replay.kind.value == "replay" and replay.parent_run_id == seeded.succeeded
    report = client.get(f"/runs/{replay_id}/report")
    assert report.status_code == 200 and full(report.text)
    verdicts = dict(re.findall(r'<tr class="verdict-\w+"><td>(\w+)</td><td><strong>(\w+)</strong>', report.text))
    assert verdicts == {"price": "different", "charge": "different"}
    assert "Some nodes diverged." in report.text and f"with graph v{v2.version}" in report.text
    assert "</a> from its start (graph v" in report.text                  # the whole run, not from a checkpoint
    assert "<code>70</code> → <code>77</code>" in report.text           # price's write, recorded → replayed
    assert seeded.world.charges == ["7"]                                  # nothing outside was called
    assert f'href="/runs/{replay_id}/report"' in client.get(f"/runs/{replay_id}").text

    same_url = client.post(url, data={"_csrf_token": csrf(client, url)}, follow_redirects=False).headers["location"]
    wait_for(seeded.rt, same_url.split("/")[2])
    same = client.get(same_url).text
    assert "Every node did what the recording did." in same
    assert set(re.findall(r"<td><strong>(\w+)</strong>", same)) == {"same"}



def test_the_api_replays_with_a_version_named_as_the_form_names_it(seeded: Seeded, client: Client) -> None:
    v2 = seeded.rt.register(order_v2(seeded.graphs["order"]))
    v2.ref = "shop.orders:order_v2"   # as a graph registered by ``harness serve MODULE:GRAPH``
    assert f"shop.orders:order_v2 ({v2.version})" in client.get(f"/runs/{seeded.succeeded}/replay").text
    r = client.post(f"/api/runs/{seeded.succeeded}/replay", json={"version": "shop.orders:order_v2"})
    assert r.status_code == 202, r.text
    assert wait_for(seeded.rt, r.json()["run_id"]).graph_version == v2.version
    unknown = client.post(f"/api/runs/{seeded.succeeded}/replay", json={"version": "shop.orders:order_v3"})
    assert unknown.status_code == 422
    name = seeded.rt.store.get_run(seeded.succeeded).graph_name
    assert f"; versions of graph {name!r} here: " in unknown.json()["error"]
    assert f"shop.orders:order_v2 ({v2.version})" in unknown.json()["error"]


def elsewhere(path: Path, *urls: str, graphs: Sequence[Graph] = ()) -> list[Any]:
    """GET ``urls`` from a server over the store at ``path`` with a Runtime of its own, as
    another process's ``harness serve`` that has only ``graphs``' code."""
    rt = Runtime(store=SqlStore(f"sqlite:///{path}"), graphs=list(graphs))
    try:
        with TestClient(create_app(rt)) as other:
            return [other.get(url) for url in urls]
    finally:
        rt.close()

def test_a_replays_report_opens_where_the_replayed_code_cannot_be_imported(seeded: Seeded) -> None:
    # ``harness replay RUN --graph agent2:graph``, then ``harness serve`` over the same store
    # from a process that has only the recorded graph: the report is recorded data all the same
    v2 = order_v2(seeded.graphs["order"]).compile()
    v2.ref = "agent2_not_importable:graph"
    replay_id = asyncio.run(seeded.rt.replay(seeded.succeeded, graph=v2)).run_id
    page, api = elsewhere(seeded.path, f"/runs/{replay_id}/report", f"/api/runs/{replay_id}/report",
                          graphs=[seeded.graphs["order"]])
    assert page.status_code == 200 and full(page.text), page.text[:2000]
    verdicts = dict(re.findall(r'<tr class="verdict-\w+"><td>(\w+)</td><td><strong>(\w+)</strong>', page.text))
    assert verdicts == {"price": "different", "charge": "different"}
    assert f"with graph v{v2.version}" in page.text and "<code>70</code> → <code>77</code>" in page.text
    assert api.status_code == 200, api.text
    body = api.json()
    assert body["graph_version"] == v2.version and body["same"] is False
    assert [(n["node"], n["verdict"]) for n in body["nodes"]] == [("price", "different"), ("charge", "different")]
    assert seeded.world.charges == ["7"]                                  # nothing outside was called


@pytest.mark.parametrize(("fields", "named"), [
    ({"version": "nope"}, "&#39;nope&#39; is not registered"), ({"mocks": "3"}, "mocks must be a JSON object"),
    ({"mocks": "{"}, "mocks is not valid JSON"), ({"mocks": "[" * 100_000 + "]" * 100_000}, "mocks nests deeper than"),
    ({"mocks": " null "}, "mocks must be a JSON object of {effect name: result}, got null")])
def test_an_invalid_replay_is_422_and_creates_nothing(seeded: Seeded, client: Client, fields: dict[str, str],
                                                      named: str) -> None:
    url = f"/runs/{seeded.succeeded}/replay"
    before = snapshot(seeded.rt)
    r = client.post(url, data={"_csrf_token": csrf(client, url), **fields})
    text = error_page(r, 422)
    assert named in text and '<form class="stacked" method="post"' in text   # the form again, with the error
    assert snapshot(seeded.rt) == before


# ------------------------------------------------------------------ resume, cancel, compensate


def run_page_token(client: Client, run_id: str) -> str:
    return csrf(client, f"/runs/{run_id}")


def test_resuming_a_failed_run_creates_a_continuation(seeded: Seeded, client: Client) -> None:
    token = run_page_token(client, seeded.failed)
    r = client.post(f"/runs/{seeded.failed}/resume", data={"_csrf_token": token}, follow_redirects=False)
    assert r.status_code == 303
    cont_id = r.headers["location"].removeprefix("/runs/")
    cont = wait_for(seeded.rt, cont_id)
    assert cont_id != seeded.failed and cont.parent_run_id == seeded.failed
    assert cont.kind.value == "continuation" and cont.status == RunStatus.FAILED   # `second` still fails
    parent = client.get(f"/runs/{seeded.failed}").text
    assert f'<a href="/runs/{cont_id}">{cont_id}</a> (continuation, failed)' in parent


def test_resuming_a_succeeded_run_is_409_and_creates_nothing(seeded: Seeded, client: Client) -> None:
    token = run_page_token(client, seeded.failed)
    before = snapshot(seeded.rt)
    r = client.post(f"/runs/{seeded.succeeded}/resume", data={"_csrf_token": token}, follow_redirects=False)
    assert "already succeeded" in error_page(r, 409)
    part = client.post(f"/runs/{seeded.succeeded}/resume", headers={"HX-Request": "true", "x-csrftoken": token})
    assert part.status_code == 409 and part.headers["hx-retarget"] == "#flash" and not full(part.text)
    assert "answer its interrupts" in error_page(
        client.post(f"/runs/{seeded.interrupted}/resume", data={"_csrf_token": token}), 409)
    assert error_page(client.post("/runs/run_nope/resume", data={"_csrf_token": token}), 404)
    assert snapshot(seeded.rt) == before


def test_cancelling_an_interrupted_run_ends_it_with_the_reason(seeded: Seeded, client: Client) -> None:
    token = run_page_token(client, seeded.interrupted)
    assert f'action="/runs/{seeded.interrupted}/cancel"' in client.get(f"/runs/{seeded.interrupted}").text
    r = client.post(f"/runs/{seeded.interrupted}/cancel", data={"_csrf_token": token, "reason": "wrong order"},
                    follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/runs/{seeded.interrupted}"
    run = wait_for(seeded.rt, seeded.interrupted, [RunStatus.CANCELLED, RunStatus.FAILED, RunStatus.SUCCEEDED])
    assert run.status == RunStatus.CANCELLED and "wrong order" in str(run.error)
    cancelled = [e for e in seeded.rt.store.events(run.id, 0) if e.type == "run.cancel"]
    assert cancelled and "wrong order" in json.dumps(cancelled[-1].data)
    trace = client.get(f"/runs/{run.id}/panels/events", params={"eq": "wrong order"}).text
    assert [e.seq for e in cancelled] == event_rows(trace)
    assert "nothing to cancel" in error_page(
        client.post(f"/runs/{seeded.interrupted}/cancel", data={"_csrf_token": token}), 409)


def test_cancelling_a_succeeded_run_is_409_and_changes_nothing(seeded: Seeded, client: Client) -> None:
    token = run_page_token(client, seeded.succeeded)
    before = snapshot(seeded.rt)
    r = client.post(f"/runs/{seeded.succeeded}/cancel", data={"_csrf_token": token, "reason": "late"})
    assert "nothing to cancel" in error_page(r, 409)
    too_long = client.post(f"/runs/{seeded.interrupted}/cancel", data={"_csrf_token": token, "reason": "x" * 501})
    assert "500 characters" in error_page(too_long, 422)
    assert snapshot(seeded.rt) == before


def test_compensate_undoes_live_effects_and_says_what_it_did(seeded: Seeded, client: Client) -> None:
    token = run_page_token(client, seeded.succeeded)
    before = snapshot(seeded.rt)
    assert "compensate a run once it has ended" in error_page(
        client.post(f"/runs/{seeded.interrupted}/compensate", data={"_csrf_token": token}), 409)
    assert snapshot(seeded.rt) == before
    r = client.post(f"/runs/{seeded.succeeded}/compensate", data={"_csrf_token": token},
                    headers={"HX-Request": "true"})
    assert r.status_code == 200 and not full(r.text)
    assert f"Compensation of {seeded.succeeded}:" in r.text and "charge · payments.charge#0 — compensated" in r.text
    assert seeded.world.refunds == ["rcpt-7"]
    journal = client.get(f"/runs/{seeded.succeeded}/panels/journal").text
    assert ">COMPENSATED<" in journal
    again = client.post(f"/runs/{seeded.succeeded}/compensate", data={"_csrf_token": token})
    assert again.status_code == 200 and full(again.text) and "— already" in again.text
    assert seeded.world.refunds == ["rcpt-7"]


# ------------------------------------------------------------------ export and import


def test_export_is_a_json_download(shared: Seeded, reader: Client) -> None:
    r = reader.get(f"/runs/{shared.succeeded}/export")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    assert r.headers["content-disposition"] == (f'attachment; filename="thread-{shared.succeeded}.json"; '
                                                f"filename*=UTF-8''thread-{shared.succeeded}.json")
    doc = r.json()
    assert doc["thread_id"] == shared.succeeded
    assert [entry["run"]["id"] for entry in doc["runs"]] == [shared.succeeded]


def renamed(value: Any, old: str, new: str) -> Any:
    """``value`` with every string equal to ``old`` replaced by ``new``."""
    if isinstance(value, dict):
        return {k: renamed(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed(v, old, new) for v in value]
    return new if value == old else value


@pytest.mark.parametrize("run_id", ["run_ok😀", 'run_"quoted"', "run_a b;c"])
def test_export_of_a_run_whose_id_a_header_cannot_carry_names_the_file_safely(
        seeded: Seeded, client: Client, empty_rt: Runtime, run_id: str) -> None:
    """An import keeps any id; the download names its file in ASCII, the id exact in filename*."""
    document = client.get(f"/api/runs/{seeded.failed}/export").json()
    services.complete(empty_rt.import_thread(renamed(document, seeded.failed, run_id)))
    with TestClient(create_app(empty_rt)) as fresh:
        r = fresh.get(f"/runs/{quote(run_id, safe='')}/export")
    assert r.status_code == 200, r.text
    assert r.json()["thread_id"] == run_id
    disposition = r.headers["content-disposition"]
    assert disposition.isascii()
    found = re.fullmatch(r'attachment; filename="([A-Za-z0-9._-]+)"; filename\*=UTF-8\'\'(\S+)', disposition)
    assert found, disposition
    fallback, exact = found.groups()
    assert fallback.startswith("thread-run_") and fallback.endswith(".json")
    assert unquote(exact) == f"thread-{run_id}.json"


def test_import_a_valid_export_into_a_fresh_store(seeded: Seeded, client: Client, empty_rt: Runtime) -> None:
    cp = checkpoint_ids(seeded.rt, seeded.failed)[1]
    url = f"/checkpoints/{cp}/fork"
    fork = client.post(url, data={"_csrf_token": csrf(client, url), "action": "create", "patch": '{"n": 4}'},
                       follow_redirects=False).headers["location"].removeprefix("/runs/")
    wait_for(seeded.rt, fork)
    document = client.get(f"/runs/{seeded.failed}/export").content
    with TestClient(create_app(empty_rt)) as fresh:
        form = fresh.get("/import")
        assert form.status_code == 200 and 'enctype="multipart/form-data"' in form.text
        token = csrf(fresh, "/import")
        r = fresh.post("/import", data={"_csrf_token": token},
                       files={"file": ("thread.json", document, "application/json")})
        assert r.status_code == 201, r.text
        assert "Imported 2 run(s)" in r.text
        assert set(re.findall(r'<a href="/runs/(run_\w+)">', r.text)) == {seeded.failed, fork}
        for run_id in (seeded.failed, fork):
            mine, theirs = empty_rt.store.get_run(run_id), seeded.rt.store.get_run(run_id)
            assert (mine.status, mine.kind, mine.parent_run_id) == (theirs.status, theirs.kind, theirs.parent_run_id)
            assert len(empty_rt.store.events(run_id, 0)) == len(seeded.rt.store.events(run_id, 0))
            assert fresh.get(f"/runs/{run_id}").status_code == 200
        before = snapshot(empty_rt)
        again = fresh.post("/import", data={"_csrf_token": token},
                           files={"file": ("thread.json", document, "application/json")})
        assert "already" in error_page(again, 422)
        assert snapshot(empty_rt) == before
        # its effects happened in the store it came from: mocked here, and nothing offers to undo them
        assert 'name="effects" value="mock" checked' in form.text
        page = fresh.get(f"/runs/{seeded.failed}").text
        assert "<dt>Imported</dt>" in page and "effects mocked" in page
        assert f'action="/runs/{seeded.failed}/compensate"' not in page
        assert f'action="/runs/{seeded.failed}/resume"' in page   # a continuation, mocked too


def test_an_import_form_can_take_the_thread_over_live(seeded: Seeded, client: Client, empty_rt: Runtime) -> None:
    document = client.get(f"/runs/{seeded.succeeded}/export").content   # a charge with a refund as its undo
    with TestClient(create_app(empty_rt)) as fresh:
        token = csrf(fresh, "/import")
        r = fresh.post("/import", data={"_csrf_token": token, "effects": "live"},
                       files={"file": ("thread.json", document, "application/json")})
        assert r.status_code == 201, r.text
        page = fresh.get(f"/runs/{seeded.succeeded}").text
        assert "<dt>Imported</dt>" in page and "effects mocked" not in page
        assert f'action="/runs/{seeded.succeeded}/compensate"' in page


@pytest.mark.parametrize(("body", "named"), [
    (b'{"format": ', "not valid JSON"),
    (b"[]", "JSON object"),
    (b"{}", "format"),
    (b"", "not valid JSON"),
    (b"\xff\xfe{}", "UTF-8"),
    (b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nests deeper"),
    (b'{"a": NaN}', "not accepted"),
])
def test_a_malformed_import_is_422_and_writes_nothing(empty_rt: Runtime, body: bytes, named: str) -> None:
    with TestClient(create_app(empty_rt)) as fresh:
        token = csrf(fresh, "/import")
        r = fresh.post("/import", data={"_csrf_token": token}, files={"file": ("t.json", body, "application/json")})
        text = error_page(r, 422)
        assert named in text and '<p class="error" role="alert">' in text
        assert snapshot(empty_rt) == {}
        missing = fresh.post("/import", data={"_csrf_token": token}, files={"other": ("t.json", b"{}", "text/plain")})
        assert "choose an exported thread" in error_page(missing, 422)
    assert snapshot(empty_rt) == {}


def test_an_import_form_refuses_an_export_whose_checkpoint_lacks_an_instance_it_changed(
        seeded: Seeded, client: Client, empty_rt: Runtime) -> None:
    document = json.loads(client.get(f"/runs/{seeded.looped}/export").content)
    cps = document["runs"][0]["checkpoints"]
    j, instance = next((j, n) for j, cp in enumerate(cps) if j for n in cp["changed"] if "#" in n)
    del cps[j]["node_states"][instance]
    with TestClient(create_app(empty_rt)) as fresh:
        r = fresh.post("/import", data={"_csrf_token": csrf(fresh, "/import")},
                       files={"file": ("t.json", json.dumps(document).encode(), "application/json")})
        assert "changed names node(s)" in error_page(r, 422)
    assert snapshot(empty_rt) == {}


# ------------------------------------------------------------------ thread and diff


def test_diff_page_compares_two_checkpoints(shared: Seeded, reader: Client) -> None:
    ids = checkpoint_ids(shared.rt, shared.succeeded)
    only_a = reader.get("/diff", params={"a": ids[0]})
    assert only_a.status_code == 200 and "<table class=\"diff\">" not in only_a.text
    assert f'<option value="{ids[0]}" selected>' in only_a.text
    r = reader.get("/diff", params={"a": ids[0], "b": ids[-1]})
    assert r.status_code == 200 and full(r.text)
    assert f"2 change(s) from #0 of {shared.succeeded} to #{len(ids) - 1} of {shared.succeeded}" in r.text
    rows = re.findall(r'<tr class="op-(\w+)"><td class="mono">(\w+)</td><td>\w+</td><td><code>(.*?)</code></td>'
                      r'<td><code>(.*?)</code></td></tr>', r.text)
    assert rows == [("changed", "amount", "0", "70"), ("changed", "receipt", "&#34;&#34;", "&#34;rcpt-7&#34;")]
    equal = reader.get("/diff", params={"a": ids[0], "b": ids[0]}).text
    assert "The states are equal." in equal
    assert error_page(reader.get("/diff", params={"a": ids[0], "b": "cp_nope"}), 404)
    assert reader.get("/diff").status_code == 400                      # `a` is required


def test_diff_page_selects_the_checkpoints_compared_in_a_long_thread(seeded: Seeded, client: Client) -> None:
    """The page offers the newest runs' checkpoints; those compared are offered (and selected)
    however old their runs are."""
    first, last = checkpoint_ids(seeded.rt, seeded.failed)[0], checkpoint_ids(seeded.rt, seeded.failed)[-1]

    async def forks() -> None:
        for _ in range(threads.DIFF_RUNS):
            await seeded.rt.fork(last, patch={"n": 1})

    asyncio.run(forks())
    thread = client.get(f"/threads/{seeded.failed}").text
    assert f'href="/diff?a={first}">Compare checkpoints' in thread
    only_a = client.get("/diff", params={"a": first}).text
    assert f'<option value="{first}" selected>' in only_a
    both = client.get("/diff", params={"a": first, "b": last}).text
    assert f'<option value="{first}" selected>' in both and f'<option value="{last}" selected>' in both
    assert both.count(f'<optgroup label="{seeded.failed} (main)">') == 2


def test_thread_page_of_a_lone_run(shared: Seeded, reader: Client) -> None:
    r = reader.get(f"/threads/{shared.looped}")
    assert r.status_code == 200 and full(r.text)
    assert re.findall(r'<a href="/runs/(run_\w+)">', r.text) == [shared.looped]
    assert "patched:" not in r.text


class Talk(BaseModel):
    said: list[str] = []
    say: str = ""


def talk_graph() -> Graph:
    g = Graph("pages_talk", Talk)

    @g.node()
    def hear(s: Talk) -> dict[str, Any]:
        return {"said": [*s.said, s.say]}

    return g


def tree_rows(html: str) -> list[tuple[float, str]]:
    """The thread page's runs in order, each with its indentation in rem."""
    return [(float(depth), rid) for depth, rid in re.findall(
        r'<li style="margin-left: ([\d.]+)rem" class="branch kind-\w+">\s*<span class="kind">[\w ]+</span>\s*'
        r'<a href="/runs/(run_\w+)">', html)]


def test_turns_that_follow_each_other_are_one_line_and_only_a_fork_is_indented(seeded: Seeded,
                                                                                client: Client) -> None:
    graph, rt = talk_graph(), seeded.rt

    async def talk(n: int) -> list[str]:
        return [(await rt.start(graph, {"say": f"t{k}"}, thread_id="chat")).id for k in range(n)]

    turns = asyncio.run(talk(30))
    rows = tree_rows(client.get("/threads/chat").text)
    assert rows == [(0.0, t) for t in turns]   # one level, not a 30-step staircase

    # a fork of turn 5 is a branch right under it; the next turn goes on from the fork, on its line
    cp = rt.store.checkpoints(turns[4])[-1]
    fork = asyncio.run(rt.fork(cp.id, patch={"say": "other"})).id
    [after] = asyncio.run(talk(1))
    page = client.get("/threads/chat").text
    rows = tree_rows(page)
    assert rows == [(0.0, t) for t in turns[:5]] + [(1.6, fork), (1.6, after)] + [(0.0, t) for t in turns[5:]]
    assert f"from #{cp.seq} of {turns[4]}" in page
    assert [b["depth"] for b in client.get("/api/threads/chat").json()["runs"]] == [d / 1.6 for d, _ in rows]


class Quiet(BaseModel):
    """``talk_graph``'s state in a later version: ``say`` was removed."""

    said: list[str] = []


def test_a_turn_that_left_a_field_behind_says_so_in_the_thread(seeded: Seeded, client: Client) -> None:
    g = Graph("pages_talk", Quiet)
    g.add_node("hush", lambda s: None)
    asyncio.run(seeded.rt.start(talk_graph(), {"say": "hi"}, thread_id="versions"))
    turn = asyncio.run(seeded.rt.start(g, {}, thread_id="versions"))
    page = client.get("/threads/versions").text
    assert page.count("left behind:") == 1 and "left behind: <code>say</code>" in page
    assert turn.id in page


# ------------------------------------------------------------------ the token rule


def test_pages_off_loopback_need_the_token_which_a_query_sets_once(seeded: Seeded) -> None:
    with TestClient(create_app(seeded.rt, host="0.0.0.0", token="alice:s3cret")) as c:
        assert c.get("/runs").status_code == 401
        assert c.get(f"/runs/{seeded.failed}").status_code == 401
        assert c.get("/runs", params={"token": "wrong"}).status_code == 401
        assert c.get("/runs", params={"token": "alice:s3cret"}).status_code == 401   # the secret, not the name
        assert not c.cookies.get("harness_token")
        first = c.get("/runs", params={"token": "s3cret"})
        assert first.status_code == 200 and seeded.failed in first.text
        assert "harness_token=s3cret" in first.headers["set-cookie"]
        assert "HttpOnly" in first.headers["set-cookie"]
        second = c.get(f"/runs/{seeded.failed}")
        assert second.status_code == 200 and "n must be at least 1" in second.text
        c.cookies.clear()
        assert c.get("/runs").status_code == 401
        assert c.get("/runs", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_a_page_opened_with_the_token_drops_it_from_the_address(seeded: Seeded) -> None:
    html = {"Accept": "text/html,application/xhtml+xml"}
    with TestClient(create_app(seeded.rt, host="0.0.0.0", token="alice:s3cret")) as c:
        first = c.get("/runs", params={"status": "failed", "token": "s3cret"}, headers=html, follow_redirects=False)
        # a page of its own that moves on (an HTTP redirect would lose the new SameSite=Strict
        # cookie in a browser that came from a link on another site)
        assert first.status_code == 200 and "harness_token=s3cret" in first.headers["set-cookie"]
        assert '<meta http-equiv="refresh" content="0; url=/runs?status=failed">' in first.text
        assert "s3cret" not in first.text and first.headers["cache-control"] == "no-store"
        page = c.get("/runs?status=failed", headers=html)
        assert page.status_code == 200 and seeded.failed in page.text
        c.cookies.clear()
        # a program asking for JSON is answered at once, as before
        api = c.get("/api/runs", params={"token": "s3cret"}, follow_redirects=False)
        assert api.status_code == 200 and "harness_token=s3cret" in api.headers["set-cookie"]
        c.cookies.clear()
        assert c.get("/runs", params={"token": "wrong"}, headers=html).status_code == 401


def test_the_step_after_the_token_stays_on_this_site() -> None:
    """A path that reads as another host (``//host/...``) is not where the next step leads,
    and what the address holds is escaped in the page that takes it."""
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the redirect answers by itself")

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "//elsewhere.example/runs",
             "raw_path": b"//elsewhere.example/runs", "query_string": b"token=s3cret&page=2&q=%22a%22",
             "headers": [(b"accept", b"text/html")]}
    asyncio.run(TokenMiddleware(app, token="s3cret", host="0.0.0.0")(scope, None, send))
    assert sent[0]["status"] == 200
    assert b'url=/elsewhere.example/runs?page=2&amp;q=%22a%22"' in sent[1]["body"]


def test_the_effect_journal_panel_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Count(BaseModel):
        n: int = 0

    g = Graph("many_effects", state=Count)

    @g.node()
    async def call(s: Count, ctx: NodeContext) -> dict[str, Any]:
        for i in range(3):
            await ctx.effect(f"svc.call{i}", lambda: i)
        return {"n": 3}

    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'j.db'}"))
    try:
        run = asyncio.run(rt.start(g, {}))
        monkeypatch.setattr(services, "ROWS_PER_PAGE", 2)
        with TestClient(create_app(rt)) as c:
            url = f"/runs/{run.id}/panels/journal"
            first = c.get(url, headers={"HX-Request": "true"}).text
            second = c.get(url, params={"page": 2}, headers={"HX-Request": "true"}).text
        assert re.findall(r"svc\.call(\d)#0", first) == ["0", "1"] and "later →" in first
        assert re.findall(r"svc\.call(\d)#0", second) == ["2"] and "← earlier" in second and "later →" not in second
    finally:
        rt.close()


def test_a_continuations_journal_leads_to_the_record_it_was_served_from(tmp_path: Path) -> None:
    class Paid(BaseModel):
        receipt: str = ""

    g = Graph("pay_then_fail", state=Paid)
    charges: list[int] = []
    failing = [True]

    @g.node(retry=RetryPolicy(max_attempts=1))
    async def pay(s: Paid, ctx: NodeContext) -> dict[str, Any]:
        receipt = await ctx.effect("card.charge", lambda: charges.append(1) or "r-1")
        if failing.pop() if failing else False:
            raise RuntimeError("lost the answer")
        return {"receipt": receipt}

    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'c.db'}"))
    try:
        first = asyncio.run(rt.start(g, {}))
        assert first.status == RunStatus.FAILED
        cont = asyncio.run(rt.resume(first.id))
        assert cont.status == RunStatus.SUCCEEDED and charges == [1]   # served from the first run's record
        with TestClient(create_app(rt)) as c:
            own = c.get(f"/runs/{cont.id}/panels/journal", headers={"HX-Request": "true"}).text
            parent = c.get(f"/runs/{first.id}/panels/journal", headers={"HX-Request": "true"}).text
        assert "No effects." in own and 'id="journal-inherited"' in own
        assert f'href="/runs/{first.id}/panels/journal"' in own
        assert "card.charge#0" in parent and 'id="journal-inherited"' not in parent
    finally:
        rt.close()


def test_the_timeline_says_how_many_checkpoints_lie_outside_its_window(
        shared: Seeded, reader: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    total = len(shared.rt.store.checkpoints(shared.looped))
    assert total >= 5
    monkeypatch.setattr(services, "TIMELINE_WINDOW", 3)
    page = reader.get(f"/runs/{shared.looped}", params={"cp": 2}).text
    shown = [int(n) for n in re.findall(r'class="cp-link[^"]*" href="[^"]*" [^>]*data-seq="(\d+)"', page)]
    assert shown == [1, 2, 3]
    assert "#0 … 1 earlier" in page and f"{total - 4} later … #{total - 1}" in page
    whole = reader.get(f"/runs/{shared.looped}", params={"cp": 0}).text
    assert "earlier</a>" not in whole


def test_a_trace_search_reads_chunks_and_pages_every_match_once(shared: Seeded,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services, "SEARCH_CHUNK", 3)
    every = shared.rt.store.events(shared.looped)
    wanted = [e.seq for e in every if "node" in e.type.lower() or "node" in (e.node or "").lower()
              or "node" in str(e.data).lower()]
    assert len(wanted) > 4 and len(every) > 2 * 3
    reads: list[tuple[int, int | None]] = []
    store_events = shared.rt.store.events

    def counted(run_id: str, after_seq: int = 0, limit: int | None = None) -> Any:
        reads.append((after_seq, limit))
        return store_events(run_id, after_seq, limit)

    monkeypatch.setattr(shared.rt.store, "events", counted)
    seqs: list[int] = []
    for page in range(1, 10):
        shown, more = services.events_window(shared.rt, shared.looped, page, "NODE", per_page=2)
        seqs += [e.seq for e in shown]
        if not more:
            break
    assert seqs == wanted
    assert all(limit == 3 for _, limit in reads)
    reads.clear()
    services.events_window(shared.rt, shared.looped, 1, "node", per_page=2)
    assert len(reads) < -(-len(every) // 3)   # the first page stops before the end of the trace



def test_the_trace_search_finds_data_as_the_trace_shows_it(shared: Seeded, reader: Client) -> None:
    # text copied from the trace's data column (JSON, double quotes) finds its event
    event = next(e for e in shared.rt.store.events(shared.looped) if len(e.data) >= 2)
    first = next(iter(event.data))
    query = f'"{first}": {json.dumps(event.data[first], ensure_ascii=False)}'
    shown, _ = services.events_window(shared.rt, shared.looped, 1, query, per_page=500)
    assert event.seq in [e.seq for e in shown]
    page = reader.get(f"/runs/{shared.looped}/panels/events", params={"cp": 0, "eq": query}).text
    assert f'id="ev-{event.seq}"' in page

def test_what_runs_next_is_unknown_not_nothing_where_the_code_is_not_loaded(seeded: Seeded) -> None:
    # ``harness serve`` over a store from a process that has none of its graphs' code
    first = asyncio.run(seeded.rt.history(seeded.looped))[1]
    assert asyncio.run(seeded.rt.checkpoint(first.id)).ready   # with the code: what runs next
    page, api = elsewhere(seeded.path, f"/runs/{seeded.looped}?cp={first.seq}", f"/api/checkpoints/{first.id}")
    assert page.status_code == 200 and full(page.text)
    assert "ready next: unknown (the graph's code is not loaded in this server)" in page.text
    assert api.status_code == 200 and api.json()["ready"] is None


def test_a_running_runs_page_shows_the_node_that_started_as_running_not_pending(seeded: Seeded,
                                                                               client: Client) -> None:
    start = checkpoint_ids(seeded.rt, seeded.succeeded)[0]
    held = client.post(f"/api/checkpoints/{start}/fork", json={"patch": {"hold": True}}).json()["run_id"]
    wait_for(seeded.rt, held, [RunStatus.RUNNING])
    deadline = time.monotonic() + 10
    while not any(e.node == "charge" for e in seeded.rt.store.events(held)):   # price done, charge started
        assert time.monotonic() < deadline, "the held run never started charge"
        time.sleep(0.01)
    head = seeded.rt.store.get_run(held).head_seq
    # the checkpoint was taken when price settled: it has charge pending; its trace has charge started
    assert seeded.rt.store.find_checkpoint(held, head).node_states["charge"] == NodeStatus.PENDING

    def row(html: str, node: str) -> str:
        found = re.search(rf'>{node}</a></td>\s*<td>(.*?)</td>', html, re.S)
        assert found, f"no row for {node}"
        return found.group(1)

    page = client.get(f"/runs/{held}").text
    assert "st-running" in row(page, "charge") and "st-pending" not in row(page, "charge")
    assert "st-succeeded" in row(page, "price")
    # an earlier checkpoint shows what it recorded, not what happened after it
    assert "st-pending" in row(client.get(f"/runs/{held}?cp=0").text, "charge")
    assert client.post(f"/api/runs/{held}/cancel", json={"reason": "enough"}).status_code == 202
    wait_for(seeded.rt, held, [RunStatus.CANCELLED])
    assert "st-cancelled" in row(client.get(f"/runs/{held}").text, "charge")



class Wide(BaseModel):
    x: int = 0


def _noop(state: Wide) -> None:
    return None

def test_more_nodes_swaps_into_a_panel_body_which_its_pager_targets(tmp_path) -> None:
    # a graph of 210 nodes: the run page lists 60; "… more nodes" swaps the nodes panel in
    # its place, and that panel's pager swaps "closest .panel-body": it must have one there
    g = Graph("wide", state=Wide)
    for i in range(210):
        g.add_node(f"n{i:03d}", _noop)
    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'wide.db'}"), max_concurrency=8)
    try:
        run = asyncio.run(rt.start(g, {}))
        with TestClient(create_app(rt)) as c:
            page = c.get(f"/runs/{run.id}").text
            more = re.search(r'<div class="panel-body">\s*<table class="nodes">.*?<a href="([^"]+)" hx-get="\1" '
                             r'hx-target="closest \.panel-body">… 150 more nodes</a>', page, re.S)
            assert more, "the nodes table is not in a .panel-body its more-nodes link swaps"
            part = c.get(more.group(1).replace("&amp;", "&"), headers=HTMX).text
    finally:
        rt.close()
    assert '<table class="nodes">' in part and not full(part)
    later = re.search(r'<a href="([^"]+)" hx-get="\1" hx-target="closest \.panel-body">later →</a>', part)
    assert later and "page=2" in later.group(1)


def test_a_run_already_continued_offers_its_continuation_instead_of_resume(seeded: Seeded, client: Client) -> None:
    token = run_page_token(client, seeded.failed)
    assert f'action="/runs/{seeded.failed}/resume"' in client.get(f"/runs/{seeded.failed}").text
    r = client.post(f"/runs/{seeded.failed}/resume", data={"_csrf_token": token}, follow_redirects=False)
    cont_id = r.headers["location"].removeprefix("/runs/")
    cont = wait_for(seeded.rt, cont_id)
    parent = client.get(f"/runs/{seeded.failed}").text
    actions = parent[parent.index('id="run-actions"'):parent.index("</div>", parent.index('id="run-actions"'))]
    assert f'action="/runs/{seeded.failed}/resume"' not in actions   # it would only be refused
    assert f'<a class="button" href="/runs/{cont_id}">Continued by {cont_id} (failed)</a>' in actions
    assert f'action="/runs/{cont_id}/resume"' in client.get(f"/runs/{cont_id}").text   # the line goes on there
    assert cont.status == RunStatus.FAILED


def test_the_cancel_form_of_a_paused_run_works_on_a_server_without_its_graph(
        seeded: Seeded, make_app: Any) -> None:
    rt = Runtime(store=SqlStore(f"sqlite:///{seeded.path}"))   # no graphs registered
    try:
        with TestClient(make_app(rt)) as c:
            url = f"/runs/{seeded.interrupted}"
            r = c.post(f"{url}/cancel", data={"_csrf_token": csrf(c, url), "reason": "no longer needed"},
                       follow_redirects=False)
            assert r.status_code == 303 and r.headers["location"] == url
            run = wait_for(rt, seeded.interrupted, [RunStatus.CANCELLED])
            assert run.error == {"class": "cancelled", "message": "no longer needed"}
            assert 'st-cancelled">cancelled</span>' in c.get(url).text
    finally:
        rt.close()


def test_the_cancel_form_of_a_run_left_mid_step_on_a_server_without_its_graph_says_why_it_cannot(
        seeded: Seeded, client: Client, make_app: Any) -> None:
    start = checkpoint_ids(seeded.rt, seeded.succeeded)[0]
    held = client.post(f"/api/checkpoints/{start}/fork", json={"patch": {"hold": True}}).json()["run_id"]
    wait_for(seeded.rt, held, [RunStatus.RUNNING])
    rt = Runtime(store=SqlStore(f"sqlite:///{seeded.path}"), clock=AnHourLater())   # no graphs registered
    try:
        with TestClient(make_app(rt)) as c:
            url = f"/runs/{held}"
            r = c.post(f"{url}/cancel", data={"_csrf_token": csrf(c, url), "reason": "no longer needed"})
            assert r.status_code == 404 and "api_order" in r.text and "not registered" in r.text
            assert "harness serve --graph MODULE:GRAPH" in r.text
            assert rt.store.get_run(held).status == RunStatus.RUNNING
    finally:
        rt.close()
    assert client.post(f"/api/runs/{held}/cancel", json={}).status_code == 202
    wait_for(seeded.rt, held, [RunStatus.CANCELLED])


def test_pages_are_not_kept_by_the_browser_but_assets_and_the_api_answer_as_before(
        seeded: Seeded, client: Client) -> None:
    """Back must show a run or a question as it is now (an answered question with no form)."""
    for url in ("/runs", f"/runs/{seeded.interrupted}", "/inbox"):
        assert client.get(url).headers["cache-control"] == "no-store", url
    assert "cache-control" not in client.get("/static/app.js").headers
    assert "cache-control" not in client.get("/api/runs").headers


def test_the_drawer_at_a_checkpoint_says_what_happened_only_after_it(seeded: Seeded, client: Client) -> None:
    """A node running at the checkpoint shows as running there; how its attempt ended, and
    what it wrote, are marked as after the checkpoint, not shown as if already so."""
    class Two(BaseModel):
        fast: int = 0
        slow: int = 0

    g = Graph("fast_and_slow", Two)

    @g.node()
    async def quick(s: Two) -> dict[str, Any]:
        return {"fast": 1}

    @g.node()
    async def lengthy(s: Two) -> dict[str, Any]:
        await asyncio.sleep(0.3)
        return {"slow": 2}

    run = asyncio.run(seeded.rt.start(g, {}))
    assert run.status == RunStatus.SUCCEEDED
    [early] = [cp for cp in asyncio.run(seeded.rt.history(run.id)) if cp.nodes == ("quick",)]
    assert early.node_states["lengthy"] == NodeStatus.RUNNING
    page = client.get(f"/runs/{run.id}", params={"cp": early.seq, "node": "lengthy"}).text
    drawer = page[page.index('id="drawer"'):page.index("</section>", page.index('id="drawer"'))]
    assert re.search(r'attempt 1: <span class="badge st-running">running</span> here, then '
                     r'<span class="muted">after this checkpoint:</span> <span class="badge st-succeeded">', drawer)
    assert "written after this checkpoint" in drawer
    last = client.get(f"/runs/{run.id}", params={"node": "lengthy"}).text
    drawer = last[last.index('id="drawer"'):last.index("</section>", last.index('id="drawer"'))]
    assert "after this checkpoint" not in drawer and 'attempt 1: <span class="badge st-succeeded">' in drawer


def test_pages_say_their_charset_once(shared: Seeded, reader: Client) -> None:
    for path in ("/runs", f"/runs/{shared.succeeded}", "/runs/no-such-run"):
        r = reader.get(path)
        assert r.headers["content-type"] == "text/html; charset=utf-8", (path, r.headers["content-type"])
