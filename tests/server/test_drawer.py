"""The node drawer while stepping through the timeline: it stays on the node (or the one
instance) it shows, says when that instance does not exist yet at the checkpoint stepped
to, and follows it again where it exists."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import pytest
from conftest import app_over
from local_client import TestClient
from pydantic import BaseModel

from runtime import Graph, NodeContext, Runtime, RunStatus, SqlStore, append

if TYPE_CHECKING:
    from conftest import Seeded

Client = TestClient[Any]
HTMX = {"HX-Request": "true", "HX-Target": "main"}


def drawer(html: str) -> str:
    start = html.index('id="drawer"')
    return html[start:html.index("</section>", start)]


def timeline_links(html: str) -> list[str]:
    return re.findall(r'<a class="cp-link[^"]*" href="([^"]+)"', html)


def test_the_timeline_keeps_the_drawer_on_its_node(shared: Seeded, reader: Client) -> None:
    html = reader.get(f"/runs/{shared.looped}?cp=0&node=model%231", headers=HTMX).text
    links = timeline_links(html)
    assert links and all(link.endswith("&amp;node=model%231") for link in links), links
    close = re.search(r'<a class="close" href="([^"]+)"', html)
    assert close and close.group(1) == f"/runs/{shared.looped}?cp=0"   # closing drops the node


def test_an_instance_not_there_yet_keeps_the_drawer_open_and_says_so(shared: Seeded, reader: Client) -> None:
    r = reader.get(f"/runs/{shared.looped}?cp=0&node=model%231", headers=HTMX)
    assert r.status_code == 200
    shown = drawer(r.text)
    assert "Node model#1" in shown
    assert "model#1 does not exist yet at checkpoint #0" in shown
    assert '<details class="instance"' not in shown
    # at the last checkpoint it exists: the drawer shows it, with its attempt
    head = reader.get(f"/runs/{shared.looped}?node=model%231", headers=HTMX).text
    assert re.findall(r'<details class="instance" open><summary>([^ <]+) ', drawer(head)) == ["model#1"]
    assert "does not exist yet" not in drawer(head)


def test_a_map_item_not_there_yet_keeps_the_drawer_open(shared: Seeded, reader: Client) -> None:
    r = reader.get(f"/runs/{shared.mapped}?cp=1&node=work%5B0%5D", headers=HTMX)
    assert r.status_code == 200
    assert "work[0] does not exist yet at checkpoint #1" in drawer(r.text)


def test_an_instance_the_run_never_has_is_still_not_found(shared: Seeded, reader: Client) -> None:
    r = reader.get(f"/runs/{shared.looped}?cp=0&node=model%239")
    assert r.status_code == 404
    assert f"run {shared.looped} has no node &#39;model#9&#39; at checkpoint #0" in r.text


def test_a_page_that_picked_no_checkpoint_opens_and_closes_the_drawer_without_picking_one(
        shared: Seeded, reader: Client) -> None:
    """It follows the head of a run going on: a node opened there must go on following it."""
    looped = shared.looped
    head = reader.get(f"/runs/{looped}", headers=HTMX).text
    assert f'href="/runs/{looped}?node=model"' in head and "&amp;node=" not in head
    opened = reader.get(f"/runs/{looped}?node=model", headers=HTMX).text
    close = re.search(r'<a class="close" href="([^"]+)"', opened)
    assert close and close.group(1) == f"/runs/{looped}"
    # a checkpoint picked stays picked
    picked = reader.get(f"/runs/{looped}?cp=1&node=model", headers=HTMX).text
    assert f'href="/runs/{looped}?cp=1&amp;node=prep"' in picked
    close = re.search(r'<a class="close" href="([^"]+)"', picked)
    assert close and close.group(1) == f"/runs/{looped}?cp=1"


def test_each_instance_in_the_drawer_opens_alone(shared: Seeded, reader: Client) -> None:
    html = drawer(reader.get(f"/runs/{shared.looped}?cp=5&node=model", headers=HTMX).text)
    assert f'<a class="small" href="/runs/{shared.looped}?cp=5&amp;node=model%231"' in html
    alone = drawer(reader.get(f"/runs/{shared.looped}?cp=5&node=model%231", headers=HTMX).text)
    assert "follow this one" not in alone   # it is the one shown


# ------------------------------------------------------------------ filtering by status

class Votes(BaseModel):
    items: list[int] = []
    kept: Annotated[list[int], append] = []


def votes_graph() -> Graph:
    """A map whose even items ask a question and whose odd items keep themselves."""
    g = Graph("drawer_votes", state=Votes)

    @g.node(map_over="items")
    async def vote(s: Votes, ctx: NodeContext, item: int) -> dict[str, Any]:
        if item % 2 == 0:
            await ctx.interrupt({"question": f"keep {item}?"})
        return {"kept": [item]}

    return g


@dataclass
class Asked:
    client: Client
    run: str   # 6 items asked, 6 succeeded, the map's own record running: all at its head
    head: int  # the head checkpoint's seq


@pytest.fixture(scope="module")
def asked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Asked]:
    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path_factory.mktemp('votes') / 'h.db'}"), max_concurrency=4)
    run = asyncio.run(rt.start(votes_graph(), {"items": list(range(12))}))
    assert run.status == RunStatus.INTERRUPTED
    with TestClient(app_over(rt)) as c:
        yield Asked(c, run.id, rt.store.checkpoints(run.id)[-1].seq)
    rt.close()


def instance_names(html: str) -> list[str]:
    return re.findall(r'<details class="instance" open><summary>([^ <]+) ', drawer(html))


def chips(html: str) -> dict[str, str]:
    """The drawer's status filter: each choice's words by its link."""
    nav = re.search(r'<nav class="chips".*?</nav>', drawer(html), re.S)
    assert nav, "no status filter in the drawer"
    return {href: words for href, words in re.findall(r'<a class="chip[^"]*" href="([^"]+)" hx-get="\1"[^>]*>([^<]*)</a>',
                                                      nav.group(0))}


def test_the_drawer_offers_the_statuses_its_items_are_in(asked: Asked) -> None:
    """A map's own record (running until its items end) is no item: the choices count items."""
    base = f"/runs/{asked.run}?node=vote"
    assert chips(asked.client.get(base, headers=HTMX).text) == {
        base: "all 12", f"{base}&amp;status=interrupted": "interrupted 6", f"{base}&amp;status=succeeded": "succeeded 6"}


