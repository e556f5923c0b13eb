"""Compensating a run from its page: the notice says what was undone, and the page shows the
run as it now is (its action bar, its journal) without a reload."""

from __future__ import annotations

import time
from typing import Any

from playwright.sync_api import Page, expect


def live_failed_trip(demo: Any) -> str:
    """The demo's trip booking forked from its first checkpoint with live effects: it books the
    hotel and the flight again, fails at the car, and has both bookings to undo."""
    cps = demo.api(f"/api/runs/{demo.ids['compensated']}/checkpoints")["checkpoints"]
    run_id: str = demo.post(f"/api/checkpoints/{cps[0]['id']}/fork", {"effects": "live"})["run_id"]
    for _ in range(100):
        if demo.api(f"/api/runs/{run_id}")["run"]["status"] == "failed":
            return run_id
        time.sleep(0.1)
    raise AssertionError("the live fork of the trip did not fail at the car")


def test_compensating_a_run_shows_it_compensated_at_once(page: Page, demo: Any, shot: Any) -> None:
    run_id = live_failed_trip(demo)
    page.goto(f"/runs/{run_id}")
    actions = page.locator("#run-actions")
    expect(actions.get_by_role("button", name="Compensate")).to_be_visible()
    expect(actions.get_by_role("button", name="Resume")).to_be_visible()
    page.evaluate("window.stillTheSamePage = true")
    page.on("dialog", lambda dialog: dialog.accept())
    actions.get_by_role("button", name="Compensate").click()
    expect(page.locator("#flash")).to_contain_text("compensated")
    # the bar says what the run now is, and offers neither a second Compensate nor a Resume
    expect(page.locator("#compensated-note")).to_have_text("compensated: fork it to try again")
    expect(actions.get_by_role("button", name="Compensate")).to_have_count(0)
    expect(actions.get_by_role("button", name="Resume")).to_have_count(0)
    assert page.evaluate("window.stillTheSamePage") is True
    shot()
