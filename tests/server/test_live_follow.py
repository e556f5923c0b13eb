"""A running run's page keeps its trace and its time so far current between checkpoints,
without taking what a person does there: the opened trace is kept through refreshes and
asked for again as events come (at its page and search), and the time counts on until the
run ends or pauses."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from local_client import TestClient
from waiting import wait_for

from test_pages import HTMX
from runtime import RunStatus

if TYPE_CHECKING:
    from conftest import Seeded

Client = TestClient[Any]


def held_run(seeded: Seeded, client: Client) -> str:
    """A fork of the order run that stays RUNNING (its charge waits until cancelled)."""
    start = seeded.rt.store.checkpoints(seeded.succeeded)[0].id
    held: str = client.post(f"/api/checkpoints/{start}/fork", json={"patch": {"hold": True}}).json()["run_id"]
    wait_for(seeded.rt, held, [RunStatus.RUNNING])
    return held


def cancel(seeded: Seeded, run_id: str) -> None:
    asyncio.run(seeded.rt.cancel(run_id, "done looking"))
    wait_for(seeded.rt, run_id)


def test_a_running_runs_page_asks_for_its_opened_trace_as_events_come_and_at_the_end(
        seeded: Seeded, client: Client) -> None:
    held = held_run(seeded, client)
    page = client.get(f"/runs/{held}").text
    head = page[page.index('id="run-head"'):page.index('class="run-grid"')]   # kept by refreshes of #main
    triggers = re.findall(r'<div hidden hx-get="/runs/' + held + r'/panels/events" hx-target="#events \.panel-body" '
                          r'hx-trigger="([^"]+)"[^>]*data-trace>', head)
    # leading and trailing: a busy run updates it each second, the last events are never left out
    assert triggers == ["sse:event throttle:1s", "sse:event delay:1s, sse:end"]
    assert re.search(r'<details class="panel lazy" id="events" hx-preserve', page)
    step = client.get(f"/runs/{held}?cp=0", headers=HTMX).text                 # a refresh keeps the opened trace
    assert re.search(r'<details class="panel lazy" id="events" hx-preserve', step)
    cancel(seeded, held)


def test_the_trace_says_which_page_and_search_it_shows_and_keeps_a_search_being_typed(
        seeded: Seeded, client: Client) -> None:
    panel = client.get(f"/runs/{seeded.succeeded}/panels/events?cp=1&page=1&eq=charge", headers=HTMX).text
    assert f'<table class="events" data-src="/runs/{seeded.succeeded}/panels/events?cp=1&amp;page=1&amp;eq=charge">' in panel
    assert re.search(r'<input type="search" name="eq" id="trace-search" hx-preserve value="charge"', panel)


def test_a_running_runs_time_so_far_counts_on_until_it_ends(seeded: Seeded, client: Client) -> None:
    held = held_run(seeded, client)
    running = client.get(f"/runs/{held}").text
    took = re.search(r'<span id="run-took" data-took="([0-9.]+)">([^<]+)</span>', running)
    assert took and float(took.group(1)) >= 0
    cancel(seeded, held)
    ended = client.get(f"/runs/{held}", headers=HTMX).text                    # the refresh at its end
    assert re.search(r'<span id="run-took">[^<]+</span>', ended) and "data-took" not in ended
    assert "data-trace" not in client.get(f"/runs/{held}").text