def map_itself(html: str) -> str:
    """What the drawer says of the map itself, without its markup."""
    said = re.search(r'<p class="map-itself">(.*?)</p>', drawer(html), re.S)
    assert said, "the drawer says nothing of the map itself"
    return " ".join(re.sub(r"<[^>]+>", "", said.group(1)).split())


def test_the_drawer_says_apart_what_the_map_itself_is_doing(asked: Asked) -> None:
    html = asked.client.get(f"/runs/{asked.run}?node=vote", headers=HTMX).text
    assert map_itself(html) == "The map itself: running"
    assert "vote" not in instance_names(html)


def test_a_wide_map_counts_and_lists_its_items_only(seeded: Seeded, client: Client) -> None:
    run = asyncio.run(seeded.rt.start(seeded.graphs["map"], {"count": 300}))
    html = client.get(f"/runs/{run.id}?node=work", headers=HTMX).text
    base = f"/runs/{run.id}?node=work"
    assert chips(html) == {base: "all 300", f"{base}&amp;status=succeeded": "succeeded 300"}
    assert instance_names(html)[:2] == ["work[0]", "work[1]"]
    assert map_itself(html) == "The map itself: succeeded"
    # the counts beside the graph speak of the same items
    assert re.search(r"<strong>work</strong>: 300 items \(300 succeeded\)", html)


def test_a_map_before_its_items_are_made_says_so(shared: Seeded, reader: Client) -> None:
    html = reader.get(f"/runs/{shared.mapped}?cp=1&node=work", headers=HTMX).text
    assert map_itself(html) == "The map itself: pending"
    assert instance_names(html) == [] and "This map has no items at this checkpoint." in drawer(html)


def test_a_status_shows_only_the_instances_in_it_with_and_without_htmx(asked: Asked) -> None:
    url = f"/runs/{asked.run}?cp={asked.head}&node=vote"
    assert len(instance_names(asked.client.get(url, headers=HTMX).text)) == 12
    for headers in (HTMX, {}):   # a plain GET (no JavaScript) filters the same
        waiting = asked.client.get(url + "&status=interrupted", headers=headers).text
        assert instance_names(waiting) == [f"vote[{i}]" for i in range(0, 12, 2)]
        done = asked.client.get(url + "&status=succeeded", headers=headers).text
        assert instance_names(done) == [f"vote[{i}]" for i in range(1, 12, 2)]
    # the chosen one is marked, and stepping the timeline keeps the filter while the drawer stays open
    assert re.search(r'class="chip st-succeeded selected"[^>]*aria-current="true"', done)
    assert all(link.endswith("&amp;node=vote&amp;status=succeeded") for link in timeline_links(done))
    close = re.search(r'<a class="close" href="([^"]+)"', done)
    assert close and close.group(1) == f"/runs/{asked.run}?cp={asked.head}"


