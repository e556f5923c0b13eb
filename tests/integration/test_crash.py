"""Crash tests: real processes killed with SIGKILL, then resumed from the SQLite file.

A worker subprocess (``crash_worker.py``) runs the A/B graph of ``crash_graphs`` on a
SQLite file and dies at a chosen point; this process (or another worker) opens the same
file and resumes. The effect function appends a line to ``effects.log`` on every call,
so a repeated side effect shows up as a second line.

(a) killed right after A's effect returned: ``resume`` recovers the *same* run (the
    owner's PID is dead, so its lease counts as expired) and the effect is not repeated;
(b) killed inside the effect: the journal entry stays STARTED, so the effect is in doubt:
    non-idempotent → the run is INTERRUPTED with an ``in_doubt`` interrupt (answer with a
    result, retry with the same key, or abort); idempotent → re-executed with the same key;
(c) an effect made before ``ctx.interrupt``, the process killed while the run is paused,
    and the run resumed by another process: the effect happened once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import crash_graphs
import pytest
from harness_checks import assert_trace_consistent, effect_entries, statuses

from runtime import InvalidAnswer, NodeStatus, RunKind, RunStatus, Runtime, SqlStore
from runtime import EffectStatus, InterruptKind
from runtime.core.trace import node_states_from_events

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]                 # the repository root
WORKER = HERE / "crash_worker.py"
PROCESS_TIMEOUT = 60.0                 # any worker process must end within this
RESUME_TIMEOUT = 30.0
SIGKILLED = -signal.SIGKILL
GRAPH_KINDS = ["async", "sync"]


# ---------------------------------------------------------------- helpers

def _env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(ROOT), str(HERE)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[crash_graphs.WORKER_ENV] = "1"
    return env


def _command(db_url: str, kind: str, flags: list[str], *args: str) -> list[str]:
    return [sys.executable, str(WORKER), db_url, kind, ",".join(flags), *args]


def worker(db_url: str, kind: str, flags: list[str], *args: str,
           killed: bool) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """Run a worker to its end; check it was SIGKILLed (or exited 0); parse its JSON line."""
    proc = subprocess.run(_command(db_url, kind, flags, *args), cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=PROCESS_TIMEOUT, check=False)
    expected = SIGKILLED if killed else 0
    assert proc.returncode == expected, (
        f"worker exited with {proc.returncode}, expected {expected}\n"
        f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc, (json.loads(lines[-1]) if lines else None)


class Scene:
    """One SQLite file and work directory shared by the worker processes and this one."""

    def __init__(self, tmp_path: Path, kind: str):
        self.kind = kind
        self.workdir = tmp_path / "world"
        self.workdir.mkdir()
        self.db_url = f"sqlite:///{tmp_path / 'crash.db'}"
        self.graph = crash_graphs.GRAPHS[kind].compile()
        self._rt: Runtime | None = None

    def input(self, **extra: Any) -> str:
        return json.dumps({"workdir": str(self.workdir), **extra})

    def start(self, flags: list[str], killed: bool = True, **input: Any) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
        return worker(self.db_url, self.kind, flags, "start", self.input(**input), killed=killed)

    @property
    def rt(self) -> Runtime:
        """A Runtime in this (the test) process, on the same file, opened on first use."""
        if self._rt is None:
            self._rt = Runtime(store=SqlStore(self.db_url), graphs=[self.graph])
        return self._rt

    def only_run_id(self) -> str:
        runs = self.rt.store.list_runs()
        assert len(runs) == 1, runs
        return runs[0].id

    def log(self, name: str) -> list[dict[str, Any]]:
        return crash_graphs.read_log(str(self.workdir), name)

    def journal(self, run_id: str) -> list:
        return effect_entries(self.rt.store.journal([run_id]), "a", "charge")

    async def resume(self, run_id: str, *answer: Any):
        return await asyncio.wait_for(self.rt.resume(run_id, *answer), RESUME_TIMEOUT)

    async def final_state(self, run_id: str) -> dict[str, Any]:
        cps = await self.rt.history(run_id)
        return (await self.rt.state_at(cps[-1].id)).model_dump()

    def close(self) -> None:
        if self._rt is not None:
            self._rt.close()


@pytest.fixture(params=GRAPH_KINDS)
def scene(request: pytest.FixtureRequest, tmp_path: Path):
    s = Scene(tmp_path, request.param)
    yield s
    s.close()


def _owner_pid(owner: str | None) -> int:
    assert owner, "the crashed run has no lease owner"
    return int(owner.split(":")[1])


async def _assert_recovered(scene: Scene, run_id: str, crashed_pid: int, *, b_finished: bool) -> None:
    """What must hold once a run whose process died after A's effect returned is resumed."""
    rt = scene.rt
    before = rt.store.get_run(run_id)
    assert before.status == RunStatus.RUNNING        # nobody ended it: its process died
    assert _owner_pid(before.lease_owner) == crashed_pid
    # the trace shows A (and B, if it had not finished) still running when the process died
    assert node_states_from_events(scene.graph.order, await rt.events(run_id)) == {
        "a": NodeStatus.RUNNING, "b": NodeStatus.SUCCEEDED if b_finished else NodeStatus.RUNNING}
    effects = scene.log("effects.log")
    assert len(effects) == 1
    assert statuses(scene.journal(run_id)) == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]

    run = await scene.resume(run_id)

    # the same run recovered: no continuation
    assert run.id == run_id
    assert run.kind == RunKind.MAIN
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert rt.store.child_runs(run_id) == []
    assert run.lease_owner is None
    # the effect was not executed again: its recorded result was served
    assert scene.log("effects.log") == effects
    journal = scene.journal(run_id)
    assert statuses(journal) == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
    assert journal[-1].key == effects[0]["key"]
    # A re-executed from its start in this process; B only if it had not finished
    a_runs = scene.log("a.log")
    assert [r["pid"] for r in a_runs] == [crashed_pid, os.getpid()]
    b_runs = scene.log("b.log")
    assert [r["pid"] for r in b_runs] == ([crashed_pid] if b_finished else [crashed_pid, os.getpid()])
    assert await scene.final_state(run_id) == {
        "workdir": str(scene.workdir), "idempotent": False, "ask": False,
        "a": "A", "b": "B", "receipt": "receipt-1", "approved": None}
    # the trace records the recovery, and every node that was in flight as lost
    events = await rt.events(run_id)
    assert [e.type for e in events if e.type.startswith("run.")] == [
        "run.created", "run.claim", "run.recover", "run.succeed"]
    lost = {e.node for e in events if e.type == "node.lost"}
    assert lost == ({"a"} if b_finished else {"a", "b"}), (
        "recovery did not mark every node that was running when the process died as lost: "
        + "; ".join(f"{e.seq} {e.type} {e.node or ''}" for e in events))
    await assert_trace_consistent(rt, scene.graph, run_id)


