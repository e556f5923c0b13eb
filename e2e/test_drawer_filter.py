"""The node drawer's status filter in a browser: a choice swaps the drawer in place, the
address bar keeps it, and stepping through the timeline keeps it too."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Page, expect


def mixed_checkpoint(demo: Any, run_id: str, node: str) -> int:
    """A checkpoint where the map's items are in more than one status."""
    after = None
    while True:
        got = demo.api(f"/api/runs/{run_id}/checkpoints" + ("" if after is None else f"?after={after}"))
        for cp in got["checkpoints"]:
            statuses = {st for name, st in cp["node_states"].items() if name.startswith(node + "[")}
            if "succeeded" in statuses and len(statuses) > 1:
                return int(cp["seq"])
        if not got["has_more"]:
            raise AssertionError(f"no checkpoint of {run_id} has {node}'s items in several statuses")
        after = got["next_after"]


def test_the_drawer_shows_only_the_instances_in_the_status_chosen(page: Page, demo: Any, shot: Any) -> None:
    run_id = demo.ids["fan_out"]
    seq = mixed_checkpoint(demo, run_id, "embed")
    page.goto(f"/runs/{run_id}?cp={seq}&node=embed")
    drawer = page.locator("#drawer")
    chips = drawer.locator("nav.chips")
    expect(chips.locator("a.chip.selected")).to_have_text(re.compile(r"^all \d+$"))
    badges = drawer.locator("details.instance > summary .badge")
    assert len(set(badges.all_inner_texts())) > 1

    chips.locator('a[data-status="succeeded"]').click()
    expect(page).to_have_url(re.compile(rf"\?cp={seq}&node=embed&status=succeeded$"))
    expect(chips.locator('a[data-status="succeeded"]')).to_have_class(re.compile(r"\bselected\b"))
    expect(badges.first).to_have_text("succeeded")
    assert set(badges.all_inner_texts()) == {"succeeded"}

    # the next checkpoint: the drawer stays on the node and on the status chosen
    page.keyboard.press("j")
    expect(page).to_have_url(re.compile(rf"\?cp={seq + 1}&node=embed&status=succeeded$"))
    expect(chips.locator('a[data-status="succeeded"]')).to_have_class(re.compile(r"\bselected\b"))
    assert set(badges.all_inner_texts()) == {"succeeded"}
    shot()

    chips.locator("a.chip").first.click()   # all of them again
    expect(page).to_have_url(re.compile(rf"\?cp={seq + 1}&node=embed$"))
