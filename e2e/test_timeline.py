"""Stepping through a run's checkpoints with the mouse and the keyboard."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Page, expect


def selected(page: Page, seq: int) -> None:
    """Checkpoint ``seq`` is the selected one: in the timeline, the panel's heading and the URL."""
    expect(page.locator(".timeline a.cp-link.selected")).to_have_attribute("data-seq", str(seq))
    expect(page.locator(".selected-cp h2")).to_contain_text(f"Checkpoint #{seq}")
    expect(page).to_have_url(re.compile(rf"[?&]cp={seq}(&|$)"))


def look(page: Page) -> tuple[str, str, str]:
    """What stepping changes: the graph's colour sheet, the read map's fill, the state shown
    (read once ``selected`` has seen the swap: the sheet comes in the same swap as the timeline)."""
    sheet = page.locator("style#dag-status").text_content() or ""
    fill = page.locator("#n2 polygon").first.evaluate("el => getComputedStyle(el).fill")
    state = page.locator(".state").inner_text()
    return sheet, fill, state


def test_step_through_checkpoints(page: Page, demo: Any, shot: Any) -> None:
    run_id = demo.ids["research"]
    cps = demo.api(f"/api/runs/{run_id}/checkpoints")["checkpoints"]
    states = [c["node_states"] for c in cps]
    # the checkpoint at which the map over sources has finished, and the one before (its items
    # running, or not started yet: how many items one step settles depends on timing)
    mapped = next(i for i, s in enumerate(states) if s["read"] == "succeeded")
    mapping = mapped - 1
    before = states[mapping]["read"]
    assert before in ("running", "pending"), [s["read"] for s in states]
    page.goto(f"/runs/{run_id}")
    selected_last = str(cps[-1]["seq"])
    expect(page.locator(".timeline a.cp-link.selected")).to_have_attribute("data-seq", selected_last)
    # the research agent draws model (n0), tool (n1), the read map (n2) and the review subgraph (n3, n4)
    expect(page.locator("#n2")).to_contain_text("read")

    # the mouse: the checkpoint before the map is done
    page.locator(f'.timeline a.cp-link[data-seq="{mapping}"]').click()
    selected(page, mapping)
    unmapped = look(page)
    assert re.search(rf"#n2 path,#n2 polygon[^{{]*\{{fill:var\(--st-{before}\)\}}", unmapped[0]), unmapped[0]

    # → : the map has finished; its node turns succeeded, the state gains the reads
    page.keyboard.press("ArrowRight")
    selected(page, mapped)
    done = look(page)
    assert re.search(r"#n2 path,#n2 polygon[^{]*\{fill:var\(--st-succeeded\)\}", done[0]), done[0]
    assert done[1] != unmapped[1], "the read map's fill did not change"
    assert done[2] != unmapped[2], "the state panel did not change"

    # ← : back to the same view as before
    page.keyboard.press("ArrowLeft")
    selected(page, mapping)
    assert look(page) == unmapped

    # the first checkpoints: the input (nothing run), then the model's first call
    page.locator('.timeline a.cp-link[data-seq="2"]').click()
    selected(page, 2)
    page.keyboard.press("ArrowLeft")
    selected(page, 1)
    first = look(page)
    assert "#n0 path,#n0 polygon{fill:var(--st-succeeded)}" in first[0], first[0]
    assert re.search(r"#n2 path,#n2 polygon[^{]*\{fill:var\(--st-pending\)\}", first[0]), first[0]

    # j is forward, k is back (the timeline is a list read downwards)
    page.keyboard.press("j")
    selected(page, 2)
    page.keyboard.press("k")
    selected(page, 1)
    page.keyboard.press("k")
    selected(page, 0)
    assert "succeeded" not in look(page)[0]
    page.keyboard.press("k")   # nothing before the input checkpoint: it stays selected
    selected(page, 0)
    page.keyboard.press("j")
    selected(page, 1)
    assert look(page) == first
    # the action bar forks from the checkpoint shown, as the checkpoint panel's own link does
    fork_here = f"/checkpoints/{cps[1]['id']}/fork"
    expect(page.locator(".selected-cp").get_by_role("link", name="Fork from here…")).to_have_attribute("href", fork_here)
    expect(page.locator(".actions").get_by_role("link", name="Fork…")).to_have_attribute("href", fork_here)
    expect(page.locator("#run-actions")).to_have_count(1)

    # the URL is the view: reloading it shows the same checkpoint, colours and state
    page.reload()
    selected(page, 1)
    assert look(page) == first
    shot()
    # and the browser's history steps back through what was selected
    page.go_back()
    selected(page, 0)
    page.go_forward()
    selected(page, 1)
    # a node clicked in the drawing opens at the checkpoint shown, not at the latest
    page.locator("#n2").click()
    expect(page).to_have_url(re.compile(r"[?&]node=read(&|$)"))
    selected(page, 1)
    expect(page.locator("#drawer h2")).to_contain_text("Node read")

    # typing in a field does not step: the keys are the field's
    page.locator(f'.timeline a.cp-link[data-seq="{mapped}"]').click()
    selected(page, mapped)
    page.locator("#events summary").click()
    search = page.locator("#events input[type=search]")
    search.press_sequentially("jk")
    search.press("ArrowLeft")
    expect(search).to_have_value("jk")
    selected(page, mapped)


