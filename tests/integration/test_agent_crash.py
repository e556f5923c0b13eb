"""Crash tests for node instances: map items, loop iterations and a long ReAct loop.

A worker subprocess (``agent_worker.py``) runs a graph of ``agent_graphs`` on a SQLite
file; this process (or another worker) opens the same file and resumes. Kill points are
marker files: the worker writes ``<workdir>/marker`` at the chosen point and blocks, and
this process SIGKILLs it. Every call of an effect function appends a line to
``effects.log``, every node execution one to ``nodes.log``.

1. The seed's A/B experiment with A and B as the two items of a map: A performs a counted
   effect, B fails on the first run. The run fails; its continuation re-runs only B, and
   A's effect happened once. Also with the worker SIGKILLed right after A's effect
   returned: the same run is recovered from this process, then continued once B may
   succeed.
2. The same with A and B as iterations 0 and 1 of a loop.
3. A ReAct loop of 51 iterations (50 tool calls) SIGKILLed at five points chosen by a
   seeded random (in the model, before, inside and after the tool's effect), resumed by a
   new process each time: every tool effect happened exactly once, every iteration's
   instances succeeded once, and the conversation is complete and in order. With fewer
   ``max_iterations`` than it needs, the loop fails with ``limit_exceeded``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import agent_graphs
import pytest
from harness_checks import effect_entries, statuses

from runtime import (
    EffectStatus,
    ExecutableGraph,
    InterruptKind,
    NodeStatus,
    Run,
    RunKind,
    RunStatus,
    Runtime,
    SqlStore,
    TraceEvent,
)
from runtime.core.states import NodeEvent, next_node_status
from runtime.graph.instances import instance_name

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]                 # the repository root
WORKER = HERE / "agent_worker.py"
PROCESS_TIMEOUT = 90.0                 # any worker process must end (or reach its marker) within this
RESUME_TIMEOUT = 60.0
SIGKILLED = -signal.SIGKILL
KINDS = ["async", "sync"]
S, F, P, K = NodeStatus.SUCCEEDED, NodeStatus.FAILED, NodeStatus.PENDING, NodeStatus.SKIPPED


# ---------------------------------------------------------------- processes

def _env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(ROOT), str(HERE)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[agent_graphs.WORKER_ENV] = "1"
    return env


@dataclass
class Killed:
    pid: int
    point: str


@dataclass
class Exited:
    pid: int
    out: dict[str, Any]


class Scene:
    """One SQLite file and work directory shared by the worker processes and this one."""

    def __init__(self, tmp_path: Path, graph: str):
        self.graph_name = graph
        self.workdir = tmp_path / "world"
        self.workdir.mkdir()
        self.marker = self.workdir / "marker"
        self.db_url = f"sqlite:///{tmp_path / 'agent.db'}"
        self.graph = agent_graphs.compiled(graph)
        self._rt: Runtime | None = None

    def input(self, **extra: Any) -> str:
        return json.dumps({"workdir": str(self.workdir), **extra})

    def _popen(self, flags: Sequence[str], hang_at: str | None, *args: str) -> subprocess.Popen[str]:
        cmd = [sys.executable, str(WORKER), self.db_url, self.graph_name, ",".join(flags), hang_at or "-", *args]
        return subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def worker(self, flags: Sequence[str], hang_at: str | None, *args: str,
               before_kill: Callable[[], None] | None = None) -> Killed | Exited:
        """Run a worker until it exits, or until it reaches ``hang_at``: then SIGKILL it
        (after ``before_kill``, if given, has returned)."""
        self.marker.unlink(missing_ok=True)
        proc = self._popen(flags, hang_at, *args)
        try:
            end = time.monotonic() + PROCESS_TIMEOUT
            while not self.marker.exists():
                if proc.poll() is not None:
                    out, err = proc.communicate()
                    assert proc.returncode == 0, f"worker exited with {proc.returncode}\n{out}\n{err}"
                    lines = [line for line in out.splitlines() if line.startswith("{")]
                    assert lines, f"worker printed no outcome\n{out}\n{err}"
                    return Exited(proc.pid, json.loads(lines[-1]))
                assert time.monotonic() < end, f"the worker neither reached {hang_at} nor exited"
                time.sleep(0.01)
            marker = json.loads(self.marker.read_text())
            assert marker == {"point": hang_at, "pid": proc.pid}
            if before_kill is not None:
                before_kill()
            proc.send_signal(signal.SIGKILL)
            out, err = proc.communicate(timeout=PROCESS_TIMEOUT)
            assert proc.returncode == SIGKILLED, f"worker exited with {proc.returncode}\n{out}\n{err}"
            return Killed(proc.pid, marker["point"])
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=PROCESS_TIMEOUT)

    def finish_worker(self, flags: Sequence[str], *args: str) -> Exited:
        done = self.worker(flags, None, *args)
        assert isinstance(done, Exited)
        return done

    def kill_at(self, point: str, flags: Sequence[str], *args: str,
                before_kill: Callable[[], None] | None = None) -> Killed:
        killed = self.worker(flags, point, *args, before_kill=before_kill)
        assert isinstance(killed, Killed), f"the worker exited before reaching {point}: {killed}"
        return killed

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
        return agent_graphs.read_log(str(self.workdir), name)

    def executions(self) -> dict[str, list[int]]:
        """Instance -> the pids of the processes that executed it, in order."""
        out: dict[str, list[int]] = {}
        for r in self.log("nodes.log"):
            out.setdefault(r["node"], []).append(r["pid"])
        return out

    def allow_b(self) -> None:
        (self.workdir / agent_graphs.B_FLAG).write_text("yes")

    def recorded(self, run_id: str, node: str, type_: str) -> bool:
        return any(e.type == type_ and e.node == node for e in self.rt.store.events(run_id))

    def wait_recorded(self, run_id: str, node: str, type_: str) -> None:
        end = time.monotonic() + PROCESS_TIMEOUT
        while not self.recorded(run_id, node, type_):
            assert time.monotonic() < end, f"{type_} of {node} was never recorded"
            time.sleep(0.01)

    async def resume(self, run_id: str, *answer: Any) -> Run:
        return await asyncio.wait_for(self.rt.resume(run_id, *answer), RESUME_TIMEOUT)

    async def final_state(self, run_id: str) -> dict[str, Any]:
        cps = await self.rt.history(run_id)
        return (await self.rt.state_at(cps[-1].id)).model_dump()

    def close(self) -> None:
        if self._rt is not None:
            self._rt.close()


@pytest.fixture
def scenes(tmp_path: Path):
    made: list[Scene] = []

    def make(graph: str) -> Scene:
        s = Scene(tmp_path, graph)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


# ---------------------------------------------------------------- checks

def _rebuild(order: Iterable[str], events: Sequence[TraceEvent], upto_seq: int) -> dict[str, NodeStatus]:
    """Node statuses from the trace; instances the trace never mentions are pending."""
    states = {n: P for n in order}
    for ev in events:
        if ev.seq > upto_seq:
            break
        if ev.type == "run.created":
            for n, s in (ev.data.get("inherited") or {}).items():
                states[n] = NodeStatus(s)
        elif ev.type.startswith("node.") and ev.node is not None:
            states[ev.node] = next_node_status(states.get(ev.node, P), NodeEvent(ev.type[5:]))
    return states


async def assert_trace_consistent(rt: Runtime, graph: ExecutableGraph, run_id: str) -> None:
    """Trace ⇔ checkpoints for a run whose graph grows instances: gapless events, linked
    checkpoints, and each checkpoint's statuses are what the trace up to it rebuilds."""
    events = await rt.events(run_id)
    seqs = [e.seq for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), f"run {run_id}: event seqs are not 1..n"
    run = await rt.get_run(run_id)
    assert run.event_seq == seqs[-1]
    cps = await rt.history(run_id)
    assert [c.seq for c in cps] == list(range(len(cps)))
    for prev, cp in zip(cps, cps[1:], strict=False):
        assert cp.parent_id == prev.id
        assert cp.event_seq >= prev.event_seq
    # each checkpoint at its own event, and the latest one against the whole trace
    for cp, upto in [*((c, c.event_seq) for c in cps), (cps[-1], seqs[-1])]:
        rebuilt = _rebuild(graph.order, events, upto)
        unknown = set(rebuilt) - set(cp.node_states)
        assert not unknown, f"checkpoint {cp.seq}: the trace mentions instances it lacks: {sorted(unknown)}"
        differ = {n: (s, rebuilt.get(n, P)) for n, s in cp.node_states.items() if rebuilt.get(n, P) != s}
        assert not differ, f"checkpoint {cp.seq}: (checkpoint, trace) statuses differ: {differ}"
    assert run.head_seq == cps[-1].seq


