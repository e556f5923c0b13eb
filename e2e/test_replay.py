"""Replaying a run under another registered version of its graph, from the run page."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Page, expect

REPORT_URL = re.compile(r"/runs/(run_[0-9a-f]+)/report$")


def test_replay_shows_the_divergence_report(page: Page, demo: Any, shot: Any) -> None:
    support = demo.ids["support"]
    run = demo.api(f"/api/runs/{support}")["run"]
    page.goto(f"/runs/{support}")
    page.locator(".actions").get_by_role("link", name="Replay…").click()
    expect(page).to_have_url(re.compile(rf"/runs/{support}/replay$"))

    # the demo registers a second version of the support graph: it is offered beside the run's own,
    # each named by the reference it was registered with
    options = page.locator("#version option")
    expect(options.first).to_have_text(f"examples.demo_support:graph ({run['graph_version']}) · this run's own version")
    expect(options).to_have_count(2)
    expect(options.nth(1)).to_contain_text("examples.demo_support:graph_v2 (")
    other = options.nth(1).get_attribute("value")
    assert other and other != run["graph_version"]
    page.locator("#version").select_option(other)
    page.get_by_role("button", name="Replay").click()

    expect(page).to_have_url(REPORT_URL)
    replay_id = REPORT_URL.search(page.url).group(1)   # type: ignore[union-attr]
    heading = page.get_by_role("heading", level=1)
    expect(heading).to_contain_text(replay_id)
    # the replay is driven in the background: the report follows it, without a reload, until it ends
    demo.wait_status(replay_id, "succeeded")
    expect(heading.locator(".badge")).to_have_text("succeeded")
    expect(page.locator("main")).not_to_contain_text("still running")
    expect(page.locator("main")).to_contain_text(f"Re-executed {support} from its start "
                                                 f"(graph v{run['graph_version']}) with graph v{other}")
    expect(page.locator("main")).to_contain_text("Some nodes diverged.")

    # node by node: the new version drafts with another request and routes another way
    verdicts = {"classify": "same", "lookup": "same", "draft": "different", "page": "same", "route": "different"}
    rows = page.locator("table.report tbody tr")
    expect(rows).to_have_count(len(verdicts))
    expect(rows.locator("td:first-child")).to_have_text(list(verdicts))
    expect(rows.locator("td:nth-child(2)")).to_have_text(list(verdicts.values()))
    route = rows.filter(has=page.locator("td:first-child", has_text=re.compile("^route$")))
    expect(route).to_have_class(re.compile("verdict-different"))
    expect(route).to_contain_text('"standard-normal"')
    expect(route).to_contain_text('"paying-normal"')
    draft = rows.filter(has=page.locator("td:first-child", has_text=re.compile("^draft$")))
    expect(draft).to_contain_text("llm.draft")
    expect(draft).to_contain_text("changed")
    shot()

    # the replay is a branch of the thread and its page links back to the report
    page.get_by_role("link", name=replay_id).click()
    expect(page).to_have_url(re.compile(rf"/runs/{replay_id}$"))
    expect(page.locator("#run-head .meta")).to_contain_text("replay of")
    page.locator(".actions").get_by_role("link", name="Divergence report").click()
    expect(page).to_have_url(re.compile(rf"/runs/{replay_id}/report$"))
