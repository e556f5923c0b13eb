"""Browser tests: Playwright drives Debian's Chromium against a live ``harness demo``.

The server is a real subprocess on a free port over a fresh demo store (one per test
session); each journey saves a screenshot to ``e2e/artifacts/`` (git-ignored).
Run on their own: ``pytest e2e`` (Playwright keeps an event loop for its session).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


class Demo:
    """The live demo server: its base URL and the ids of what it seeded."""

    def __init__(self, url: str, ids: dict[str, Any], folder: Path):
        self.url, self.ids, self.folder = url, ids, folder

    def api(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return json.loads(r.read())


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    folder = tmp_path_factory.mktemp("demo")
    ids_file = folder / "ids.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "server.cli", "demo", "--port", "0", "--dir", str(folder),
                             "--write-ids", str(ids_file)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = None
    deadline = time.monotonic() + 90
    assert proc.stdout is not None
    while time.monotonic() < deadline and url is None:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                raise RuntimeError(f"harness demo exited: {proc.stderr.read() if proc.stderr else ''}")
            continue
        found = re.search(r"(http://127\.0\.0\.1:\d+)", line)
        url = found.group(1) if found else None
    assert url, "harness demo printed no URL"
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/runs", timeout=2)
            break
        except OSError:
            time.sleep(0.1)
    ids = json.loads(ids_file.read_text()) if ids_file.exists() else {}
    try:
        yield Demo(url, ids, folder)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def shot(page: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Call ``shot()`` to save a screenshot named after the test (also saved at the end)."""
    ARTIFACTS.mkdir(exist_ok=True)

    def take(suffix: str = "") -> None:
        page.screenshot(path=str(ARTIFACTS / f"{request.node.name}{suffix}.png"), full_page=True)

    yield take
    take("-end")