def _assert_died_at(scene: Scene, run_id: str, killed: Killed) -> None:
    run = scene.rt.store.get_run(run_id)
    assert run.status == RunStatus.RUNNING
    assert run.lease_owner is not None and int(run.lease_owner.split(":")[1]) == killed.pid


def charges(scene: Scene, run_ids: list[str]) -> list:
    return [e for e in scene.rt.store.journal(run_ids) if e.name == "charge"]


def seq_of(events: Sequence[TraceEvent], type_: str, node: str) -> int:
    found = [e.seq for e in events if e.type == type_ and e.node == node]
    assert len(found) == 1, f"{type_} of {node}: {found}"
    return found[0]


def run_events(events: Sequence[TraceEvent]) -> list[str]:
    return [e.type for e in events if e.type.startswith("run.")]


# ---------------------------------------------------------------- 1 and 2: A and B as instances

@dataclass(frozen=True)
class AB:
    """Where A and B live in a graph: the instance names and the state they write."""

    graph: str
    a: str
    b: str
    group: str | None          # a map's group record
    failed_states: dict[str, NodeStatus]
    final_states: dict[str, NodeStatus]
    field: str                 # the append field A and B write


def map_ab(kind: str) -> AB:
    return AB(f"map_{kind}", "work[0]", "work[1]", "work",
              {"work": F, "work[0]": S, "work[1]": F, "finish": P},
              {"work": S, "work[0]": S, "work[1]": S, "finish": S}, "results")


