"""The runs list: filters, and the browser's back and forward buttons over them."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Page, expect


def test_back_and_forward_restore_the_filters_with_their_runs(page: Page, demo: Any, shot: Any) -> None:
    failed = demo.api("/api/runs?status=failed&per_page=500")["runs"]
    assert failed
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto("/runs")
    status, rows = page.locator("#runs-filter select[name=status]"), page.locator("#runs tbody tr")
    everything = rows.count()
    assert everything > len(failed)
    status.select_option("failed")
    expect(page).to_have_url(re.compile(r"[?&]status=failed(&|$)"))
    expect(rows).to_have_count(len(failed))
    search = page.locator("#runs-filter input[name=q]")
    search.fill(failed[0]["id"])
    search.press("Enter")
    expect(rows).to_have_count(1)

    # no copy of a page is kept for Back: it asks the server, which shows the runs as they are now
    assert page.evaluate("sessionStorage.getItem('htmx-history-cache')") is None
    page.go_back()   # one step back: pressing Enter filtered once
    expect(page).to_have_url(re.compile(r"[?&]status=failed&kind=&graph=&q=&page=1$"))
    expect(status).to_have_value("failed")
    expect(search).to_have_value("")
    expect(rows).to_have_count(len(failed))
    page.go_back()
    expect(page).to_have_url(re.compile(r"/runs$"))
    expect(status).to_have_value("")
    expect(rows).to_have_count(everything)
    page.go_forward()
    expect(status).to_have_value("failed")
    expect(rows).to_have_count(len(failed))
    # the list refreshes itself every few seconds, with the filters shown
    page.wait_for_timeout(3500)
    expect(rows).to_have_count(len(failed))
    expect(page).to_have_url(re.compile(r"[?&]status=failed(&|$)"))
    assert errors == []   # a search sends one request, none cut short
    shot()
