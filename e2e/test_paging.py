"""Paging through the runs list and the approvals: more than a page of each, in a store of
their own (``harness serve`` over runs made in one process)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from conftest import ROOT, Demo, harness_server

#: more than a page of runs (50) and of questions (25; each run asks four)
RUNS = 53

MAKE = """
import asyncio, sys
from runtime import Runtime, SqlStore
from mixed_questions import graph
async def main():
    rt = Runtime(SqlStore(sys.argv[1]), graphs=[graph])
    for _ in range(int(sys.argv[2])):
        await rt.start(graph, {})
    rt.close()
asyncio.run(main())
"""


@pytest.fixture
def crowded(tmp_path: Path) -> Iterator[Demo]:
    db = f"sqlite:///{tmp_path / 'many.db'}"
    pythonpath = os.pathsep.join([str(ROOT), str(Path(__file__).resolve().parent)])
    made = subprocess.run([sys.executable, "-c", MAKE, db, str(RUNS)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": pythonpath}, timeout=120)
    assert made.returncode == 0, made.stderr
    with harness_server(["serve", "mixed_questions:graph", "--db", db], tmp_path, pythonpath) as url:
        yield Demo(url, {}, tmp_path)


def test_the_pagers_move_through_runs_and_questions(page: Page, crowded: Demo, shot: Any) -> None:
    page.goto(crowded.url + "/runs")
    rows = page.locator("#runs tbody tr")
    expect(rows).to_have_count(50)
    first = rows.first.locator("a").first.inner_text()
    page.get_by_role("link", name="older →").click()
    expect(page).to_have_url(re.compile(r"[?&]page=2$"))
    expect(rows).to_have_count(RUNS - 50)
    assert first not in page.locator("#runs").inner_text()
    page.get_by_role("link", name="← newer").click()
    expect(page).to_have_url(re.compile(r"[?&]page=1$"))
    expect(rows).to_have_count(50)
    expect(rows.first.locator("a").first).to_have_text(first)

    # what is typed and not sent filters nothing, also when the list refreshes itself
    page.locator("#runs-filter input[name=q]").fill("no-such-run")
    page.wait_for_timeout(3500)
    expect(rows).to_have_count(50)

    page.goto(crowded.url + "/inbox")
    questions = page.locator("#inbox tbody tr")
    expect(questions).to_have_count(25)
    top = questions.first.get_attribute("data-interrupt")
    page.get_by_role("link", name="older →").click()
    expect(page).to_have_url(re.compile(r"[?&]page=2$"))
    expect(page.locator("#inbox .pager span")).to_have_text("page 2")
    expect(questions.first).not_to_have_attribute("data-interrupt", top or "")
    # the page shown follows what changes: a run cancelled elsewhere takes its questions away
    shown = questions.first.get_attribute("data-interrupt")
    run_id = questions.first.locator("td:nth-child(2) a").inner_text()
    crowded.post(f"/api/runs/{run_id}/cancel", {"reason": "enough"})
    expect(page.locator(f'#inbox tr[data-interrupt="{shown}"]')).to_have_count(0)
    expect(page.locator("#inbox .pager span")).to_have_text("page 2")
    shot()