# ---------------------------------------------------------------- (a) killed after the effect returned

@pytest.mark.parametrize("b_state", ["b_finished", "b_in_flight"])
async def test_kill_after_effect_recovers_the_same_run_without_repeating_it(scene: Scene, b_state: str) -> None:
    b_flag = "a_waits_b" if b_state == "b_finished" else "b_hangs"
    _, out = scene.start(["kill_after_effect", b_flag])
    assert out is None  # it died inside the run: start never returned
    run_id = scene.only_run_id()
    crashed_pid = scene.log("a.log")[0]["pid"]
    await _assert_recovered(scene, run_id, crashed_pid, b_finished=b_state == "b_finished")


def _start_and_kill_at_marker(scene: Scene) -> int:
    """Start a worker whose A hangs after its effect; SIGKILL it once its marker file appears."""
    proc = subprocess.Popen(_command(scene.db_url, scene.kind, ["hang_after_effect", "a_waits_b"],
                                     "start", scene.input()),
                            cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        marker = scene.workdir / "marker"
        end = time.monotonic() + PROCESS_TIMEOUT
        while not marker.exists():
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"worker exited with {proc.returncode} before the marker appeared\n{out}\n{err}")
            assert time.monotonic() < end, "the marker never appeared"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=PROCESS_TIMEOUT)
        assert proc.returncode == SIGKILLED
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=PROCESS_TIMEOUT)
    return proc.pid


