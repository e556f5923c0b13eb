"""The reason typed into a busy run's cancel box survives the page's live updates and is
the reason the run is cancelled with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Demo, harness_server
from playwright.sync_api import Page, expect

REASON = "ops: stop it, the supplier changed prices"


@pytest.fixture
def busy(tmp_path: Path) -> Iterator[Demo]:
    """A run of ``e2e/busy_graphs.py`` driven by ``harness run`` (a checkpoint every few hundredths
    of a second, for a minute), served by ``harness serve`` over the same store."""
    db = f"sqlite:///{tmp_path / 'busy.db'}"
    pythonpath = os.pathsep.join([str(ROOT), str(Path(__file__).resolve().parent)])
    env = {**os.environ, "PYTHONPATH": pythonpath}
    runner = subprocess.Popen([sys.executable, "-m", "server.cli", "run", "busy_graphs:graph", "--db", db,
                               "--input", json.dumps({"items": list(range(400))})], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with harness_server(["serve", "busy_graphs:graph", "--db", db], tmp_path, pythonpath) as url:
            demo = Demo(url, {}, tmp_path)
            demo.ids["busy"] = _first_run(demo)
            yield demo
    finally:
        runner.kill()
        runner.wait()


def _first_run(demo: Demo) -> str:
    deadline = time.monotonic() + 30
    while not (runs := demo.api("/api/runs")["runs"]):
        assert time.monotonic() < deadline, "the busy run never started"
        time.sleep(0.05)
    run_id: str = runs[0]["id"]
    demo.wait_status(run_id, "running")
    return run_id


def test_a_reason_typed_while_the_run_updates_live_is_kept_and_recorded(page: Page, busy: Demo, shot: Any) -> None:
    run_id = busy.ids["busy"]
    page.goto(f"{busy.url}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("running")
    # count the live refreshes that swap the actions bar in again while the reason is typed
    page.evaluate("window.barSwaps = 0; document.body.addEventListener('htmx:oobAfterSwap', e => "
                  "{ if (e.detail.target && e.detail.target.id === 'run-actions') window.barSwaps++; })")
    box = page.locator("#run-actions input[name=reason]")
    box.click()
    box.press_sequentially(REASON, delay=60)   # about 2.5 s of typing, key by key
    page.wait_for_timeout(1000)                # and a moment of thought before cancelling
    assert page.evaluate("window.barSwaps") >= 2, "no live update arrived while typing"
    expect(box).to_have_value(REASON)
    expect(box).to_be_focused()
    shot("-typed")

    page.on("dialog", lambda dialog: dialog.accept())
    page.locator("#run-actions").get_by_role("button", name="Cancel").click()
    run = busy.wait_status(run_id, "cancelled")
    assert run["error"]["message"] == REASON, run["error"]
    expect(page.locator("#run-meta")).to_contain_text(REASON)
