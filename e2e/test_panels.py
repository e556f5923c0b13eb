"""A run page's panel at its own URL (the link a lazy panel shows before it loads, opened
in a tab of its own): its pages and its search work there as in the run page."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect


def test_the_trace_at_its_own_url_pages_and_searches(page: Page, demo: Any, shot: Any) -> None:
    run_id = demo.ids["fan_out"]
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if "htmx:" in m.text else None)
    page.goto(f"/runs/{run_id}/panels/events?cp=0")
    first = page.locator("table.events tbody tr").first
    expect(first).to_have_id("ev-1")
    page.get_by_role("link", name="later →").click()
    expect(page.locator(".pager")).to_contain_text("page 2")
    expect(first).not_to_have_id("ev-1")
    page.get_by_role("link", name="← earlier").click()
    expect(page.locator(".pager")).to_contain_text("page 1")
    expect(first).to_have_id("ev-1")

    page.get_by_placeholder("search type, node, data").fill("embed[7]")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("table.events tbody tr").first.locator("td").nth(2)).to_have_text("embed[7]")
    for node in page.locator("table.events tbody tr td:nth-child(3)").all_inner_texts():
        assert node == "embed[7]", node
    assert not problems, problems
