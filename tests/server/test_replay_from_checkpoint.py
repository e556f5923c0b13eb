"""Replaying from the debugger: the version list names each version by the reference it
was registered with and says which is the run's own; a checkpoint can be replayed from
(the run page's checkpoint panel and its action bar), landing on the replay's report."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from local_client import TestClient
from waiting import wait_for

from test_pages import HTMX, csrf, full, order_v2

if TYPE_CHECKING:
    from conftest import Seeded

Client = TestClient[Any]


def options(html: str) -> list[tuple[str, str]]:
    """The version select's (value, text) pairs."""
    select = re.search(r'<select id="version" name="version">(.*?)</select>', html, re.S)
    assert select, html[:2000]
    return re.findall(r'<option value="([^"]*)">([^<]*)</option>', select.group(1))


def test_the_version_list_names_each_version_by_its_reference_and_marks_the_runs_own(
        seeded: Seeded, client: Client) -> None:
    own = seeded.rt.store.get_run(seeded.succeeded).graph_version
    registered = seeded.rt.graphs.registered(own)
    assert registered is not None
    registered.ref = "shop.orders:graph"   # as `harness serve shop.orders:graph` registers it
    v2 = order_v2(seeded.graphs["order"]).compile()
    v2.ref = "shop.orders_v2:graph"
    seeded.rt.register(v2)
    assert options(client.get(f"/runs/{seeded.succeeded}/replay").text) == [
        ("", f"shop.orders:graph ({own}) · this run's own version"),
        (v2.version, f"shop.orders_v2:graph ({v2.version})")]


def test_a_version_registered_without_a_reference_is_named_by_its_hash(seeded: Seeded, client: Client) -> None:
    v2 = seeded.rt.register(order_v2(seeded.graphs["order"]))
    own = seeded.rt.store.get_run(seeded.succeeded).graph_version
    assert options(client.get(f"/runs/{seeded.succeeded}/replay").text) == [
        ("", f"{own} · this run's own version"), (v2.version, v2.version)]


def test_the_checkpoint_panel_and_the_action_bar_offer_to_replay_from_the_selected_checkpoint(
        seeded: Seeded, client: Client) -> None:
    cps = seeded.rt.store.checkpoints(seeded.succeeded)
    chosen = next(c for c in cps if "price" in c.nodes)
    page = client.get(f"/runs/{seeded.succeeded}?cp={chosen.seq}").text
    link = f'href="/checkpoints/{chosen.id}/replay"'
    assert f'{link}>Replay from here…</a>' in page                         # beside "Fork from here…"
    assert f'<a class="button" {link}>Replay from #{chosen.seq}…</a>' in page
    # stepping swaps the action bar in with the rest: its link follows the checkpoint shown
    other = cps[-1]
    step = client.get(f"/runs/{seeded.succeeded}?cp={other.seq}", headers=HTMX).text
    assert f'<a class="button" href="/checkpoints/{other.id}/replay">Replay from #{other.seq}…</a>' in step


def test_replaying_from_a_checkpoint_keeps_what_it_folded_and_lands_on_the_report(
        seeded: Seeded, client: Client) -> None:
    chosen = next(c for c in seeded.rt.store.checkpoints(seeded.succeeded) if "price" in c.nodes)
    url = f"/checkpoints/{chosen.id}/replay"
    form = client.get(url)
    assert form.status_code == 200 and full(form.text)
    assert f'action="{url}"' in form.text and f"checkpoint #{chosen.seq}</a>" in form.text
    r = client.post(url, data={"_csrf_token": csrf(client, url)}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].endswith("/report"), r.text
    replay_id = r.headers["location"].removeprefix("/runs/").removesuffix("/report")
    replay = wait_for(seeded.rt, replay_id)
    assert replay.kind.value == "replay" and replay.parent_run_id == seeded.succeeded
    assert replay.base_checkpoint_id == chosen.id
    assert replay.options["source"] == {"run_id": seeded.succeeded, "checkpoint_id": chosen.id}
    report = client.get(r.headers["location"])
    assert report.status_code == 200 and "Every node did what the recording did." in report.text
    assert f'from <a href="/runs/{seeded.succeeded}?cp={chosen.seq}">checkpoint #{chosen.seq}</a> on' in report.text
    assert seeded.world.charges == ["7"]                                  # nothing outside was called


def test_a_refused_replay_from_a_checkpoint_shows_its_form_again(seeded: Seeded, client: Client) -> None:
    chosen = seeded.rt.store.checkpoints(seeded.succeeded)[-1]
    url = f"/checkpoints/{chosen.id}/replay"
    r = client.post(url, data={"_csrf_token": csrf(client, url), "version": "nope"})
    assert r.status_code == 422 and "is not registered" in r.text and f'action="{url}"' in r.text
    assert client.get("/checkpoints/cp_nope/replay").status_code == 404
