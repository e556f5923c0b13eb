"""At a past checkpoint the run page's panels still list the whole run, and what came after
the checkpoint is greyed and said to be later; at the latest checkpoint nothing is."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Locator, Page, expect


def opacity(row: Locator) -> float:
    return float(row.evaluate("el => getComputedStyle(el).opacity"))


def open_panel(page: Page, title: str) -> None:
    page.locator("details.lazy summary", has_text=title).click()


def test_what_came_after_a_past_checkpoint_is_greyed(page: Page, demo: Any, shot: Any) -> None:
    support = demo.ids["support"]
    effects = demo.api(f"/api/runs/{support}/journal")["effects"]
    page.goto(f"/runs/{support}?cp=0")   # before any node ran: every effect came after it
    open_panel(page, "Effect journal")
    rows = page.locator("table.journal tbody tr")
    expect(rows).to_have_count(len(effects))
    expect(rows.first.locator(".later")).to_have_text("after this checkpoint")
    assert all(opacity(r) < 1 for r in rows.all())
    open_panel(page, "Attempts")
    expect(page.locator("table.attempts tbody tr.after-cp").first).to_be_visible()
    expect(page.locator(".waterfall .cp-mark")).to_be_visible()
    shot("-past")

    page.goto(f"/runs/{support}")   # the latest checkpoint: the run as it is now
    open_panel(page, "Effect journal")
    rows = page.locator("table.journal tbody tr")
    expect(rows).to_have_count(len(effects))
    expect(page.locator("table.journal .later")).to_have_count(0)
    assert all(opacity(r) == 1 for r in rows.all())
