"""Forking from a checkpoint with a patch typed in the browser, and patches that are refused."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Page, expect

RUN_URL = re.compile(r"/runs/(run_[0-9a-f]+)$")


def classified(demo: Any) -> dict[str, Any]:
    """The support ticket's checkpoint right after ``classify`` (where the demo forks it too)."""
    cps = demo.api(f"/api/runs/{demo.ids['support']}/checkpoints")["checkpoints"]
    found: dict[str, Any] = next(c for c in cps if "classify" in c["nodes"])
    return found


def effects_of(demo: Any, run_id: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = demo.api(f"/api/runs/{run_id}/journal")["effects"]
    return rows


def open_journal(page: Page) -> Any:
    """Open the run page's effect journal panel (loaded when opened); its rows."""
    page.locator("details.lazy summary", has_text="Effect journal").click()
    table = page.locator("table.journal")
    expect(table).to_be_visible()
    return table.locator("tbody tr")


def test_fork_with_a_patch(page: Page, demo: Any, shot: Any) -> None:
    support = demo.ids["support"]
    cp = classified(demo)
    source_effects = effects_of(demo, support)
    journal_before = demo.api(f"/api/runs/{support}/journal")["entries"]
    assert source_effects, "the support ticket should have recorded effects"

    # from the checkpoint on the run page to the fork page
    page.goto(f"/runs/{support}?cp={cp['seq']}")
    page.get_by_role("link", name="Fork from here…").click()
    expect(page).to_have_url(re.compile(rf"/checkpoints/{cp['id']}/fork$"))
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"checkpoint #{cp['seq']}")

    expect(page.locator("#preview")).to_be_hidden()   # no empty box before there is anything to preview
    page.locator("#patch").fill('{"tier": "platinum"}')
    page.get_by_role("button", name="Preview the patch").click()
    diff_row = page.locator("#preview table.diff tbody tr")
    expect(diff_row).to_have_count(1)
    expect(page.locator("#preview")).to_be_visible()
    expect(diff_row).to_contain_text("tier")
    expect(diff_row).to_contain_text('"standard"')
    expect(diff_row).to_contain_text('"platinum"')
    shot("-preview")

    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Create the fork").click()
    expect(page).to_have_url(RUN_URL)
    fork_id = RUN_URL.search(page.url).group(1)   # type: ignore[union-attr]
    assert fork_id != support
    head = page.locator("#run-head")
    expect(head.locator(".meta")).to_contain_text("fork of")
    expect(head.locator(f'a[href="/runs/{support}"]')).to_be_visible()
    # the page follows the run until it ends (live while it runs): the badge, then the timeline
    expect(page.locator("#run-status")).to_contain_text("succeeded", timeout=15_000)
    demo.wait_status(fork_id, "succeeded")
    last = demo.api(f"/api/runs/{fork_id}/checkpoints")["checkpoints"][-1]["seq"]
    expect(page.locator(".timeline a.cp-link.selected")).to_have_attribute("data-seq", str(last))
    expect(page.locator(".timeline a.cp-link")).to_have_count(last + 1)

    # the thread tree shows the new branch, from the checkpoint, with the field its patch edited
    thread = demo.api(f"/api/runs/{support}")["run"]["thread_id"]
    head.locator(f'a[href="/threads/{thread}"]').click()
    expect(page).to_have_url(re.compile(rf"/threads/{re.escape(thread)}$"))
    branch = page.locator("li.branch", has=page.get_by_role("link", name=fork_id))
    expect(branch).to_have_count(1)
    expect(branch).to_contain_text("fork")
    expect(branch.locator(".patched")).to_contain_text("tier")
    expect(branch).to_contain_text(f"from #{cp['seq']} of {support}")
    expect(branch).to_contain_text("effects mocked")
    expect(branch).to_contain_text("succeeded")
    shot("-thread")

    # the fork's state has the patch, and its effects were served from the recording: MOCKED
    branch.get_by_role("link", name=fork_id).click()
    expect(page).to_have_url(re.compile(rf"/runs/{fork_id}$"))
    expect(page.locator(".state")).to_contain_text('"platinum"')
    expect(page.locator(".state")).to_contain_text('"platinum-normal"')
    fork_effects = effects_of(demo, fork_id)
    assert fork_effects and all(e["label"] == "MOCKED" for e in fork_effects), fork_effects
    rows = open_journal(page)
    expect(rows).to_have_count(len(fork_effects))
    expect(rows.locator(".badge")).to_have_text(["MOCKED"] * len(fork_effects))
    for name in ("crm.lookup", "llm.draft"):
        expect(rows.filter(has_text=name)).to_have_count(1)

    # the original run's journal is as it was: nothing was called again
    assert demo.api(f"/api/runs/{support}/journal")["entries"] == journal_before
    page.goto(f"/runs/{support}")
    rows = open_journal(page)
    expect(rows).to_have_count(len(source_effects))
    expect(rows.locator(".badge")).to_have_text([e["label"] for e in source_effects])
    expect(rows.locator(".badge", has_text="MOCKED")).to_have_count(0)


def test_invalid_patch_creates_nothing(page: Page, demo: Any, shot: Any) -> None:
    cp = classified(demo)
    runs_before = demo.run_count()
    page.goto(f"/checkpoints/{cp['id']}/fork")
    error = page.locator("#preview .field-error")
    patch = page.locator("#patch")
    page.on("dialog", lambda d: d.accept())

    # a field the state does not have
    patch.fill('{"tier": "gold", "no_such_field": 1}')
    page.get_by_role("button", name="Preview the patch").click()
    expect(error).to_be_visible()
    expect(error).to_contain_text("no_such_field")
    expect(page.locator("#preview table.diff")).to_have_count(0)
    page.get_by_role("button", name="Create the fork").click()
    expect(error).to_contain_text("no_such_field")

    # a field of the wrong type
    patch.fill('{"tier": 5}')
    page.get_by_role("button", name="Create the fork").click()
    expect(error).to_contain_text("tier")
    expect(error).not_to_contain_text("no_such_field")
    shot("-wrong-type")

    # not JSON at all, and JSON that is not an object
    patch.fill('{"tier": ')
    page.get_by_role("button", name="Create the fork").click()
    expect(error).to_contain_text("patch")
    expect(error).not_to_contain_text("tier")
    patch.fill('["tier"]')
    page.get_by_role("button", name="Create the fork").click()
    expect(error).to_contain_text("object")

    # the form keeps what was typed, the page did not move, and no run was made
    expect(patch).to_have_value('["tier"]')
    expect(page).to_have_url(re.compile(rf"/checkpoints/{cp['id']}/fork$"))
    assert demo.run_count() == runs_before
