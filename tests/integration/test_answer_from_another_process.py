"""A person answers, with ``harness resume`` in a process of its own, a question of a run
this process drives while the run still works on another branch: the answer reaches the
run through the store, the node that asked goes on at once, and the command returns when
the run ends (ADR 0011). And an answer left for a process killed before it took it is taken
by the process that recovers the run."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import answer_worker
import pytest

from runtime import NodeStatus, Runtime, RunStatus, SqlStore

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


async def test_harness_resume_in_another_process_answers_a_running_run(tmp_path: Path, monkeypatch) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    monkeypatch.setenv("HARNESS_ANSWER_MARKER", str(tmp_path / "calls"))
    monkeypatch.setenv(answer_worker.HANG_ENV, "1")   # work goes on until it is unset
    rt = Runtime(SqlStore(url), heartbeat=0.1)
    proc = None
    try:
        started = asyncio.create_task(rt.start(answer_worker.GRAPH, {}))
        deadline = time.monotonic() + 30
        while not rt.store.list_runs() or not rt.store.interrupts(rt.store.list_runs()[0].id):
            assert time.monotonic() < deadline, "the question was never asked"
            await asyncio.sleep(0.01)
        run_id = rt.store.list_runs()[0].id
        [question] = rt.store.interrupts(run_id)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "server.cli", "--db", url, "--json", "resume", run_id, "--response", '"yes"',
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        deadline = time.monotonic() + 30
        while rt.store.find_checkpoint(run_id).node_states.get("ship") != NodeStatus.SUCCEEDED:
            assert time.monotonic() < deadline, "the answer never reached the run"
            assert proc.returncode is None, (await proc.stderr.read()).decode()
            await asyncio.sleep(0.02)
        assert rt.store.get_run(run_id).status == RunStatus.RUNNING   # work still goes on
        assert proc.returncode is None   # the command waits for the run to pause or end
        monkeypatch.delenv(answer_worker.HANG_ENV)
        assert (await started).status == RunStatus.SUCCEEDED
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()
        assert json.loads(out)["run"]["status"] == "succeeded"
        assert rt.store.interrupt(question.id).answer == "yes"
        assert sorted((await rt.thread_state(run_id)).out) == ["ask:yes", "shipped", "work"]
        assert "run.interrupt" not in [e.type for e in rt.store.events(run_id)]
    finally:
        monkeypatch.delenv(answer_worker.HANG_ENV, raising=False)
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
        rt.close()


@pytest.mark.slow
async def test_an_answer_left_for_a_killed_process_is_taken_by_the_recovery(tmp_path: Path,
                                                                            monkeypatch) -> None:
    """SIGKILL the process driving the run while an answer waits for it in the store: the
    process that recovers the run takes the answer, and the run goes on without pausing."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    marker = tmp_path / "calls"
    monkeypatch.setenv("HARNESS_ANSWER_MARKER", str(marker))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]), answer_worker.HANG_ENV: "1"}
    worker = subprocess.Popen([sys.executable, str(HERE / "answer_worker.py"), url], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    rt = Runtime(SqlStore(url), graphs=[answer_worker.GRAPH], lease_ttl=2.0)
    try:
        deadline = time.monotonic() + 30
        while not (marker.exists() and rt.store.list_runs() and rt.store.interrupts(rt.store.list_runs()[0].id)):
            assert time.monotonic() < deadline and worker.poll() is None, worker.stderr.read().decode()
            await asyncio.sleep(0.02)
        run_id = rt.store.list_runs()[0].id
        [question] = rt.store.interrupts(run_id)
        assert rt.store.send_answers(run_id, {question.id: "yes"}, "ada", time.time())
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        while time.time() <= (rt.store.get_run(run_id).lease_expires_at or 0):
            await asyncio.sleep(0.1)
        done = await asyncio.wait_for(rt.resume(run_id), 30)
        assert done.status == RunStatus.SUCCEEDED, done.error
        assert sorted((await rt.thread_state(run_id)).out) == ["ask:yes", "shipped", "work"]
        events = rt.store.events(run_id)
        assert [e.data for e in events if e.type == "interrupt.answered"] == [{"interrupt_id": question.id, "by": "ada"}]
        assert "run.interrupt" not in [e.type for e in events]
        assert rt.store.sent_answers(run_id) == {}
        assert marker.read_text() == "work\nwork\n"   # lost with the process, run again once
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
        worker.stderr.close()
        rt.close()