def loop_ab(kind: str) -> AB:
    return AB(f"loop_{kind}", "step", "step#1", None,
              {"step": S, "again": S, "step#1": F, "again#1": P, "finish": P},
              {"step": S, "again": S, "step#1": S, "again#1": K, "finish": S}, "done")


async def _assert_failed_on_b(scene: Scene, ab: AB, run: Run) -> None:
    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert (run.error["class"], run.error.get("node")) == ("transient", ab.b), run.error
    head = (await scene.rt.history(run.id))[-1]
    assert head.node_states == ab.failed_states
    state = (await scene.rt.state_at(head.id)).model_dump()
    assert state[ab.field] == ["A:receipt-A"]
    assert state["finished"] is False


async def _continue_after_b_is_allowed(scene: Scene, ab: AB, failed_id: str, effects: list[dict[str, Any]],
                                       a_pids: list[int]) -> Run:
    """Let B succeed and resume the failed run: a continuation that re-runs B (and what
    follows it) but never A; A's effect stays the single one made."""
    rt = scene.rt
    b_before = scene.executions()[ab.b]
    scene.allow_b()

    cont = await scene.resume(failed_id)

    assert cont.id != failed_id
    assert cont.kind == RunKind.CONTINUATION
    assert cont.parent_run_id == failed_id
    assert cont.status == RunStatus.SUCCEEDED, cont.error
    assert [r.id for r in rt.store.child_runs(failed_id)] == [cont.id]
    assert (await rt.get_run(failed_id)).status == RunStatus.FAILED
    # the effect happened once; A never ran again; B ran once more, here
    assert scene.log("effects.log") == effects
    ran = scene.executions()
    assert ran[ab.a] == a_pids
    assert ran[ab.b] == [*b_before, os.getpid()]
    # the continuation inherited A and never touched it
    events = await rt.events(cont.id)
    assert events[0].type == "run.created"
    assert events[0].data["inherited"].get(ab.a) == "succeeded"
    assert ab.b not in events[0].data["inherited"]
    assert not [e for e in events if e.node == ab.a]
    assert ab.b in {a.node for a in await rt.attempts(cont.id)}
    assert ab.a not in {a.node for a in await rt.attempts(cont.id)}
    # one executed effect in the journal, in the failed run, under A's instance name
    lineage = charges(scene, [failed_id, cont.id])
    assert statuses(lineage) == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
    assert {(e.run_id, e.node) for e in lineage} == {(failed_id, ab.a)}
    assert lineage[-1].key == effects[0]["key"]
    assert rt.store.journal([cont.id]) == []
    # the final state has both instances' writes, in instance order
    head = (await rt.history(cont.id))[-1]
    assert head.node_states == ab.final_states
    state = await scene.final_state(cont.id)
    assert state[ab.field] == ["A:receipt-A", "B:done"]
    assert state["finished"] is True
    await assert_trace_consistent(rt, scene.graph, failed_id)
    await assert_trace_consistent(rt, scene.graph, cont.id)
    return cont


