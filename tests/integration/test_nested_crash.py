"""Crash tests for nested loops: a supervisor loop whose body calls a ReAct sub-agent.

The ``supervisor`` graph of ``agent_graphs`` runs three rounds (the outer loop ``plan`` →
``agent`` → ``review`` → ``again`` ⇢ ``plan``); in each the subgraph ``agent``, a loop of
its own (``model`` ⇄ ``tool``), makes 3, 4 and 3 calls of the counted effect ``search``.
Worker processes (``agent_worker.py``) are SIGKILLed inside the inner loop in every
round, at points chosen by a seeded random (in the model, before, inside and after the
tool's effect), and a new process resumes each time; the last resume runs here. Every
tool effect happened exactly once, by the instance of its round and call
(``agent/tool#1.2``); every instance succeeded once; the conversation is complete and
in order. The sub-agent's bound counts per round: a later round that needs more fails
the run with ``limit_exceeded`` naming ``agent/model``.

The processes and checks are those of ``test_agent_crash``.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import agent_graphs
import pytest
from harness_checks import assert_instance_trace_consistent
from test_agent_crash import (  # noqa: F401  (scenes: the fixture)
    PHASES,
    assert_trace_consistent,
    killed_at_each_then_finished,
    recovered_from_each_death,
    scenes,
)

from runtime import EffectStatus, NodeStatus, RunStatus
from runtime.graph.instances import base_node, instance_name

pytestmark = pytest.mark.slow

S, P, K = NodeStatus.SUCCEEDED, NodeStatus.PENDING, NodeStatus.SKIPPED
CALLS = [3, 4, 3]            # tool calls per round; round 2 meets the sub-agent's bound exactly
ROUNDS = len(CALLS)
KILLS = 5
SEEDS = [7, 2026]
assert ROUNDS == agent_graphs.SUPERVISOR_ROUNDS
assert max(CALLS) + 1 == agent_graphs.SUB_AGENT_MAX_ITERATIONS


def model(o: int, k: int) -> str:
    """The sub-agent's model in call k of round o + 1 (outer iteration o, inner iteration k)."""
    return instance_name("agent/model", k, outer=(o,))


def tool(o: int, k: int) -> str:
    return instance_name("agent/tool", k, outer=(o,))


def kill_points(seed: int) -> list[str]:
    """KILLS points inside the inner loop, at distinct (round, call)s, in the order the run
    reaches them: every round and every phase at least once."""
    rng = random.Random(seed)
    rounds = [*range(ROUNDS), *(rng.randrange(ROUNDS) for _ in range(KILLS - ROUNDS))]
    phases = [*PHASES, *(rng.choice(PHASES) for _ in range(KILLS - len(PHASES)))]
    rng.shuffle(phases)
    chosen: dict[tuple[int, int], str] = {}
    for o, phase in zip(rounds, phases, strict=True):
        # the model runs once more than the tool in a round: its last call answers
        calls = range(CALLS[o] + 1) if phase == "model" else range(CALLS[o])
        k = rng.choice([k for k in calls if (o, k) not in chosen])
        chosen[(o, k)] = model(o, k) if phase == "model" else f"{tool(o, k)}:{phase}"
    return [chosen[ok] for ok in sorted(chosen)]


def expected_messages(calls: list[int], rounds_done: int,
                      last_round_calls: int | None = None) -> list[dict[str, Any]]:
    """The conversation after ``rounds_done`` whole rounds, then (if given) a round that made
    ``last_round_calls`` calls and went no further."""
    out: list[dict[str, Any]] = []
    plan = [*calls[:rounds_done], *([] if last_round_calls is None else [last_round_calls])]
    for o, c in enumerate(plan):
        r = o + 1
        out.append({"role": "user", "round": r, "content": f"round {r}: call the tool {calls[o]} times"})
        for i in range(c):
            out.append({"role": "assistant", "round": r, "call": {"round": r, "i": i}})
            out.append({"role": "tool", "round": r, "i": i, "content": f"result-{r}.{i}"})
        if o < rounds_done:
            out.append({"role": "assistant", "round": r, "content": f"round {r}: made {c} calls"})
            out.append({"role": "supervisor", "round": r, "content": f"reviewed round {r}"})
    return out


def test_kill_points_cover_every_round_and_phase() -> None:
    for seed in SEEDS:
        points = kill_points(seed)
        assert len(points) == KILLS
        assert {p.split("#")[1].split(".")[0] if "#" in p else "0" for p in points} == {"0", "1", "2"}
        assert {p.split(":")[1] if ":" in p else "model" for p in points} == set(PHASES)