def selected_in_view(page: Page) -> bool:
    """Whether the selected checkpoint lies inside the timeline's scrolled box."""
    return bool(page.evaluate("""() => {
        const box = document.querySelector('.timeline ol').getBoundingClientRect();
        const at = document.querySelector('.timeline a.cp-link.selected').getBoundingClientRect();
        return at.top >= box.top - 1 && at.bottom <= box.bottom + 1; }"""))


def test_the_selected_checkpoint_stays_in_view(page: Page, demo: Any, shot: Any) -> None:
    run_id = demo.ids["fan_out"]
    last = demo.api(f"/api/runs/{run_id}")["run"]["head_seq"]
    assert last > 20, last   # far more checkpoints than the timeline's box shows at once
    page.goto(f"/runs/{run_id}")
    expect(page.locator(".timeline a.cp-link.selected")).to_have_attribute("data-seq", str(last))
    assert selected_in_view(page), "the head checkpoint is selected but scrolled out of the timeline"
    top = page.evaluate("() => window.scrollY")
    for seq in range(last - 1, last - 4, -1):
        page.keyboard.press("k")
        selected(page, seq)
        assert selected_in_view(page), f"#{seq} is selected but scrolled out of the timeline"
    assert page.evaluate("() => window.scrollY") == top, "stepping scrolled the page itself"
    page.goto(f"/runs/{run_id}?cp={last // 2}")
    assert selected_in_view(page), "a checkpoint opened by its URL is scrolled out of the timeline"
    page.keyboard.press("j")
    selected(page, last // 2 + 1)
    assert selected_in_view(page)


def test_the_node_drawer_follows_an_instance_through_the_timeline(page: Page, demo: Any, shot: Any) -> None:
    run_id = demo.ids["research"]
    cps = demo.api(f"/api/runs/{run_id}/checkpoints")["checkpoints"]
    made = next(c["seq"] for c in cps if "model#2" in c["node_states"])   # the third model call is due
    last = cps[-1]["seq"]
    page.goto(f"/runs/{run_id}?cp={last}&node=model")
    drawer = page.locator("#drawer")
    drawer.locator("details.instance > summary", has_text="model#2").get_by_role("link", name="follow this one").click()
    expect(page).to_have_url(re.compile(rf"[?&]cp={last}&node=model%232$"))
    expect(drawer.locator("details.instance > summary")).to_have_text(re.compile(r"^model#2 "))

    # stepped to before the instance exists: the drawer stays, and says so
    page.locator(f'.timeline a.cp-link[data-seq="{made - 1}"]').click()
    selected(page, made - 1)
    expect(drawer).to_contain_text(f"model#2 does not exist yet at checkpoint #{made - 1}")
    expect(drawer.locator("details.instance")).to_have_count(0)
    expect(page).to_have_url(re.compile(r"[?&]node=model%232(&|$)"))
    page.keyboard.press("k")
    selected(page, made - 2)
    expect(drawer).to_contain_text(f"does not exist yet at checkpoint #{made - 2}")

    # and follows it again where it exists
    page.locator(f'.timeline a.cp-link[data-seq="{made}"]').click()
    selected(page, made)
    expect(drawer.locator("details.instance > summary")).to_have_text(re.compile(r"^model#2 "))
    expect(drawer).not_to_contain_text("does not exist yet")
    shot()
    page.go_back()
    selected(page, made - 2)
    expect(drawer).to_contain_text("does not exist yet")

    # closing the drawer is what drops the node
    drawer.get_by_role("link", name="close").click()
    expect(page.locator("#drawer")).to_have_count(0)
    expect(page).not_to_have_url(re.compile(r"node="))
    page.keyboard.press("j")
    selected(page, made - 1)
    expect(page.locator("#drawer")).to_have_count(0)


def test_a_checkpoint_chosen_from_the_keyboard_keeps_the_focus(page: Page, demo: Any, shot: Any) -> None:
    run_id = demo.ids["research"]
    page.goto(f"/runs/{run_id}?cp=2")
    link = page.locator('.timeline a.cp-link[data-seq="3"]')
    link.focus()
    page.keyboard.press("Enter")
    selected(page, 3)
    # Tab goes on from the timeline, not from the top of the page
    expect(page.locator(".timeline a.cp-link.selected")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.locator('.timeline a.cp-link[data-seq="4"]')).to_be_focused()


def test_a_fold_is_kept_for_its_tree_on_its_page_only(page: Page, demo: Any, shot: Any) -> None:
    """Stepping through a run keeps its state tree folded as left; another run's state (every
    tree's root is "$") is not folded by it."""
    run_id = demo.ids["research"]
    page.goto(f"/runs/{run_id}?cp=3")
    root = page.locator('.state details.j[data-path="$"]').first
    expect(root).to_have_attribute("open", "")
    root.locator("summary").first.click()
    expect(root).not_to_have_attribute("open", "")
    page.keyboard.press("ArrowRight")
    selected(page, 4)
    expect(page.locator('.state details.j[data-path="$"]').first).not_to_have_attribute("open", "")
    other = next(r["id"] for r in demo.api("/api/runs?per_page=50")["runs"] if r["id"] != run_id)
    page.goto(f"/runs/{other}")
    expect(page.locator('.state details.j[data-path="$"]').first).to_have_attribute("open", "")
    shot()


def test_quick_key_presses_each_step_once(page: Page, demo: Any, shot: Any) -> None:
    """Ten presses faster than the pages come back move ten checkpoints, and the page shown
    at the end is the last one asked for; presses right after a click step on from the
    checkpoint clicked, whose page is still on its way. No page is asked for while another
    loads (htmx would abort that one, and report it as an error)."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    aborted: list[str] = []
    page.on("requestfailed", lambda r: aborted.append(r.url))
    run_id = demo.ids["fan_out"]
    last = demo.api(f"/api/runs/{run_id}")["run"]["head_seq"]
    page.goto(f"/runs/{run_id}?cp={last - 12}")
    selected(page, last - 12)
    for _ in range(10):
        page.keyboard.press("j")
    selected(page, last - 2)
    page.wait_for_timeout(300)   # nothing older swaps in afterwards
    selected(page, last - 2)

    page.locator(f'.timeline a.cp-link[data-seq="{last - 10}"]').click()
    for _ in range(5):
        page.keyboard.press("j")
    selected(page, last - 5)
    page.wait_for_timeout(300)
    selected(page, last - 5)
    assert errors == [] and aborted == [], (errors, aborted)


def test_panels_opened_or_closed_stay_so_while_stepping(page: Page, demo: Any, shot: Any) -> None:
    """A panel opened (the effect journal, loaded once opened) or closed (the state) stays so
    at the next checkpoint, loaded there once; another run's page opens with its defaults."""
    run_id = demo.ids["research"]
    page.goto(f"/runs/{run_id}?cp=3")
    journal, state = page.locator("details[data-panel=journal]"), page.locator("details[data-panel=state]")
    journal.locator("> summary").click()
    expect(journal.locator(".panel-body table")).to_be_visible()
    state.locator("> summary").click()
    expect(state).not_to_have_attribute("open", "")
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "journal" in r.url else None)
    page.keyboard.press("j")
    selected(page, 4)
    expect(journal).to_have_attribute("open", "")
    expect(journal.locator(".panel-body table")).to_be_visible()
    expect(state).not_to_have_attribute("open", "")
    page.wait_for_timeout(300)
    assert len(asked) == 1 and asked[0].endswith("/panels/journal?cp=4"), asked
    other = demo.ids["fan_out"]
    page.goto(f"/runs/{other}")
    expect(page.locator("details[data-panel=state]")).to_have_attribute("open", "")
    expect(page.locator("details[data-panel=journal]")).not_to_have_attribute("open", "")
