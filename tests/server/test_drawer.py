"""The node drawer while stepping through the timeline: it stays on the node (or the one
instance) it shows, says when that instance does not exist yet at the checkpoint stepped
to, and follows it again where it exists."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from local_client import TestClient

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
