"""A page following a running run keeps its opened trace and its time so far current, as
the live feed is, while the run goes on with and without checkpoints; a folded state tree
stays folded; both stop when the run ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Demo, served_while_running
from playwright.sync_api import Page, expect

TRACE_SEQS = "Array.from(document.querySelectorAll('#events table.events tbody tr[id]'), r => +r.id.slice(3))"
FEED_SEQ = "(() => { const e = document.querySelector('#live-log .ev .mono'); return e ? +e.textContent.slice(1) : 0; })()"


@pytest.fixture
def steady(tmp_path: Path) -> Iterator[Demo]:
    """A run of ``busy_graphs:steady`` (about fifteen seconds) driven by ``harness run``, served by
    ``harness serve`` over the same store."""
    with served_while_running("steady", tmp_path) as demo:
        yield demo


def trace_catches_up_with_the_feed(page: Page) -> None:
    """The opened trace comes to show the newest event the live feed shows."""
    page.wait_for_function(f"{FEED_SEQ} > 0")
    newest = page.evaluate(FEED_SEQ)
    page.wait_for_function(f"Math.max(0, ...{TRACE_SEQS}) >= {newest}", timeout=4000)
    expect(page.locator("#events")).to_have_attribute("open", "")


def test_a_running_runs_trace_and_time_so_far_stay_current_until_it_ends(page: Page, steady: Demo,
                                                                         shot: Any) -> None:
    run_id = steady.ids["steady"]
    page.goto(f"{steady.url}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("running")
    page.locator(".state details.j[data-path='$'] > summary").click()   # fold the state
    page.locator("#events > summary").click()                           # open the trace
    expect(page.locator("#events table.events")).to_be_visible()

    # the time so far counts on between checkpoints (one every 2.8 s)
    started = page.locator("#run-meta dt", has_text="Started").locator("xpath=following-sibling::dd")
    shown = []
    for _ in range(3):
        shown.append(started.inner_text())
        page.wait_for_timeout(700)
    assert len(set(shown)) == 3, shown

    trace_catches_up_with_the_feed(page)
    page.wait_for_timeout(3000)        # across a checkpoint's refresh of the page
    trace_catches_up_with_the_feed(page)
    assert page.evaluate("window.document.querySelector(\".state details.j[data-path='$']\").open") is False
    shot("-following")

    steady.wait_status(run_id, "succeeded", timeout=40)
    expect(page.locator("#run-status")).to_have_text("succeeded")
    last = steady.api(f"/api/runs/{run_id}/events?after=0&limit=1000")["events"][-1]["seq"]
    page.wait_for_function(f"Math.max(0, ...{TRACE_SEQS}) === {last}", timeout=4000)
    # the page the run's end brings (its recorded time, no counter), then nothing moves
    expect(page.locator("#run-took[data-took]")).to_have_count(0, timeout=5000)
    final = started.inner_text()
    page.wait_for_timeout(1200)
    assert started.inner_text() == final and page.locator("#run-took[data-took]").count() == 0

    # a step back keeps the trace open, read again at the checkpoint now shown: later events greyed
    page.locator(".timeline a.cp-link").nth(1).click()
    expect(page.locator("#events")).to_have_attribute("open", "")
    expect(page.locator("#events table.events tr.after-cp").first).to_be_visible()
    assert "cp=1" in (page.locator("#events table.events").get_attribute("data-src") or "")
