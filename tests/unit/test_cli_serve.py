"""``harness serve`` and ``harness demo`` from the command line: the token rule off
loopback, clear one-line mistakes, and a real server that answers."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from server.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_serving_off_loopback_without_a_token_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARNESS_TOKEN", raising=False)
    code = main(["serve", "--db", str(tmp_path / "h.db"), "--host", "0.0.0.0", "--port", "0"])
    err = capsys.readouterr().err
    assert code != 0
    assert "refusing to serve on 0.0.0.0 without a token" in err and "Traceback" not in err


def test_a_bad_port_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--db", str(tmp_path / "h.db"), "--port", "99999"]) != 0
    assert "--port must be from 0 to 65535" in capsys.readouterr().err


def test_a_demo_folder_that_holds_a_store_already_is_refused(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "demo.db").write_bytes(b"")
    assert main(["demo", "--dir", str(tmp_path), "--port", "0"]) != 0
    assert "exists already" in capsys.readouterr().err


def test_serve_answers_with_the_runs_page_and_requires_its_token(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_TOKEN": "alice:s3cret"}
    proc = subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "examples.chat:graph", "--db",
                             str(tmp_path / "h.db"), "--port", "0"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/runs", line)
        assert found, line + (proc.stderr.read() if proc.stderr else "")
        url = found.group(0)
        hint = proc.stdout.readline()   # how to send it, without the secret itself
        assert f"open {url}?token=SECRET once in a browser" in hint and "Authorization: Bearer SECRET" in hint
        assert "s3cret" not in hint
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(url, timeout=2)
            except urllib.error.HTTPError as e:
                assert e.code == 401   # a token was given: it is required, on loopback too
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
                continue
            raise AssertionError("served without the token")
        request = urllib.request.Request(url, headers={"Authorization": "Bearer s3cret"})
        with urllib.request.urlopen(request, timeout=5) as r:
            assert r.status == 200 and b"Runs" in r.read()
        with urllib.request.urlopen(f"{url}?token=s3cret", timeout=5) as r:   # as the hint says
            assert r.status == 200 and b"Runs" in r.read()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()



def _serve(db: Path, port: int) -> tuple[subprocess.Popen[str], int, str]:
    """``harness serve`` on ``port``: the process, the port it listens on and, when it failed to
    start (it has ended then, and the port is 0), what it said on stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "--db", str(db), "--port", str(port)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    found = re.search(r"http://127\.0\.0\.1:(\d+)/runs", proc.stdout.readline())
    if not found:
        _, err = proc.communicate(timeout=20)
        return proc, 0, err
    return proc, int(found.group(1)), ""


def _stop(proc: subprocess.Popen[str]) -> None:
    """Ctrl-C to a server that still runs, until it exits."""
    if proc.returncode is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


def test_serve_restarts_on_the_port_it_left_while_a_browser_still_held_a_connection(tmp_path: Path) -> None:
    first, port, err = _serve(tmp_path / "h.db", 0)
    assert port, err
    browser = http.client.HTTPConnection("127.0.0.1", port, timeout=10)   # kept alive, as a browser's
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                browser.request("GET", "/runs")
                browser.getresponse().read()
                break
            except OSError:
                assert time.monotonic() < deadline
                browser.close()
                time.sleep(0.1)
        _stop(first)   # the server closes that connection first: its side of it waits in TIME_WAIT
        second, again, err = _serve(tmp_path / "h.db", port)
        _stop(second)
        assert again == port, err
    finally:
        browser.close()


def test_serve_on_a_port_another_process_listens_on_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc, port, err = _serve(tmp_path / "h.db", taken.getsockname()[1])
        _stop(proc)
    assert port == 0 and proc.returncode != 0
    assert "cannot listen on 127.0.0.1:" in err and "Address already in use" in err and "Traceback" not in err

SLOW_GRAPH = '''
import asyncio
from pydantic import BaseModel
from runtime import Graph

class S(BaseModel):
    done: bool = False

async def wait(state):
    await asyncio.sleep(60)
    return {"done": True}

graph = Graph("slow", S)
graph.add_node("wait", wait)
'''


def ctrl_c_once_running(proc: subprocess.Popen[str], db: Path) -> tuple[list[Any], str]:
    """Ctrl-C to ``proc`` once a run in ``db`` is RUNNING: those runs, and what it said on stderr."""
    from runtime import RunStatus, SqlStore

    try:
        deadline = time.monotonic() + 30
        runs: list[Any] = []
        while not runs:   # until the run is recorded as running
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
            if db.exists():
                store = SqlStore(f"sqlite:///{db}")
                try:
                    runs = [r for r in store.list_runs() if r.status == RunStatus.RUNNING]
                finally:
                    store.close()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return runs, err


def test_ctrl_c_during_run_names_the_run_it_cancelled(tmp_path: Path) -> None:
    """Ctrl-C ends the run cancelled (as a caller that stops waiting) and says which run,
    with the command that continues it: there may be many runs in the store."""
    from runtime import RunStatus, SqlStore

    (tmp_path / "slowmod.py").write_text(SLOW_GRAPH)
    db = tmp_path / "h.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # a terminal's Ctrl-C, whoever started the tests: a shell's background job (`make test-unit &`)
    # ignores SIGINT and its children inherit that, so Python would never see the signal
    proc = subprocess.Popen([sys.executable, "-m", "server.cli", "run", "slowmod:graph", "--db", str(db)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    runs, err = ctrl_c_once_running(proc, db)
    run_id = runs[0].id
    assert proc.returncode == 130
    assert f"harness: run {run_id} cancelled; continue it with: harness resume {run_id}" in err
    assert "Traceback" not in err
    store = SqlStore(f"sqlite:///{db}")
    try:
        assert store.get_run(run_id).status == RunStatus.CANCELLED
    finally:
        store.close()


ASK_THEN_WAIT = '''
import asyncio
from pydantic import BaseModel
from runtime import Graph

class S(BaseModel):
    ok: bool = False

async def ask(state, ctx):
    return {"ok": bool(await ctx.interrupt({"question": "go?"}))}

async def wait(state):
    await asyncio.sleep(60)
    return {}

graph = Graph("ask_then_wait", S)
graph.add_node("ask", ask)
graph.add_node("wait", wait, after=["ask"])
'''


def test_ctrl_c_during_resume_names_the_run_it_cancelled_and_how_to_leave_it_to_a_worker(tmp_path: Path) -> None:
    from runtime import RunStatus, SqlStore

    (tmp_path / "askmod.py").write_text(ASK_THEN_WAIT)
    db = tmp_path / "h.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    made = subprocess.run([sys.executable, "-m", "server.cli", "--json", "run", "askmod:graph", "--db", str(db)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    run_id = json.loads(made.stdout)["run"]["id"]
    proc = subprocess.Popen([sys.executable, "-m", "server.cli", "resume", run_id, "--response", "true",
                             "--db", str(db)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    running, err = ctrl_c_once_running(proc, db)   # the answered run, driven in that process
    assert [r.id for r in running] == [run_id]
    assert proc.returncode == 130 and "Traceback" not in err
    assert (f"harness: run {run_id} cancelled; continue it with: harness resume {run_id} "
            f"(--queue leaves it to a worker)") in err