async def test_parent_sigkill_after_marker_recovers_the_same_run(scene: Scene) -> None:
    pid = _start_and_kill_at_marker(scene)
    run_id = scene.only_run_id()
    await _assert_recovered(scene, run_id, pid, b_finished=True)


# ---------------------------------------------------------------- (b) killed inside the effect: in doubt

async def _crash_in_effect(scene: Scene, **input: Any) -> tuple[str, str]:
    """Start a run whose process dies inside the effect function; returns (run id, effect key)."""
    scene.start(["kill_in_effect", "a_waits_b"], **input)
    run_id = scene.only_run_id()
    effects = scene.log("effects.log")
    assert len(effects) == 1
    journal = scene.journal(run_id)
    assert statuses(journal) == [EffectStatus.STARTED]   # no outcome was recorded
    assert journal[0].key == effects[0]["key"]
    assert scene.rt.store.get_run(run_id).status == RunStatus.RUNNING
    return run_id, effects[0]["key"]


async def _in_doubt_pause(scene: Scene, run_id: str, key: str) -> str:
    """Recover the run: a non-idempotent in-doubt effect pauses it. Returns the interrupt id."""
    paused = await scene.resume(run_id)
    assert paused.id == run_id
    assert paused.kind == RunKind.MAIN
    assert paused.status == RunStatus.INTERRUPTED, paused.error
    assert len(scene.log("effects.log")) == 1          # not called again on its own
    pending = await scene.rt.interrupts(run_id)
    assert len(pending) == 1
    intr = pending[0]
    assert intr.kind == InterruptKind.IN_DOUBT
    assert intr.node == "a"
    value = intr.payload["value"]
    assert value["effect"] == "charge"
    assert value["key"] == key
    assert value["request"] == {"amount": 5}
    head = scene.rt.store.checkpoints(run_id)[-1]
    assert head.node_states == {"a": NodeStatus.INTERRUPTED, "b": NodeStatus.SUCCEEDED}
    return intr.id


async def test_in_doubt_effect_answered_with_a_result_is_not_called_again(scene: Scene) -> None:
    run_id, key = await _crash_in_effect(scene)
    interrupt_id = await _in_doubt_pause(scene, run_id, key)

    with pytest.raises(InvalidAnswer):
        await scene.resume(run_id, {"action": "maybe"})
    assert scene.rt.store.get_run(run_id).status == RunStatus.INTERRUPTED

    done = await scene.resume(run_id, {"action": "result", "result": "receipt-from-a-person"})

    assert done.id == run_id
    assert done.status == RunStatus.SUCCEEDED, done.error
    assert len(scene.log("effects.log")) == 1
    journal = scene.journal(run_id)
    assert statuses(journal) == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
    assert [e.key for e in journal] == [key, key]
    assert journal[-1].result == "receipt-from-a-person"
    state = await scene.final_state(run_id)
    assert (state["a"], state["b"], state["receipt"]) == ("A", "B", "receipt-from-a-person")
    answered = await scene.rt.interrupts(run_id, pending=False)
    assert [(i.id, i.status.value) for i in answered] == [(interrupt_id, "answered")]
    assert len(scene.log("b.log")) == 1                # B succeeded before the crash: never re-run
    await assert_trace_consistent(scene.rt, scene.graph, run_id)