def _assert_one_charge(scene: Scene, run_id: str, ab: AB) -> list[dict[str, Any]]:
    effects = scene.log("effects.log")
    assert [e["request"] for e in effects] == [{"item": "A", "amount": 5}]
    journal = charges(scene, [run_id])
    assert statuses(journal) == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
    assert {e.node for e in journal} == {ab.a}
    assert journal[-1].key == effects[0]["key"]
    return effects


# -- 1a/2a: B fails, the run fails, a continuation re-runs only B

MAP_ORDERS = {"a_first": ["b_waits_a_done"], "b_first": ["a_waits_b_fail"]}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("order", sorted(MAP_ORDERS))
async def test_map_item_failure_then_continuation_reruns_only_that_item(scenes, kind: str, order: str) -> None:
    ab = map_ab(kind)
    scene = scenes(ab.graph)

    done = scene.finish_worker(MAP_ORDERS[order], "start", scene.input())

    assert done.out["status"] == "failed"
    run_id = done.out["run_id"]
    failed = await scene.rt.get_run(run_id)
    await _assert_failed_on_b(scene, ab, failed)
    effects = _assert_one_charge(scene, run_id, ab)
    ran = scene.executions()
    assert (ran[ab.a], ran[ab.b]) == ([done.pid], [done.pid])
    assert "finish" not in ran
    # the forced ordering really happened
    events = await scene.rt.events(run_id)
    b_fail = seq_of(events, "node.fail", ab.b)
    if order == "a_first":
        assert seq_of(events, "node.succeed", ab.a) < b_fail
    else:
        assert b_fail < seq_of(events, "effect.started", ab.a)
    assert seq_of(events, "node.fail", ab.group) > max(b_fail, seq_of(events, "node.succeed", ab.a))

    await _continue_after_b_is_allowed(scene, ab, run_id, effects, [done.pid])


