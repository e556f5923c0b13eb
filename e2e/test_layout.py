"""The run page keeps to the window's width whatever the values it shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import ROOT, harness_server
from playwright.sync_api import Page, expect


def test_a_long_value_with_no_space_does_not_widen_the_run_page(page: Page, tmp_path: Path, shot: Any) -> None:
    db = f"sqlite:///{tmp_path / 'long.db'}"
    pythonpath = os.pathsep.join([str(ROOT), str(Path(__file__).resolve().parent)])
    made = subprocess.run([sys.executable, "-m", "server.cli", "run", "long_values:graph", "--input", "{}",
                           "--db", db, "--json"], cwd=ROOT, env={**os.environ, "PYTHONPATH": pythonpath},
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    run_id = json.loads(made.stdout)["run"]["id"]
    page.set_viewport_size({"width": 1400, "height": 900})
    with harness_server(["serve", "long_values:graph", "--db", db], tmp_path, pythonpath) as url:
        page.goto(f"{url}/runs/{run_id}")
        changes = page.locator("table.diff")
        expect(changes).to_contain_text("summary")   # the last checkpoint: join wrote the long summary
        shot()
        wide = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert wide[0] <= wide[1], f"the page is {wide[0]} px wide in a {wide[1]} px window"
        # the effect journal too: its effect name, request, result and key
        page.locator("details[data-panel=journal] > summary").click()
        expect(page.locator("details[data-panel=journal] table")).to_contain_text("eff_")
        wide = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert wide[0] <= wide[1], f"with the journal open the page is {wide[0]} px wide in a {wide[1]} px window"