@pytest.mark.parametrize("seed", SEEDS)
async def test_supervisor_with_sub_agent_sigkilled_in_every_round_completes_with_every_effect_once(
        scenes, seed: int) -> None:
    scene = scenes("supervisor")
    points = kill_points(seed)
    survived = await killed_at_each_then_finished(scene, points, scene.input(calls=CALLS))
    run, run_id, killed = survived.run, survived.run.id, survived.killed

    rt = scene.rt

    # every tool effect happened exactly once, round by round, by the instance of its round and call
    calls = [(o, i) for o, c in enumerate(CALLS) for i in range(c)]
    effects = scene.log("effects.log")
    assert [e["request"] for e in effects] == [{"round": o + 1, "i": i} for o, i in calls]
    assert [e["node"] for e in effects] == [tool(o, i) for o, i in calls]
    assert [e["result"] for e in effects] == [f"result-{o + 1}.{i}" for o, i in calls]
    assert len({e["key"] for e in effects}) == len(calls)
    journal = [e for e in rt.store.journal([run_id]) if e.name == "search"]
    by_node: dict[str, list[EffectStatus]] = {}
    for e in journal:
        by_node.setdefault(e.node, []).append(e.status)
    assert by_node == {tool(o, i): [EffectStatus.STARTED, EffectStatus.SUCCEEDED] for o, i in calls}

    # one instance per iteration of each loop, each succeeded once; in every round the
    # inner loop ended where the model stopped calling, and the outer loop after the last round
    models = [model(o, k) for o, c in enumerate(CALLS) for k in range(c + 1)]
    tools = [tool(o, i) for o, i in calls]
    outer = [instance_name(n, o) for o in range(ROUNDS) for n in ("plan", "agent", "review")]
    again = [instance_name("again", o) for o in range(ROUNDS - 1)]
    ran = [*outer, *again, *models, *tools, "finish"]
    head = (await rt.history(run_id))[-1]
    assert head.node_states == {**{n: S for n in ran}, instance_name("again", ROUNDS - 1): K,
                                **{tool(o, c): K for o, c in enumerate(CALLS)}}
    assert "agent/model#0.4" not in head.node_states and "plan#3" not in head.node_states
    events = await rt.events(run_id)
    succeeded = Counter(e.node for e in events if e.type == "node.succeed")
    assert succeeded == Counter(ran)
    ok_attempts = Counter(a.node for a in await rt.attempts(run_id) if a.status == S)
    assert ok_attempts == succeeded
    # every instance's writes were folded into exactly one checkpoint
    cps = await rt.history(run_id)
    folded = Counter(n for cp in cps for n in cp.nodes)
    assert folded == succeeded

    # what recovery found running was run again
    pids, lost = recovered_from_each_death(scene, events, survived, KILLS)
    assert lost and all(len(pids[n]) >= 2 for n in lost if n in pids), lost
    assert all(base_node(n) == "agent" for n in lost - set(pids)), lost   # a subgraph's own node logs nothing
    # a death inside an effect always shows as its instance lost: everything before the call was committed
    # (a death elsewhere may come before the process's latest outcomes were, under group commit)
    assert {p.split(":")[0] for p in points if p.endswith(":in_effect")} <= lost, lost
    for k in killed:   # the instance each process hung in ran in it first, and again after it died
        ps = pids[k.point.split(":")[0]]
        assert ps[0] == k.pid and len(ps) >= 2, (k, ps)

    # the conversation is complete and in order: round by round, the sub-agent's calls in order
    state = await scene.final_state(run_id)
    assert state["messages"] == expected_messages(CALLS, ROUNDS)
    assert (state["round"], state["answer"]) == (ROUNDS, f"{sum(CALLS)} calls in {ROUNDS} rounds")
    await assert_instance_trace_consistent(rt, run_id)
    await assert_trace_consistent(rt, scene.graph, run_id)


async def test_sub_agent_bound_counts_per_round_and_a_later_round_past_it_fails_with_limit_exceeded(
        scenes) -> None:
    """Rounds 1 and 2 each take the sub-agent's whole bound (5 model iterations, 10 in
    all); round 3 wants one more than the bound and fails the run, naming the inner loop."""
    scene = scenes("supervisor")
    bound = agent_graphs.SUB_AGENT_MAX_ITERATIONS
    calls = [bound - 1, bound - 1, bound]

    done = scene.finish_worker([], "start", scene.input(calls=calls))

    assert done.out["status"] == "failed", done.out
    run = await scene.rt.get_run(done.out["run_id"])
    assert run.status == RunStatus.FAILED
    assert run.error is not None and run.error["class"] == "limit_exceeded", run.error
    message = run.error["message"]
    assert "loop 'agent/model'" in message and f"max_iterations={bound}" in message, message
    assert "loop 'plan'" not in message, message
    # it stopped when round 3's last allowed iteration led back again; every effect before it happened once
    made = [(o, i) for o, c in enumerate(calls) for i in range(min(c, bound))]
    effects = scene.log("effects.log")
    assert [e["request"] for e in effects] == [{"round": o + 1, "i": i} for o, i in made]
    assert [e["node"] for e in effects] == [tool(o, i) for o, i in made]
    head = (await scene.rt.history(run.id))[-1]
    inner = {n: s for n, s in head.node_states.items() if n.startswith("agent/")}
    assert inner == {**{model(o, k): S for o in range(3) for k in range(bound)},
                     **{tool(o, i): S for o, i in made}, tool(0, bound - 1): K, tool(1, bound - 1): K}
    assert all(head.node_states[instance_name(n, o)] == S for o in range(2) for n in ("plan", "agent", "review"))
    assert head.node_states["again"] == head.node_states["again#1"] == head.node_states["plan#2"] == S
    # nothing after the inner loop ran in round 3, nor after the outer loop
    assert head.node_states["agent#2"] != S and head.node_states["review#2"] != S
    assert head.node_states["finish"] == P
    state = await scene.final_state(run.id)
    assert state["messages"] == expected_messages(calls, 2, last_round_calls=bound)
    assert (state["round"], state["answer"]) == (3, None)
    await assert_instance_trace_consistent(scene.rt, run.id)