@pytest.mark.parametrize("kind", KINDS)
async def test_loop_iteration_failure_then_continuation_reruns_only_that_iteration(scenes, kind: str) -> None:
    ab = loop_ab(kind)
    scene = scenes(ab.graph)

    done = scene.finish_worker([], "start", scene.input())

    assert done.out["status"] == "failed"
    run_id = done.out["run_id"]
    await _assert_failed_on_b(scene, ab, await scene.rt.get_run(run_id))
    effects = _assert_one_charge(scene, run_id, ab)
    ran = scene.executions()
    assert ran == {"step": [done.pid], "again": [done.pid], "step#1": [done.pid]}

    await _continue_after_b_is_allowed(scene, ab, run_id, effects, [done.pid])
    # B's iteration did not lead back again: the loop ended after it
    assert scene.executions()["finish"] == [os.getpid()]
    assert "again#1" not in scene.executions()


# -- 1b/2b: SIGKILL right after A's effect returned, recovered here, then continued

@pytest.mark.parametrize("kind", KINDS)
async def test_map_sigkill_after_item_effect_with_b_in_flight_recovers_the_same_run(scenes, kind: str) -> None:
    ab = map_ab(kind)
    scene = scenes(ab.graph)

    def b_running() -> None:
        end = time.monotonic() + PROCESS_TIMEOUT
        while ab.b not in scene.executions():
            assert time.monotonic() < end, "B never started"
            time.sleep(0.01)

    killed = scene.kill_at("A:after_effect", ["b_hangs"], "start", scene.input(), before_kill=b_running)
    run_id = scene.only_run_id()
    _assert_died_at(scene, run_id, killed)
    effects = _assert_one_charge(scene, run_id, ab)
    scene.allow_b()

    run = await scene.resume(run_id)

    rt = scene.rt
    assert run.id == run_id and run.kind == RunKind.MAIN  # the same run, recovered
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert rt.store.child_runs(run_id) == []
    assert scene.log("effects.log") == effects            # served from the journal
    assert statuses(charges(scene, [run_id])) == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
    assert scene.executions() == {ab.a: [killed.pid, os.getpid()], ab.b: [killed.pid, os.getpid()],
                                  "finish": [os.getpid()]}
    events = await rt.events(run_id)
    assert run_events(events) == ["run.created", "run.claim", "run.recover", "run.succeed"]
    assert {e.node for e in events if e.type == "node.lost"} == {ab.group, ab.a, ab.b}
    head = (await rt.history(run_id))[-1]
    assert head.node_states == ab.final_states
    state = await scene.final_state(run_id)
    assert (state["results"], state["finished"]) == (["A:receipt-A", "B:done"], True)
    await assert_trace_consistent(rt, scene.graph, run_id)


KILL_ORDERS = {"b_failed_before_effect": ["a_waits_b_fail"], "b_fails_while_a_hangs": ["b_waits_marker"]}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("order", sorted(KILL_ORDERS))
async def test_map_sigkill_after_item_effect_with_b_failed_then_continues(scenes, kind: str, order: str) -> None:
    ab = map_ab(kind)
    scene = scenes(ab.graph)

    def b_failure_recorded() -> None:
        scene.wait_recorded(scene.only_run_id(), ab.b, "node.fail")

    killed = scene.kill_at("A:after_effect", KILL_ORDERS[order], "start", scene.input(),
                           before_kill=b_failure_recorded)
    run_id = scene.only_run_id()
    _assert_died_at(scene, run_id, killed)
    effects = _assert_one_charge(scene, run_id, ab)

    run = await scene.resume(run_id)

    # The run was already failing when its process died: recovery ends it FAILED and does
    # not start A again (a stopping run starts nothing), so A's writes are not in it.
    rt = scene.rt
    assert run.id == run_id and run.kind == RunKind.MAIN
    assert run.status == RunStatus.FAILED
    assert run.error is not None and (run.error["class"], run.error.get("node")) == ("transient", ab.b)
    assert scene.log("effects.log") == effects
    assert scene.executions() == {ab.a: [killed.pid], ab.b: [killed.pid]}
    events = await rt.events(run_id)
    assert run_events(events) == ["run.created", "run.claim", "run.recover", "run.fail"]
    assert {e.node for e in events if e.type == "node.lost"} == {ab.group, ab.a}
    head = (await rt.history(run_id))[-1]
    assert head.node_states[ab.b] == F and head.node_states["finish"] == P
    assert head.node_states[ab.a] != S
    await assert_trace_consistent(rt, scene.graph, run_id)
    scene.allow_b()

    cont = await scene.resume(run_id)

    # the continuation runs A again, which is served its recorded effect, and B
    assert cont.kind == RunKind.CONTINUATION and cont.parent_run_id == run_id
    assert cont.status == RunStatus.SUCCEEDED, cont.error
    assert scene.log("effects.log") == effects
    assert scene.executions() == {ab.a: [killed.pid, os.getpid()], ab.b: [killed.pid, os.getpid()],
                                  "finish": [os.getpid()]}
    lineage = charges(scene, [run_id, cont.id])
    assert statuses(lineage) == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
    assert {(e.run_id, e.node) for e in lineage} == {(run_id, ab.a)}
    assert rt.store.journal([cont.id]) == []
    head = (await rt.history(cont.id))[-1]
    assert head.node_states == ab.final_states
    state = await scene.final_state(cont.id)
    assert (state["results"], state["finished"]) == (["A:receipt-A", "B:done"], True)
    await assert_trace_consistent(rt, scene.graph, cont.id)