async def test_in_doubt_effect_answered_retry_calls_it_again_with_the_same_key(scene: Scene) -> None:
    run_id, key = await _crash_in_effect(scene)
    await _in_doubt_pause(scene, run_id, key)

    done = await scene.resume(run_id, {"action": "retry"})

    assert done.id == run_id
    assert done.status == RunStatus.SUCCEEDED, done.error
    effects = scene.log("effects.log")
    assert [e["key"] for e in effects] == [key, key]
    assert effects[1]["pid"] == os.getpid()
    journal = scene.journal(run_id)
    assert statuses(journal) == [EffectStatus.STARTED, EffectStatus.STARTED, EffectStatus.SUCCEEDED]
    assert {e.key for e in journal} == {key}
    state = await scene.final_state(run_id)
    assert (state["a"], state["b"], state["receipt"]) == ("A", "B", "receipt-2")
    await assert_trace_consistent(scene.rt, scene.graph, run_id)


async def test_in_doubt_effect_answered_abort_fails_the_run(scene: Scene) -> None:
    run_id, key = await _crash_in_effect(scene)
    await _in_doubt_pause(scene, run_id, key)

    done = await scene.resume(run_id, {"action": "abort"})

    assert done.id == run_id
    assert done.status == RunStatus.FAILED
    assert done.error is not None and done.error["class"] == "in_doubt_effect"
    assert len(scene.log("effects.log")) == 1
    assert statuses(scene.journal(run_id)) == [EffectStatus.STARTED]
    await assert_trace_consistent(scene.rt, scene.graph, run_id)


async def test_idempotent_in_doubt_effect_is_re_executed_with_the_same_key(scene: Scene) -> None:
    run_id, key = await _crash_in_effect(scene, idempotent=True)

    done = await scene.resume(run_id)

    assert done.id == run_id
    assert done.kind == RunKind.MAIN
    assert done.status == RunStatus.SUCCEEDED, done.error
    assert await scene.rt.interrupts(run_id, pending=False) == []   # nobody was asked
    effects = scene.log("effects.log")
    assert [e["key"] for e in effects] == [key, key]
    assert [e["pid"] for e in effects][1] == os.getpid()
    journal = scene.journal(run_id)
    assert statuses(journal) == [EffectStatus.STARTED, EffectStatus.STARTED, EffectStatus.SUCCEEDED]
    assert {e.key for e in journal} == {key}
    state = await scene.final_state(run_id)
    assert (state["a"], state["b"], state["receipt"]) == ("A", "B", "receipt-2")
    await assert_trace_consistent(scene.rt, scene.graph, run_id)


# ---------------------------------------------------------------- (c) effect before an interrupt, resumed elsewhere

async def test_effect_before_interrupt_runs_once_across_processes(scene: Scene) -> None:
    _, out = scene.start(["kill_when_paused"], ask=True)
    assert out is not None and out["status"] == "interrupted"
    run_id = out["run_id"]
    assert scene.only_run_id() == run_id
    effects = scene.log("effects.log")
    assert len(effects) == 1
    paused = scene.rt.store.get_run(run_id)
    assert paused.status == RunStatus.INTERRUPTED
    pending = await scene.rt.interrupts(run_id)
    assert [(i.kind, i.node) for i in pending] == [(InterruptKind.USER, "a")]
    assert pending[0].payload["value"] == {"question": "approve the charge?"}

    _, out2 = worker(scene.db_url, scene.kind, [], "resume", run_id, json.dumps({"approve": True}),
                          killed=False)

    assert out2 == {"run_id": run_id, "status": "succeeded", "kind": "main"}
    pids = [r["pid"] for r in scene.log("a.log")]
    assert len(pids) == 2 and pids[0] != pids[1]         # A re-ran from its start in the second process
    assert scene.log("effects.log") == effects           # ... but its effect was served from the journal
    assert len(scene.log("b.log")) == 1
    run = scene.rt.store.get_run(run_id)
    assert run.status == RunStatus.SUCCEEDED
    assert scene.rt.store.child_runs(run_id) == []
    journal = scene.journal(run_id)
    assert statuses(journal) == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
    assert journal[-1].key == effects[0]["key"]
    state = await scene.final_state(run_id)
    assert (state["a"], state["b"], state["receipt"], state["approved"]) == ("A", "B", "receipt-1", True)
    await assert_trace_consistent(scene.rt, scene.graph, run_id)
