"""An opened journal panel on the page of a running run is asked for again only when what it
shows could have changed: a refresh for a checkpoint that added no journal entry keeps it as
it is (no request, no flicker), one after an effect loads it again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Demo, served_while_running
from playwright.sync_api import Page, expect


@pytest.fixture
def paying(tmp_path: Path) -> Iterator[Demo]:
    """A run of ``busy_graphs:paying`` driven by ``harness run``, served by ``harness serve``
    over the same store."""
    with served_while_running("paying", tmp_path) as demo:
        yield demo


def test_an_open_journal_is_asked_for_again_only_once_an_entry_is_added(page: Page, paying: Demo,
                                                                         shot: Any) -> None:
    run_id = paying.ids["paying"]
    asked: list[str] = []
    refreshed: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/panels/journal" in r.url else None)
    page.on("request", lambda r: refreshed.append(r.url) if r.headers.get("hx-request") and
            r.url.split("?")[0].endswith(f"/runs/{run_id}") else None)
    page.goto(f"{paying.url}/runs/{run_id}")
    journal = page.locator("details[data-panel=journal]")
    journal.locator("> summary").click()
    expect(journal.locator(".panel-body td.muted")).to_have_text("No effects.")
    assert len(asked) == 1, asked

    # the steps before the effect take a checkpoint each: the page refreshes, the journal stays
    page.wait_for_function("document.querySelectorAll('.timeline a.cp-link').length >= 4")
    expect(page.locator("#run-status")).to_have_text("running")
    assert refreshed, "the page never refreshed"
    assert len(asked) == 1, asked
    expect(journal).to_have_attribute("open", "")
    expect(journal.locator(".panel-body td.muted")).to_have_text("No effects.")

    # the effect adds entries: the refresh after it loads the journal again, while the run goes on
    expect(journal.locator("table.journal td", has_text="payments.charge#0")).to_be_visible(timeout=10_000)
    assert paying.api(f"/api/runs/{run_id}")["run"]["status"] == "running"
    assert len(asked) >= 2, asked
    shot()
