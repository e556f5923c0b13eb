"""Compensation crash tests: "Compensations run once each in reverse order, also when the
process is SIGKILLed in the middle of compensating and then resumed."

A worker subprocess (``compensation_worker.py``) runs the chain ``n1 -> n2 -> n3`` (effects
step1, step2, step3, each with a module-level compensation) on a real SQLite file; n3 fails,
so the run ends FAILED. The worker then compensates and is SIGKILLed at a precise point:

(a) between two compensations: right after step3's COMPENSATED entry is committed, before
    step2's COMPENSATING is written. A new process skips step3 ("already") and undoes
    step2 and step1: nothing is in doubt, nothing runs twice.
(b) inside step2's compensation, before its external action: step2's COMPENSATING entry is
    on disk (forced before the call) and its outcome is not. A new process must not run it
    again silently: it reports step2 "in_doubt" and leaves step1 alone; only
    ``retry_in_doubt=True`` undoes step2 (once, with the same key) and then step1.
(c) inside step3's compensation, after its external action, before COMPENSATED is recorded:
    also in doubt. ``retry_in_doubt=True`` calls step3's undo a second time *with the same
    idempotency key* (``<effect key>:undo``) -- the outside world is told it is a repeat, as
    with an in-doubt effect -- and the rest once each.

In every case a further ``compensate`` reports everything "already" and the log is unchanged.
Also: the opt-in ``compensate_on=["failed"]`` policy (subprocess), and that a fork's mocked
effects are never compensated (in-process, SQLite).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import compensation_worker as cw
import pytest
from harness_checks import assert_trace_consistent

from runtime import InvalidRequest, NodeStatus, RunKind, RunStatus, Runtime, SqlStore
from runtime import EffectStatus

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]                 # the repository root
WORKER = HERE / "compensation_worker.py"
PROCESS_TIMEOUT = 30.0                 # any worker process must end within this
SIGKILLED = -signal.SIGKILL
STEPS = ["step1", "step2", "step3"]
UNDO_ORDER = ["step3", "step2", "step1"]
S = EffectStatus


# ---------------------------------------------------------------- helpers

class World:
    """One SQLite file and log shared by the worker processes and this one."""

    def __init__(self, tmp_path: Path):
        self.db_url = f"sqlite:///{tmp_path / 'compensation.db'}"
        self.log_path = tmp_path / "world.log"
        self.marker = tmp_path / "marker"
        self._rt: Runtime | None = None

    def env(self, flags: Sequence[str]) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE), *filter(None, [env.get("PYTHONPATH")])])
        env[cw.WORKER_ENV] = "1"
        env[cw.LOG_ENV] = str(self.log_path)
        env[cw.MARKER_ENV] = str(self.marker)
        env[cw.FLAGS_ENV] = ",".join(flags)
        return env

    def command(self, *args: str) -> list[str]:
        return [sys.executable, str(WORKER), self.db_url, *args]

    def worker(self, *args: str, flags: Sequence[str] = (), killed: bool = False) -> list[dict[str, Any]]:
        """Run a worker to its end (SIGKILLed, or exit 0); its JSON lines."""
        proc = subprocess.run(self.command(*args), cwd=ROOT, env=self.env(flags), capture_output=True,
                              text=True, timeout=PROCESS_TIMEOUT, check=False)
        expected = SIGKILLED if killed else 0
        assert proc.returncode == expected, (
            f"worker {args} exited with {proc.returncode}, expected {expected}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]

    def worker_killed_at_marker(self, *args: str, flags: list[str]) -> tuple[int, list[dict[str, Any]]]:
        """Start a worker, SIGKILL it from here once it wrote the marker; (its pid, its JSON lines)."""
        proc = subprocess.Popen(self.command(*args), cwd=ROOT, env=self.env(flags),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            end = time.monotonic() + PROCESS_TIMEOUT
            while not self.marker.exists():
                if proc.poll() is not None:
                    out, err = proc.communicate()
                    pytest.fail(f"worker exited with {proc.returncode} before the marker appeared\n{out}\n{err}")
                assert time.monotonic() < end, "the marker never appeared"
                time.sleep(0.01)
            assert self.marker.read_text() == str(proc.pid)
            os.kill(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate(timeout=PROCESS_TIMEOUT)
            assert proc.returncode == SIGKILLED
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=PROCESS_TIMEOUT)
        return proc.pid, [json.loads(line) for line in out.splitlines() if line.startswith("{")]

    @property
    def rt(self) -> Runtime:
        """A Runtime in this (the test) process, on the same file, opened on first use."""
        if self._rt is None:
            self._rt = Runtime(store=SqlStore(self.db_url), graphs=[cw.graph])
        return self._rt

    def log(self) -> list[dict[str, Any]]:
        return cw.read_log(self.log_path)

    def undos(self) -> list[dict[str, Any]]:
        return [r for r in self.log() if r["op"] == "undo"]

    def effect_keys(self) -> dict[str, str]:
        return {r["step"]: r["key"] for r in self.log() if r["op"] == "do"}

    def compensation_statuses(self, run_id: str) -> dict[str, list[EffectStatus]]:
        """Per step, its journal statuses (the effect's own and its compensation's), in order."""
        out: dict[str, list[EffectStatus]] = {s: [] for s in STEPS}
        for e in self.rt.store.journal([run_id]):
            out[e.name].append(e.status)
        return out

    def close(self) -> None:
        if self._rt is not None:
            self._rt.close()


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    w = World(tmp_path)
    # compensations run in this process too: they log to the same file, and never misbehave
    monkeypatch.setenv(cw.LOG_ENV, str(w.log_path))
    monkeypatch.delenv(cw.FLAGS_ENV, raising=False)
    yield w
    w.close()


def _steps(report: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["name"], s["status"]) for s in report["steps"]]


def _only_run(world: World) -> str:
    runs = world.rt.store.list_runs()
    assert len(runs) == 1, runs
    return runs[0].id


DONE = [S.STARTED, S.SUCCEEDED]


async def _assert_fully_compensated_once(world: World, run_id: str, do_lines: list[dict[str, Any]]) -> None:
    """Each undo exactly once (unless told otherwise by the caller), newest first, with the
    key ``<effect key>:undo`` and the effect's recorded result; then a further compensate
    is a no-op."""
    keys = world.effect_keys()
    undos = world.undos()
    assert [u["step"] for u in undos] == UNDO_ORDER
    assert [u["key"] for u in undos] == [keys[s] + ":undo" for s in UNDO_ORDER]
    assert [u["result"] for u in undos] == [f"{s}-receipt" for s in UNDO_ORDER]
    assert [r for r in world.log() if r["op"] == "do"] == do_lines     # no effect ran again
    await _assert_nothing_more(world, run_id)


async def _assert_nothing_more(world: World, run_id: str) -> None:
    before = world.log()
    again = (await world.rt.compensate(run_id)).to_json()
    assert _steps(again) == [(s, "already") for s in UNDO_ORDER]
    assert again["complete"] is True
    assert world.log() == before
    run = world.rt.store.get_run(run_id)
    assert run.status == RunStatus.FAILED                # compensation never changes how a run ended
    assert run.lease_owner is None                       # the last compensator released its lease
    with pytest.raises(InvalidRequest, match="compensated"):
        await world.rt.resume(run_id)                    # an undone run is not continued
    await assert_trace_consistent(world.rt, cw.graph.compile(), run_id)


def _started_failed(lines: list[dict[str, Any]]) -> str:
    assert lines and lines[0]["status"] == "failed", lines
    return str(lines[0]["run_id"])


# ---------------------------------------------------------------- (a) killed between two compensations

@pytest.mark.slow
async def test_kill_between_compensations_resumes_with_the_next_one(world: World) -> None:
    lines = world.worker("start_and_compensate", flags=["kill_between_undos"], killed=True)
    run_id = _started_failed(lines)
    assert len(lines) == 1                               # it died inside compensate: no report
    do_lines = [r for r in world.log() if r["op"] == "do"]
    assert [r["step"] for r in do_lines] == STEPS
    assert [u["step"] for u in world.undos()] == ["step3"]
    assert world.compensation_statuses(run_id) == {
        "step1": DONE, "step2": DONE, "step3": [*DONE, S.COMPENSATING, S.COMPENSATED]}

    # a new process: step3 is skipped, step2 and step1 are undone; nothing was in doubt
    (resumed,) = world.worker("compensate", run_id)
    report = resumed["report"]
    assert _steps(report) == [("step3", "already"), ("step2", "compensated"), ("step1", "compensated")]
    assert report["complete"] is True
    pids = [u["pid"] for u in world.undos()]
    assert pids[0] == do_lines[0]["pid"] and pids[1] == pids[2] != pids[0]   # step2, step1: the new process
    assert world.compensation_statuses(run_id) == {s: [*DONE, S.COMPENSATING, S.COMPENSATED] for s in STEPS}
    await _assert_fully_compensated_once(world, run_id, do_lines)


# ---------------------------------------------------------------- (b) killed inside step2's undo, before its action

@pytest.mark.slow
async def test_kill_inside_a_compensation_leaves_it_in_doubt_until_retried(world: World) -> None:
    killed_pid, lines = world.worker_killed_at_marker("start_and_compensate", flags=["hang_in_undo_step2"])
    run_id = _started_failed(lines)
    do_lines = [r for r in world.log() if r["op"] == "do"]
    assert [r["step"] for r in do_lines] == STEPS
    # step3 was undone; step2's compensation started (its COMPENSATING is on disk) and never acted
    assert [(u["step"], u["pid"]) for u in world.undos()] == [("step3", killed_pid)]
    assert world.compensation_statuses(run_id) == {
        "step1": DONE, "step2": [*DONE, S.COMPENSATING], "step3": [*DONE, S.COMPENSATING, S.COMPENSATED]}
    crashed = world.rt.store.get_run(run_id)
    assert crashed.status == RunStatus.FAILED
    assert crashed.lease_owner is not None and f":{killed_pid}:" in crashed.lease_owner

    # a new process does not run step2's undo again on its own, and does not touch step1
    (first,) = world.worker("compensate", run_id)
    report = first["report"]
    assert _steps(report) == [("step3", "already"), ("step2", "in_doubt")]
    assert report["complete"] is False
    assert "retry_in_doubt" in report["steps"][1]["error"]
    assert [u["step"] for u in world.undos()] == ["step3"]
    assert world.compensation_statuses(run_id)["step2"] == [*DONE, S.COMPENSATING]
    assert world.compensation_statuses(run_id)["step1"] == DONE

    # asked again, still in doubt (asking is not retrying)
    assert _steps((await world.rt.compensate(run_id)).to_json()) == [("step3", "already"), ("step2", "in_doubt")]
    assert [u["step"] for u in world.undos()] == ["step3"]

    # told to retry: step2's undo runs once, with the same key, then step1's
    retried = (await world.rt.compensate(run_id, retry_in_doubt=True)).to_json()
    assert _steps(retried) == [("step3", "already"), ("step2", "compensated"), ("step1", "compensated")]
    assert retried["complete"] is True
    assert retried["steps"][1]["key"] == world.effect_keys()["step2"]
    assert [u["pid"] for u in world.undos()] == [killed_pid, os.getpid(), os.getpid()]
    assert world.compensation_statuses(run_id) == {
        "step1": [*DONE, S.COMPENSATING, S.COMPENSATED],
        "step2": [*DONE, S.COMPENSATING, S.COMPENSATING, S.COMPENSATED],   # the retry, same identity
        "step3": [*DONE, S.COMPENSATING, S.COMPENSATED]}
    await _assert_fully_compensated_once(world, run_id, do_lines)


# ---------------------------------------------------------------- (c) killed after step3's undo acted, before it was recorded

@pytest.mark.slow
async def test_kill_after_a_compensation_acted_retries_it_with_the_same_key(world: World) -> None:
    lines = world.worker("start_and_compensate", flags=["kill_after_undo_step3"], killed=True)
    run_id = _started_failed(lines)
    do_lines = [r for r in world.log() if r["op"] == "do"]
    first_undo = world.undos()
    assert [u["step"] for u in first_undo] == ["step3"]           # the outside world saw it ...
    assert world.compensation_statuses(run_id)["step3"] == [*DONE, S.COMPENSATING]   # ... the journal did not

    # in doubt: nothing runs, not even the older steps
    (first,) = world.worker("compensate", run_id)
    assert _steps(first["report"]) == [("step3", "in_doubt")]
    assert world.undos() == first_undo
    assert world.compensation_statuses(run_id) == {
        "step1": DONE, "step2": DONE, "step3": [*DONE, S.COMPENSATING]}

    retried = (await world.rt.compensate(run_id, retry_in_doubt=True)).to_json()
    assert _steps(retried) == [(s, "compensated") for s in UNDO_ORDER]
    undos = world.undos()
    # step3's undo was called twice (it is in doubt: at least once), both with the same key,
    # so the outside world can tell the second call is a repeat; the others ran once each
    keys = world.effect_keys()
    assert [(u["step"], u["key"]) for u in undos] == [
        ("step3", keys["step3"] + ":undo"), ("step3", keys["step3"] + ":undo"),
        ("step2", keys["step2"] + ":undo"), ("step1", keys["step1"] + ":undo")]
    assert [r for r in world.log() if r["op"] == "do"] == do_lines
    await _assert_nothing_more(world, run_id)


# ---------------------------------------------------------------- the opt-in policy

@pytest.mark.slow
async def test_compensate_on_failed_undoes_each_effect_once_newest_first(world: World) -> None:
    lines = world.worker("start", "failed")
    run_id = _started_failed(lines)
    run = world.rt.store.get_run(run_id)
    assert run.options.get("compensate_on") == ["failed"]
    assert run.error is not None and run.error["class"] == "semantic"
    log = world.log()
    assert [(r["op"], r["step"]) for r in log] == [("do", s) for s in STEPS] + [("undo", s) for s in UNDO_ORDER]
    assert len({r["pid"] for r in log}) == 1             # all of it in the worker, before start returned
    assert world.compensation_statuses(run_id) == {s: [*DONE, S.COMPENSATING, S.COMPENSATED] for s in STEPS}
    await _assert_fully_compensated_once(world, run_id, log[:3])


# ---------------------------------------------------------------- mocked effects are never compensated

async def test_a_forks_mocked_effects_are_never_compensated(world: World) -> None:
    rt = world.rt
    source = await rt.start(cw.graph, {})
    assert source.status == RunStatus.FAILED
    do_lines = world.log()
    assert [(r["op"], r["step"]) for r in do_lines] == [("do", s) for s in STEPS]
    after_n1 = [c for c in await rt.history(source.id)
                if c.node_states["n1"] == NodeStatus.SUCCEEDED and c.node_states["n2"] != NodeStatus.SUCCEEDED]
    assert after_n1, "no checkpoint between n1 and n2"

    fork = await rt.fork(after_n1[-1].id)               # effects are mocked by default
    assert fork.kind == RunKind.FORK
    assert fork.status == RunStatus.FAILED               # n3 fails again, on its mocked step3
    fork_journal = rt.store.journal([fork.id])
    assert [(e.name, e.status, e.source) for e in fork_journal] == [
        ("step2", S.MOCKED, f"run:{source.id}"), ("step3", S.MOCKED, f"run:{source.id}")]
    assert world.log() == do_lines                       # the fork called nothing

    report = await rt.compensate(fork.id)
    assert report.steps == []                            # nothing of its own was live
    assert report.complete
    assert world.log() == do_lines                       # ... so nothing was undone
    assert rt.store.journal([fork.id]) == fork_journal
    assert rt.store.journal([source.id])[-1].status == S.SUCCEEDED   # the source's effects untouched

    # the fork was not allowed to undo the source's live effects; the source itself still can
    undone = await rt.compensate(source.id)
    assert [(s.name, s.status) for s in undone.steps] == [(s, "compensated") for s in UNDO_ORDER]
    await _assert_fully_compensated_once(world, source.id, do_lines)