def test_a_status_no_instance_is_in_says_so(asked: Asked) -> None:
    html = asked.client.get(f"/runs/{asked.run}?node=vote&status=failed", headers=HTMX).text
    assert instance_names(html) == []
    assert "No item of this map has the status failed at this checkpoint." in drawer(html)
    assert chips(html)[f"/runs/{asked.run}?node=vote&amp;status=failed"] == "failed 0"


def test_a_page_past_the_last_says_so_and_leads_back(asked: Asked) -> None:
    html = asked.client.get(f"/runs/{asked.run}?node=vote&status=interrupted&page=99", headers=HTMX).text
    assert instance_names(html) == []
    assert "This page is past the last one" in drawer(html)
    assert re.search(rf'<a href="/runs/{asked.run}\?node=vote&amp;status=interrupted"[^>]*>back to the first page</a>',
                     drawer(html))


def test_an_unknown_status_is_refused(asked: Asked) -> None:
    r = asked.client.get(f"/runs/{asked.run}?node=vote&status=bogus")
    assert r.status_code == 422 and "unknown status &#39;bogus&#39;" in r.text


def test_paging_a_filtered_drawer_keeps_the_filter(seeded: Seeded, client: Client) -> None:
    run = asyncio.run(seeded.rt.start(seeded.graphs["map"], {"count": 120}))
    first = client.get(f"/runs/{run.id}?node=work&status=succeeded", headers=HTMX).text
    later = re.search(r'<a href="([^"]+)"[^>]*>later items', first)
    assert later and later.group(1) == f"/runs/{run.id}?node=work&amp;status=succeeded&amp;page=2"
    second = client.get(later.group(1).replace("&amp;", "&"), headers=HTMX).text
    earlier = re.search(r'<a href="([^"]+)"[^>]*>← earlier items', second)
    assert earlier and earlier.group(1) == f"/runs/{run.id}?node=work&amp;status=succeeded"


def test_a_node_with_one_instance_has_no_filter(shared: Seeded, reader: Client) -> None:
    html = reader.get(f"/runs/{shared.failed}?node=second", headers=HTMX).text
    assert 'class="chips"' not in drawer(html)


# ------------------------------------------------------------------ a map inside a loop

class Reading(BaseModel):
    turns: int = 0
    sources: list[int] = []
    notes: Annotated[list[str], append] = []


def reading_graph() -> Graph:
    """A loop of two turns whose map reads 2, then 3 sources: two records of the map itself."""
    g = Graph("drawer_reading", state=Reading)

    @g.node(after=["check"], max_iterations=5)
    def model(s: Reading) -> dict[str, Any]:
        return {"turns": s.turns + 1, "sources": list(range(s.turns + 2))}

    @g.node(after=["model"], map_over="sources")
    def read(s: Reading, item: int) -> dict[str, Any]:
        return {"notes": [f"read {item}"]}

    @g.node(after=["read"], when=lambda s: s.turns < 2)
    def check(s: Reading) -> dict[str, Any]:
        return {}

    return g


@pytest.fixture(scope="module")
def reading(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Client, str]]:
    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path_factory.mktemp('reading') / 'h.db'}"), max_concurrency=4)
    run = asyncio.run(rt.start(reading_graph(), {}))
    assert run.status == RunStatus.SUCCEEDED, run.error
    with TestClient(app_over(rt)) as c:
        yield c, run.id
    rt.close()


def test_a_map_in_a_loop_counts_the_items_of_every_iteration_and_says_each_record_apart(
        reading: tuple[Client, str]) -> None:
    client, run_id = reading
    html = client.get(f"/runs/{run_id}?node=read", headers=HTMX).text
    assert instance_names(html) == ["read[0]", "read[1]", "read#1[0]", "read#1[1]", "read#1[2]"]
    assert chips(html)[f"/runs/{run_id}?node=read"] == "all 5"
    assert map_itself(html) == "The map itself, per iteration: read succeeded · read#1 succeeded"


def test_one_record_of_a_map_opened_alone_is_named_as_the_map_itself(reading: tuple[Client, str]) -> None:
    client, run_id = reading
    html = drawer(client.get(f"/runs/{run_id}?node=read%231", headers=HTMX).text)
    assert re.search(r'<summary>read#1 <span class="muted">\(the map itself\)</span> <span class="badge', html)