@pytest.mark.parametrize("kind", KINDS)
async def test_loop_sigkill_after_iteration_effect_recovers_then_continues(scenes, kind: str) -> None:
    ab = loop_ab(kind)
    scene = scenes(ab.graph)

    killed = scene.kill_at("A:after_effect", [], "start", scene.input())
    # B's iteration had not been created when the process died: recovery gets to it
    run_id = scene.only_run_id()
    assert scene.executions() == {"step": [killed.pid]}
    # the trace shows A still running when the process died
    events = await scene.rt.events(run_id)
    assert _rebuild(scene.graph.order, events, events[-1].seq) == {
        "step": NodeStatus.RUNNING, "again": P, "finish": P}
    effects = _assert_one_charge(scene, run_id, ab)

    run = await scene.resume(run_id)

    assert run.id == run_id and run.kind == RunKind.MAIN
    await _assert_failed_on_b(scene, ab, run)
    assert scene.log("effects.log") == effects
    assert scene.executions() == {"step": [killed.pid, os.getpid()], "again": [os.getpid()],
                                  "step#1": [os.getpid()]}
    events = await scene.rt.events(run_id)
    assert run_events(events)[-2:] == ["run.recover", "run.fail"]
    assert {e.node for e in events if e.type == "node.lost"} == {"step"}
    await assert_trace_consistent(scene.rt, scene.graph, run_id)

    await _continue_after_b_is_allowed(scene, ab, run_id, effects, [killed.pid, os.getpid()])


# ---------------------------------------------------------------- 3: a long ReAct loop, killed at random points

TARGET = agent_graphs.REACT_TARGET
KILLS = 5
PHASES = ["model", "before_effect", "in_effect", "after_effect"]


def kill_points(seed: int) -> list[str]:
    """KILLS points at distinct tool calls, in the order the run reaches them; every phase
    at least once."""
    rng = random.Random(seed)
    calls = sorted(rng.sample(range(TARGET), KILLS))
    phases = [*PHASES, *(rng.choice(PHASES) for _ in range(KILLS - len(PHASES)))]
    rng.shuffle(phases)
    return [instance_name("model", k) if phase == "model" else f"{instance_name('tool', k)}:{phase}"
            for k, phase in zip(calls, phases, strict=True)]


