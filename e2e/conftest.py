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
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

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

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """POST JSON to the API (CSRF-exempt); the decoded answer."""
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def run_count(self) -> int:
        """How many runs the store holds (every page of ``/api/runs``)."""
        total, page = 0, 1
        while True:
            got = self.api(f"/api/runs?per_page=500&page={page}")
            total += len(got["runs"])
            if not got["has_next"]:
                return total
            page += 1

    def wait_status(self, run_id: str, *statuses: str, timeout: float = 20.0) -> dict[str, Any]:
        """The run once its status is one of ``statuses`` (polled: runs are driven in the server)."""
        deadline = time.monotonic() + timeout
        while True:
            run: dict[str, Any] = self.api(f"/api/runs/{run_id}")["run"]
            if run["status"] in statuses:
                return run
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} is {run['status']}, not {' or '.join(statuses)}, "
                                     f"after {timeout:.0f} s")
            time.sleep(0.05)


@contextmanager
def harness_server(args: list[str], folder: Path, pythonpath: str = str(ROOT)) -> Iterator[str]:
    """``harness ARGS --port 0`` as a subprocess, until the block ends: its base URL once it answers."""
    env = {**os.environ, "PYTHONPATH": pythonpath}
    log = (folder / "server.log").open("w+", encoding="utf-8")   # a file: a chatty server never blocks on a pipe
    proc = subprocess.Popen([sys.executable, "-m", "server.cli", *args, "--port", "0"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        yield _wait_for_url(proc, log)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        log.close()


@contextmanager
def served_while_running(graph: str, folder: Path) -> Iterator[Demo]:
    """A run of ``busy_graphs:GRAPH`` driven by ``harness run``, served by ``harness serve``
    over the same store, once it is running (its id as ``ids[GRAPH]``)."""
    db = f"sqlite:///{folder / f'{graph}.db'}"
    pythonpath = os.pathsep.join([str(ROOT), str(Path(__file__).resolve().parent)])
    with harness_server(["serve", f"busy_graphs:{graph}", "--db", db], folder, pythonpath) as url:
        runner = subprocess.Popen([sys.executable, "-m", "server.cli", "run", f"busy_graphs:{graph}", "--db", db,
                                   "--input", "{}"], cwd=ROOT, env={**os.environ, "PYTHONPATH": pythonpath},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            demo = Demo(url, {}, folder)
            deadline = time.monotonic() + 30
            while not (runs := demo.api("/api/runs")["runs"]):
                assert time.monotonic() < deadline, f"the {graph} run never started"
                time.sleep(0.05)
            demo.ids[graph] = runs[0]["id"]
            demo.wait_status(runs[0]["id"], "running")
            yield demo
        finally:
            runner.kill()
            runner.wait()


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    folder = tmp_path_factory.mktemp("demo")
    ids_file = folder / "ids.json"
    with harness_server(["demo", "--dir", str(folder), "--write-ids", str(ids_file)], folder) as url:
        ids = json.loads(ids_file.read_text()) if ids_file.exists() else {}
        yield Demo(url, ids, folder)


@pytest.fixture
def release(tmp_path: Path) -> Iterator[Demo]:
    """A run of ``e2e/mixed_questions.py`` paused on four questions of different shapes
    (made by ``harness run``), served by ``harness serve`` over its own store."""
    db = f"sqlite:///{tmp_path / 'release.db'}"
    pythonpath = os.pathsep.join([str(ROOT), str(Path(__file__).resolve().parent)])
    made = subprocess.run([sys.executable, "-m", "server.cli", "run", "mixed_questions:graph", "--input", "{}",
                           "--db", db, "--json"], cwd=ROOT, env={**os.environ, "PYTHONPATH": pythonpath},
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    run = json.loads(made.stdout)["run"]
    assert run["status"] == "interrupted", run
    with harness_server(["serve", "mixed_questions:graph", "--db", db], tmp_path, pythonpath) as url:
        yield Demo(url, {"release": run["id"]}, tmp_path)


def _wait_for_url(proc: subprocess.Popen[str], log: Any) -> str:
    """The URL the server prints once seeded, after it answers."""
    url = None
    deadline = time.monotonic() + 90
    assert proc.stdout is not None
    while time.monotonic() < deadline and url is None:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"harness demo exited: {log.read()}")
            continue
        found = re.search(r"(http://127\.0\.0\.1:\d+)", line)
        url = found.group(1) if found else None
    assert url, "harness demo printed no URL"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/runs", timeout=2):
                return url
        except urllib.error.HTTPError:
            return url   # it answers (a server that asks for a token says 401)
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"harness demo did not answer at {url}")


@pytest.fixture(scope="session")
def base_url(demo: Demo) -> str:
    """The demo server, so pages can be visited by path (this also replaces pytest-playwright's own
    ``base_url`` fixture, a method on a plugin object, which pytest 9 warns about)."""
    return demo.url


@pytest.fixture(autouse=True)
def no_browser_errors(page: Any) -> Iterator[None]:
    """Every journey fails on an uncaught script error or a server error (5xx) seen by the browser."""
    page.set_default_timeout(10_000)   # a stuck action fails fast instead of after Playwright's 30 s
    # and what a page is expected to show gets as long: a page the server renders for a live run
    # can take seconds on two busy cores, which the 5 s default turned into failures
    expect.set_options(timeout=10_000)
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"script error: {exc}"))
    page.on("response", lambda r: problems.append(f"{r.status} from {r.request.method} {r.url}")
            if r.status >= 500 else None)
    yield
    assert not problems, problems


@pytest.fixture
def shot(page: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Call ``shot()`` to save a screenshot named after the test (also saved at the end)."""
    ARTIFACTS.mkdir(exist_ok=True)

    def take(suffix: str = "") -> None:
        page.screenshot(path=str(ARTIFACTS / f"{request.node.name}{suffix}.png"), full_page=True)

    yield take
    take("-end")
