"""Cancelling a running run from its page, and watching it end live."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Page, expect


def start_slow_run(demo: Any) -> str:
    """A RUNNING run whose node is in flight for an hour: the demo's cancelled crawl forked from
    its checkpoint before ``crawl`` (the fork runs the slow node again)."""
    cps = demo.api(f"/api/runs/{demo.ids['cancelled']}/checkpoints")["checkpoints"]
    before_crawl = next(c for c in cps if c["node_states"] == {"sitemap": "succeeded", "crawl": "pending"})
    run_id: str = demo.post(f"/api/checkpoints/{before_crawl['id']}/fork", {})["run_id"]
    return run_id


def test_cancel_a_running_run(page: Page, demo: Any, shot: Any) -> None:
    run_id = start_slow_run(demo)
    page.goto(f"/runs/{run_id}")
    status = page.locator("#run-status")
    expect(status).to_have_text("running")
    # the page follows the run over server-sent events: the slow node's progress shows in the live log
    expect(page.locator("#run-head")).to_have_attribute("sse-connect", f"/runs/{run_id}/live")
    live_log = page.locator("#live-log")
    expect(live_log).to_contain_text("waiting for https://slow.example.com")
    page.evaluate("window.stillTheSamePage = true")   # gone if anything reloads the page
    meta = page.locator("#run-meta")
    started = meta.locator("div", has_text="Started").inner_text()
    shot("-running")

    actions = page.locator(".actions")
    actions.get_by_placeholder("reason").fill("the site is down for maintenance")
    dialogs: list[str] = []

    def confirm(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.accept()

    page.on("dialog", confirm)
    actions.get_by_role("button", name="Cancel").click()

    expect(status).to_have_text("cancelled", timeout=10_000)
    expect(live_log).to_contain_text("run.cancel")
    expect(live_log).to_contain_text("node.cancel crawl")
    assert page.evaluate("window.stillTheSamePage === true"), "the page was reloaded"
    assert dialogs == [f"Cancel run {run_id}?"]
    # the rest of the page caught up too: the crawl node is listed cancelled, cancel is no longer offered
    expect(page.locator("table.nodes")).to_contain_text("cancelled")
    expect(actions.get_by_role("button", name="Cancel")).to_have_count(0)
    expect(actions.get_by_role("button", name="Resume")).to_be_visible()
    # and so did the header: the reason it ended, and how long it ran in the end
    expect(meta).to_contain_text("the site is down for maintenance")
    expect(meta.locator("div", has_text="Started")).not_to_have_text(started)
    shot()

    run = demo.api(f"/api/runs/{run_id}")["run"]
    assert run["status"] == "cancelled"
    events = demo.api(f"/api/runs/{run_id}/events?limit=1000")["events"]
    cancelled = [e for e in events if e["type"] == "run.cancel"]
    assert cancelled and "the site is down for maintenance" in str(cancelled[-1]["data"]), cancelled


def test_a_checkpoint_picked_while_the_run_goes_on_stays_shown(page: Page, demo: Any, shot: Any) -> None:
    run_id = start_slow_run(demo)
    page.goto(f"/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("running")
    page.locator('.timeline a.cp-link[data-seq="0"]').click()
    expect(page).to_have_url(re.compile(r"[?&]cp=0(&|$)"))
    demo.post(f"/api/runs/{run_id}/cancel", {"reason": "stopped while looking back"})
    expect(page.locator("#run-status")).to_have_text("cancelled")
    # the run's end refreshes the page (its actions now offer resume), at the checkpoint picked
    expect(page.locator(".actions").get_by_role("button", name="Resume")).to_be_visible()
    head = demo.api(f"/api/runs/{run_id}")["checkpoint_count"] - 1
    assert head > 0
    expect(page.locator(".timeline a.cp-link.selected")).to_have_attribute("data-seq", "0")
    expect(page.locator(".selected-cp h2")).to_contain_text("Checkpoint #0")
    expect(page.locator(f'.timeline a.cp-link[data-seq="{head}"]')).to_be_visible()
    expect(page).to_have_url(re.compile(r"[?&]cp=0(&|$)"))
    shot()


def test_a_node_opened_while_the_run_goes_on_follows_its_end(page: Page, demo: Any, shot: Any) -> None:
    """Opening a node (from the node table or the drawing) picks no checkpoint: the page goes on
    following the head, so the drawer shows how the node ended."""
    run_id = start_slow_run(demo)
    page.goto(f"/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("running")
    drawer = page.locator("#drawer")
    page.locator(".selected-cp table.nodes").get_by_role("link", name="crawl").click()
    expect(drawer.locator("details.instance > summary")).to_contain_text("running")
    expect(page).to_have_url(re.compile(rf"/runs/{run_id}\?node=crawl$"))
    page.locator("#dag g.node", has_text="sitemap").click()   # the drawing too
    expect(page).to_have_url(re.compile(rf"/runs/{run_id}\?node=sitemap$"))
    expect(page.locator("#run-status")).to_have_text("running")
    page.locator("#dag g.node", has_text="crawl").click()
    expect(page).to_have_url(re.compile(rf"/runs/{run_id}\?node=crawl$"))
    expect(drawer.locator("details.instance > summary")).to_contain_text("running")

    demo.post(f"/api/runs/{run_id}/cancel", {"reason": "stopped while watching crawl"})
    expect(page.locator("#run-status")).to_have_text("cancelled")
    head = demo.api(f"/api/runs/{run_id}")["checkpoint_count"] - 1
    expect(page.locator(".timeline a.cp-link.selected")).to_have_attribute("data-seq", str(head))
    expect(drawer.locator("details.instance > summary")).to_contain_text("cancelled")
    shot()
    drawer.get_by_role("link", name="close").click()
    expect(page.locator("#drawer")).to_have_count(0)
    expect(page).to_have_url(re.compile(rf"/runs/{run_id}$"))


def test_a_refresh_answered_after_the_drawer_closed_does_not_open_it_again(page: Page, demo: Any) -> None:
    """The run ends while a node's drawer is open; its refreshes, asked for at the drawer's
    address, are answered only after the drawer was closed: the drawer stays closed and the
    page still comes to show how the run ended."""
    run_id = start_slow_run(demo)
    page.goto(f"/runs/{run_id}?node=crawl")
    drawer = page.locator("#drawer")
    expect(drawer.locator("details.instance > summary")).to_contain_text("running")
    held: list[Any] = []
    answered: list[str] = []
    at_drawer = f"/runs/{run_id}?node=crawl"
    page.route(lambda url: url.endswith(at_drawer),
               lambda route: held.append(route) if route.request.headers.get("hx-request") else route.continue_())
    page.on("requestfinished", lambda request: answered.append(request.url))

    demo.post(f"/api/runs/{run_id}/cancel", {"reason": "closed while it ended"})
    expect(page.locator("#run-status")).to_have_text("cancelled")   # over the live stream
    for _ in range(100):   # the refreshes the run's end asks for, held at the drawer's address
        if held:
            break
        page.wait_for_timeout(100)
    assert held, "the run's end asked for no refresh"
    drawer.get_by_role("link", name="close").click()
    expect(drawer).to_have_count(0)
    expect(page).to_have_url(re.compile(rf"/runs/{run_id}$"))

    asked = len(held)
    for route in held:
        route.continue_()
    for _ in range(100):
        if sum(url.endswith(at_drawer) for url in answered) >= asked:
            break
        page.wait_for_timeout(100)
    page.wait_for_timeout(1000)   # what the held answers would have swapped in
    expect(drawer).to_have_count(0)
    expect(page).to_have_url(re.compile(rf"/runs/{run_id}$"))
    expect(page.locator(".actions").get_by_role("button", name="Resume")).to_be_visible()
    expect(page.locator(".timeline a.cp-link.selected")).to_have_attribute(
        "data-seq", str(demo.api(f"/api/runs/{run_id}")["checkpoint_count"] - 1))