def expected_messages(target: int, calls: int, final: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": f"call the tool {target} times"}]
    for i in range(calls):
        out.append({"role": "assistant", "call": {"i": i}})
        out.append({"role": "tool", "i": i, "content": f"result-{i}"})
    if final:
        out.append({"role": "assistant", "content": f"made {calls} calls"})
    return out


async def _in_doubt_answer(scene: Scene, run_id: str) -> tuple[str, dict[str, Any]]:
    """The run paused on a tool effect whose outcome was not recorded (its process died
    inside it): look in the outside world, which has it, and answer with its result."""
    pending = await scene.rt.interrupts(run_id)
    assert len(pending) == 1, pending
    intr = pending[0]
    assert intr.kind == InterruptKind.IN_DOUBT
    value = intr.payload["value"]
    assert value["effect"] == "search"
    made = [e for e in scene.log("effects.log") if e["key"] == value["key"]]
    assert len(made) == 1
    assert made[0]["node"] == intr.node
    assert value["request"] == made[0]["request"]
    return intr.node, {"action": "result", "result": made[0]["result"]}


@dataclass
class Survived:
    run: Run                 # as the last resume, in this process, left it
    killed: list[Killed]     # the processes SIGKILLed, in order
    in_doubt: list[str]      # tool instances whose effect was answered after a death inside it
    paused: list[int]        # processes whose resume paused on such an effect


def recovered_from_each_death(scene: Scene, events: Sequence[TraceEvent], survived: Survived,
                              kills: int) -> tuple[dict[str, list[int]], set[str]]:
    """Check that each of ``kills`` deaths was recovered and that an instance ran again only
    after a process running it died (or paused on an effect in doubt); the processes each
    instance ran in, and the instances recovery found running."""
    assert run_events(events).count("run.recover") == kills
    pids = scene.executions()
    ended_early = {k.pid for k in survived.killed} | set(survived.paused)
    for node, ps in pids.items():
        assert set(ps[:-1]) <= ended_early, (node, ps)
    return pids, {e.node for e in events if e.type == "node.lost"}


async def killed_at_each_then_finished(scene: Scene, points: Sequence[str], start_input: str) -> Survived:
    """Start a run in a worker killed at ``points[0]``, resume it in a new worker killed at
    each next point (answering an effect left in doubt with what the outside world has),
    then resume it in this process until it ends: the same run, succeeded, with only the
    effects whose process died inside them answered as in doubt."""
    run_id: str | None = None
    killed: list[Killed] = []
    in_doubt: list[str] = []
    paused: list[int] = []
    answer: list[Any] = []
    for point in points:
        while True:   # a resume that finds an effect in doubt pauses: answer it, then go on
            args = ["start", start_input] if run_id is None else ["resume", run_id, *answer]
            answer = []
            outcome = scene.worker([], point, *args)
            if run_id is None:
                run_id = scene.only_run_id()
            if isinstance(outcome, Killed):
                break
            assert outcome.out["status"] == "interrupted", outcome.out
            paused.append(outcome.pid)
            node, reply = await _in_doubt_answer(scene, run_id)
            in_doubt.append(node)
            answer = [json.dumps(reply)]
        killed.append(outcome)
        _assert_died_at(scene, run_id, outcome)
    assert run_id is not None
    assert [k.point for k in killed] == list(points)
    assert len({k.pid for k in killed}) == len(points)

    run = await scene.resume(run_id, *(json.loads(a) for a in answer))
    if run.status == RunStatus.INTERRUPTED:
        paused.append(os.getpid())
        node, reply = await _in_doubt_answer(scene, run_id)
        in_doubt.append(node)
        run = await scene.resume(run_id, reply)
    # the same run came through every death and ended well
    assert run.id == run_id and run.kind == RunKind.MAIN
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert scene.rt.store.child_runs(run_id) == []
    # a death inside the effect, and only that, left it in doubt
    assert in_doubt == [p.split(":")[0] for p in points if p.endswith(":in_effect")]
    return Survived(run, killed, in_doubt, paused)


@pytest.mark.parametrize("seed", [11, 2026])
async def test_react_loop_sigkilled_at_random_points_completes_with_every_effect_once(scenes, seed: int) -> None:
    scene = scenes("react")
    points = kill_points(seed)
    survived = await killed_at_each_then_finished(scene, points, scene.input(target=TARGET))
    run, run_id, killed = survived.run, survived.run.id, survived.killed

    rt = scene.rt

    # every tool effect happened exactly once, in call order, by the tool instance of its call
    effects = scene.log("effects.log")
    assert [e["request"] for e in effects] == [{"i": i} for i in range(TARGET)]
    assert [e["node"] for e in effects] == [instance_name("tool", i) for i in range(TARGET)]
    assert len({e["key"] for e in effects}) == TARGET
    journal = [e for e in rt.store.journal([run_id]) if e.name == "search"]
    by_node: dict[str, list[EffectStatus]] = {}
    for e in journal:
        by_node.setdefault(e.node, []).append(e.status)
    assert by_node == {instance_name("tool", i): [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
                       for i in range(TARGET)}

    # one instance per iteration, each succeeded once; the loop ended where the model stopped calling
    models = [instance_name("model", k) for k in range(TARGET + 1)]
    tools = [instance_name("tool", k) for k in range(TARGET + 1)]
    head = (await rt.history(run_id))[-1]
    assert head.node_states == {"prep": S, "finish": S, **{m: S for m in models},
                                **{t: S for t in tools[:-1]}, tools[-1]: K}
    events = await rt.events(run_id)
    succeeded = Counter(e.node for e in events if e.type == "node.succeed")
    assert succeeded == Counter(["prep", "finish", *models, *tools[:-1]])
    ok_attempts = Counter(a.node for a in await rt.attempts(run_id) if a.status == S)
    assert ok_attempts == succeeded
    # every instance's writes were folded into exactly one checkpoint
    cps = await rt.history(run_id)
    folded = Counter(n for cp in cps for n in cp.nodes)
    assert folded == succeeded
    assert len(cps) > len(models)

    # what recovery found running was run again
    pids, lost = recovered_from_each_death(scene, events, survived, KILLS)
    assert lost and all(len(pids[n]) >= 2 for n in lost), lost
    for k in killed:   # the instance each process hung in ran in it first, and again after it died
        ps = pids[k.point.split(":")[0]]
        assert ps[0] == k.pid and len(ps) >= 2, (k, ps)

    # the conversation is complete and in order
    state = await scene.final_state(run_id)
    assert state["messages"] == expected_messages(TARGET, TARGET, final=True)
    assert state["answer"] == f"made {TARGET} calls"
    await assert_trace_consistent(rt, scene.graph, run_id)


async def test_react_loop_past_max_iterations_fails_with_limit_exceeded(scenes) -> None:
    scene = scenes("react_short")
    bound = agent_graphs.SHORT_MAX_ITERATIONS

    done = scene.finish_worker([], "start", scene.input(target=agent_graphs.SHORT_TARGET))

    assert done.out["status"] == "failed"
    run = await scene.rt.get_run(done.out["run_id"])
    assert run.status == RunStatus.FAILED
    assert run.error is not None and run.error["class"] == "limit_exceeded", run.error
    assert "loop 'model'" in run.error["message"]
    assert f"max_iterations={bound}" in run.error["message"]
    # it stopped when the last allowed iteration led back again; no further iteration exists
    effects = scene.log("effects.log")
    assert [e["request"] for e in effects] == [{"i": i} for i in range(bound)]
    head = (await scene.rt.history(run.id))[-1]
    iterations = [n for n in head.node_states if n.startswith(("model", "tool"))]
    assert sorted(iterations) == sorted([instance_name(n, k) for n in ("model", "tool") for k in range(bound)])
    assert all(head.node_states[n] == S for n in iterations)
    assert head.node_states["finish"] == P
    state = await scene.final_state(run.id)
    assert state["messages"] == expected_messages(agent_graphs.SHORT_TARGET, bound, final=False)
    assert state["answer"] is None
    await assert_trace_consistent(scene.rt, scene.graph, run.id)
