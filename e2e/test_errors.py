"""A click that the server refuses, or cannot answer, says so on the page instead of
doing nothing."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, Route, expect


def test_an_action_refused_for_a_stale_page_says_to_reload(page: Page, demo: Any, shot: Any) -> None:
    run_id = demo.ids["cancelled"]
    page.goto(f"/runs/{run_id}")
    # the page's form token no longer matches: the server was restarted since it was loaded
    page.context.add_cookies([{"name": "csrftoken", "value": "from-an-earlier-server", "url": demo.url}])
    page.on("dialog", lambda d: d.accept())
    page.locator(".actions").get_by_role("button", name="Resume").click()
    flash = page.locator("#flash")
    expect(flash).to_contain_text("403")
    expect(flash).to_contain_text("reload it and try again")
    shot()


def test_a_step_the_server_cannot_answer_says_so(page: Page, demo: Any, shot: Any) -> None:
    run_id = demo.ids["research"]
    page.goto(f"/runs/{run_id}")
    flash = page.locator("#flash")

    def fail(route: Route) -> None:   # (a proxy in front of the server; a 5xx would fail the journey itself)
        route.fulfill(status=429, body="slow down")

    page.route(f"**/runs/{run_id}?cp=1", fail)
    page.locator('.timeline a.cp-link[data-seq="1"]').click()
    expect(flash).to_contain_text("The server could not do that (HTTP 429)")
    page.route(f"**/runs/{run_id}?cp=2", lambda route: route.abort())
    page.locator('.timeline a.cp-link[data-seq="2"]').click()
    expect(flash).to_contain_text("The server did not answer")
    shot()
