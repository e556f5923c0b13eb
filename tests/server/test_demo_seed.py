"""The debugger's demo data: ``seed_demo`` fills a fresh SQLite store with a run for every
feature the debugger shows, the same way every time, and leaves nothing running.

The store is seeded once for the module (about a second and a half, one worker
process included); tests that act on the runs work on a copy of the file.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from examples import demo_approvals, demo_payments, demo_shop, demo_trip
from runtime import (
    EffectStatus,
    InterruptKind,
    InterruptStatus,
    InvalidAnswer,
    InvalidRequest,
    MemoryStore,
    NodeStatus,
    RunKind,
    RunStatus,
    Runtime,
    SqlStore,
)
from runtime.graph.instances import base_node
from server.demo import DEMO_GRAPHS, DemoIds, seed_demo, summary
from server.web.services import journal_rows

class Seeded:
    def __init__(self, path: Path):
        self.path = path
        self.rt = Runtime(store=SqlStore(f"sqlite:///{path}"))
        # how long it takes is measured by bench/debugger.py, not asserted here
        self.ids: DemoIds = asyncio.run(seed_demo(self.rt))

    def copy(self, to: Path) -> Runtime:
        """A Runtime over a consistent copy of the seeded file (WAL included), and no graphs
        registered: what a server started later in another process would have."""
        with sqlite3.connect(self.path) as src, sqlite3.connect(to) as dst:
            src.backup(dst)
        return Runtime(store=SqlStore(f"sqlite:///{to}"))


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    s = Seeded(tmp_path_factory.mktemp("demo") / "demo.db")
    yield s
    s.rt.close()


def labels(rt: Runtime, run_id: str) -> dict[str, str]:
    """The journal as the debugger shows it: effect name -> LIVE / MOCKED / IN DOUBT / …"""
    return {row.name: row.label for row in journal_rows(rt.store.journal([run_id]), rt.store.get_run(run_id))}


def attempts(rt: Runtime, run_id: str) -> list[tuple[str, int, str, str | None]]:
    return [(a.node, a.attempt, a.status.value, a.error_class) for a in rt.store.node_attempts(run_id)]


def event_types(rt: Runtime, run_id: str) -> list[str]:
    return [e.type for e in rt.store.events(run_id)]


def final_state(rt: Runtime, run_id: str) -> dict[str, Any]:
    head = rt.store.checkpoints(run_id)[-1]
    return asyncio.run(rt.state_at(head.id)).model_dump()


# --------------------------------------------------------------------------- the whole


def test_seeding_names_every_run_and_leaves_none_running(seeded: Seeded) -> None:
    rt, ids = seeded.rt, seeded.ids
    stored = rt.store.list_runs(limit=1000)
    assert {r.id for r in stored} == set(ids.runs().values())  # nothing made that DemoIds does not name
    assert len(stored) == 18
    assert not [r.id for r in stored if r.status in (RunStatus.RUNNING, RunStatus.QUEUED)]
    # every graph is stored with its reference, so a server in another process can load it
    for r in stored:
        assert rt.store.graph_description(r.graph_version)["ref"] in DEMO_GRAPHS.values()
    lines = summary(rt, ids).splitlines()
    assert len(lines) == 19 and lines[0].split()[:2] == ["research", ids.research]


def test_a_store_with_runs_or_that_no_other_process_can_open_is_refused(seeded: Seeded) -> None:
    with pytest.raises(InvalidRequest, match="empty store"):
        asyncio.run(seed_demo(seeded.rt))
    memory = Runtime(store=MemoryStore())
    try:
        with pytest.raises(InvalidRequest, match="SqlStore"):
            asyncio.run(seed_demo(memory))
        assert memory.store.list_runs() == []
    finally:
        memory.close()


# --------------------------------------------------------------------------- each feature


def test_research_agent_succeeded_with_a_loop_a_map_and_a_subgraph(seeded: Seeded) -> None:
    rt, run_id = seeded.rt, seeded.ids.research
    assert rt.store.get_run(run_id).status == RunStatus.SUCCEEDED
    nodes = {node for node, *_ in attempts(rt, run_id)}
    assert {"model", "model#1", "tool", "tool#1", "read[0]", "read[2]", "review/check"} <= nodes
    assert labels(rt, run_id) == {"search": "LIVE", "fetch": "LIVE"}


def test_ab_failure_then_continuation_made_the_charge_once(seeded: Seeded) -> None:
    rt, ids = seeded.rt, seeded.ids
    failed, cont = rt.store.get_run(ids.checkout_failed), rt.store.get_run(ids.checkout_continued)
    assert failed.status == RunStatus.FAILED and failed.kind == RunKind.MAIN
    assert failed.error == {"class": "permission", "node": "reserve",
                            "message": "PermissionDeniedError: warehouse API refused the reservation: API key revoked"}
    assert ("charge", 1, "succeeded", None) in attempts(rt, failed.id)
    assert cont.status == RunStatus.SUCCEEDED and cont.kind == RunKind.CONTINUATION
    assert cont.parent_run_id == failed.id and cont.thread_id == failed.thread_id
    # A was inherited, never run again; its one charge is in the failed run's journal only
    assert rt.store.events(cont.id)[0].data["inherited"] == {"charge": "succeeded"}
    assert {node for node, *_ in attempts(rt, cont.id)} == {"reserve", "confirm"}
    lineage = rt.store.journal([failed.id, cont.id])
    assert [(e.run_id, e.name, e.status) for e in lineage] == [
        (failed.id, "payments.charge", EffectStatus.STARTED), (failed.id, "payments.charge", EffectStatus.SUCCEEDED)]
    assert demo_shop.CHARGES.count(lineage[0].key) == 1
    assert final_state(rt, cont.id)["reservation"] == "res-7"


def test_runs_waiting_for_a_person_have_typed_response_models(seeded: Seeded) -> None:
    rt, ids = seeded.rt, seeded.ids
    [refund] = rt.store.interrupts(ids.refund_review)
    assert (refund.kind, refund.status, refund.node) == (InterruptKind.USER, InterruptStatus.PENDING, "review")
    assert refund.payload["response_ref"] == "examples.demo_approvals:RefundDecision"
    schema = refund.response_schema
    assert set(schema["required"]) == {"decision", "amount", "reason"}
    assert schema["$defs"]["Decision"]["enum"] == ["approve", "partial", "reject"]
    assert schema["properties"]["amount"]["type"] == "number" and schema["properties"]["amount"]["maximum"] == 10_000
    assert schema["properties"]["notify_customer"]["type"] == "boolean"
    assert all(p.get("description") for p in schema["properties"].values())

    [tool] = rt.store.interrupts(ids.tool_review)
    assert (tool.kind, tool.node) == (InterruptKind.USER, "approve_tool")
    proposal = tool.payload["value"]
    assert proposal["tool"] == "send_email"
    props = tool.response_schema["properties"]
    assert set(proposal["args"]) <= set(props)  # every proposed argument is a field the person can edit
    assert {"action", "to", "subject", "body"} <= set(tool.response_schema["required"])
    assert tool.response_schema["$defs"]["Action"]["enum"] == ["run", "reject"]
    for run_id in (ids.refund_review, ids.tool_review):
        assert rt.store.get_run(run_id).status == RunStatus.INTERRUPTED


def test_forks_of_the_support_ticket_one_mocked_one_asking_about_an_unrecorded_effect(seeded: Seeded) -> None:
    rt, ids = seeded.rt, seeded.ids
    patched, paging = rt.store.get_run(ids.fork_patched), rt.store.get_run(ids.fork_unrecorded)
    base = rt.store.get_checkpoint(patched.base_checkpoint_id or "")
    assert base.run_id == ids.support and "classify" in base.nodes
    assert paging.base_checkpoint_id == base.id   # two branches from one checkpoint
    for fork in (patched, paging):
        assert fork.kind == RunKind.FORK and fork.parent_run_id == ids.support

    assert patched.status == RunStatus.SUCCEEDED
    assert [c.source for c in rt.store.checkpoints(patched.id)][:2] == ["fork", "patch"]
    assert labels(rt, patched.id) == {"crm.lookup": "MOCKED", "llm.draft": "MOCKED"}
    assert {e.source for e in rt.store.journal([patched.id])} == {f"run:{ids.support}"}
    assert final_state(rt, patched.id)["queue"] == "gold-normal"
    assert final_state(rt, ids.support)["queue"] == "standard-normal"

    assert paging.status == RunStatus.INTERRUPTED
    [question] = rt.store.interrupts(paging.id)
    assert (question.kind, question.node, question.status) == (InterruptKind.UNRECORDED, "page", InterruptStatus.PENDING)
    assert question.payload["value"]["effect"] == "pager.notify"
    assert question.payload["value"]["recorded_request"] is None   # the source never paged anyone
    assert labels(rt, paging.id) == {"crm.lookup": "MOCKED", "llm.draft": "MOCKED"}


def test_replay_against_a_new_version_reports_divergences(seeded: Seeded) -> None:
    rt, ids = seeded.rt, seeded.ids
    replay, source = rt.store.get_run(ids.replay), rt.store.get_run(ids.support)
    assert replay.kind == RunKind.REPLAY and replay.parent_run_id == source.id
    assert replay.graph_name == source.graph_name and replay.graph_version != source.graph_version
    report = asyncio.run(rt.replay_report(replay.id))
    assert not report.same and report.status == "succeeded"
    verdicts = {n.node: n.verdict for n in report.nodes}
    assert verdicts == {"classify": "same", "lookup": "same", "draft": "different", "page": "same",
                        "route": "different"}
    assert [(c.dotted(), c.old, c.new) for c in report.node("route").write_changes if c.dotted() == "queue"] == [
        ("queue", "standard-normal", "paying-normal")]
    [effect] = report.node("draft").effects
    assert (effect.name, effect.verdict) == ("llm.draft", "changed")
    assert set(labels(rt, replay.id).values()) == {"MOCKED"}


def test_cancelled_run_stopped_its_node_in_flight_with_the_reason(seeded: Seeded) -> None:
    rt, run_id = seeded.rt, seeded.ids.cancelled
    run = rt.store.get_run(run_id)
    assert run.status == RunStatus.CANCELLED
    assert run.error == {"class": "cancelled", "message": "stopped by an operator: the site throttles crawlers"}
    assert attempts(rt, run_id) == [("sitemap", 1, "succeeded", None), ("crawl", 1, "cancelled", "cancelled")]
    assert event_types(rt, run_id)[-1] == "run.cancel"


def test_compensated_run_undid_its_bookings_newest_first(seeded: Seeded) -> None:
    rt, run_id = seeded.rt, seeded.ids.compensated
    run = rt.store.get_run(run_id)
    assert run.status == RunStatus.FAILED and run.error["class"] == "invalid_input"
    assert labels(rt, run_id) == {"airline.book": "COMPENSATED", "hotels.book": "COMPENSATED", "cars.rent": "FAILED"}
    undone = [e.name for e in rt.store.journal([run_id]) if e.status == EffectStatus.COMPENSATED]
    assert undone == ["hotels.book", "airline.book"]
    results = {e.name: e.result for e in rt.store.journal([run_id]) if e.status == EffectStatus.SUCCEEDED}
    assert f"cancel hotel {results['hotels.book']}" in demo_trip.BOOKINGS
    assert f"cancel flight {results['airline.book']}" in demo_trip.BOOKINGS
    with pytest.raises(InvalidRequest, match="compensated"):
        asyncio.run(rt.resume(run_id))
    # the debugger offers what can be done with it: no Resume that could only be refused
    from local_client import TestClient

    from server.web import create_app
    with TestClient(create_app(rt)) as client:
        actions = client.get(f"/runs/{run_id}").text.split('id="run-actions"')[1].split("</div>")[0]
    assert f'action="/runs/{run_id}/resume"' not in actions and "compensated: fork it to try again" in actions
    with TestClient(create_app(rt)) as client:
        other = client.get(f"/runs/{seeded.ids.cancelled}").text.split('id="run-actions"')[1].split("</div>")[0]
    assert f'action="/runs/{seeded.ids.cancelled}/resume"' in other and "compensated" not in other


def test_in_doubt_payout_was_killed_inside_the_transfer_and_recovered(seeded: Seeded) -> None:
    rt, run_id = seeded.rt, seeded.ids.in_doubt
    run = rt.store.get_run(run_id)
    assert run.status == RunStatus.INTERRUPTED and run.kind == RunKind.MAIN
    [question] = rt.store.interrupts(run_id)
    assert (question.kind, question.node, question.status) == (InterruptKind.IN_DOUBT, "transfer",
                                                               InterruptStatus.PENDING)
    [entry] = rt.store.journal([run_id])
    assert (entry.name, entry.status) == ("bank.transfer", EffectStatus.STARTED)  # no outcome, ever
    assert labels(rt, run_id) == {"bank.transfer": "IN DOUBT"}
    assert entry.key not in demo_payments.TRANSFERS   # it never completed in this process
    events = rt.store.events(run_id)
    assert [e.type for e in events if e.type.startswith("run.")] == [
        "run.created", "run.claim", "run.recover", "run.interrupt"]
    assert [(e.type, e.node) for e in events if e.type == "node.lost"] == [("node.lost", "transfer")]


def test_retried_node_failed_with_two_error_classes_then_succeeded(seeded: Seeded) -> None:
    rt, run_id = seeded.rt, seeded.ids.retried
    assert rt.store.get_run(run_id).status == RunStatus.SUCCEEDED
    assert [a for a in attempts(rt, run_id) if a[0] == "fetch_rates"] == [
        ("fetch_rates", 1, "failed", "transient"), ("fetch_rates", 2, "failed", "deadline"),
        ("fetch_rates", 3, "succeeded", None)]
    assert event_types(rt, run_id).count("node.retry") == 2


def test_fan_out_ran_three_hundred_instances(seeded: Seeded) -> None:
    rt, run_id = seeded.rt, seeded.ids.fan_out
    assert rt.store.get_run(run_id).status == RunStatus.SUCCEEDED
    items = [a for a in attempts(rt, run_id) if base_node(a[0]) == "embed" and a[0] != "embed"]
    assert len(items) == 300 and {a[2] for a in items} == {"succeeded"}
    assert final_state(rt, run_id)["indexed"] == 300
    assert rt.store.checkpoints(run_id)[-1].node_states["embed[299]"] == NodeStatus.SUCCEEDED


def test_chat_thread_has_three_turns(seeded: Seeded) -> None:
    rt, ids = seeded.rt, seeded.ids
    turns = [rt.store.get_run(r) for r in ids.chat_turns]
    assert len(turns) == 3 and {t.thread_id for t in turns} == {ids.chat_thread}
    assert [t.status for t in turns] == [RunStatus.SUCCEEDED] * 3
    assert [t.parent_run_id for t in turns] == [None, turns[0].id, turns[1].id]
    state = asyncio.run(rt.thread_state(ids.chat_thread)).model_dump()
    assert len(state["messages"]) == 6 and state["orders_seen"] == [7, 8]


def test_react_loop_ran_more_than_ten_iterations(seeded: Seeded) -> None:
    rt, run_id = seeded.rt, seeded.ids.react
    assert rt.store.get_run(run_id).status == RunStatus.SUCCEEDED
    nodes = [node for node, *_ in attempts(rt, run_id)]
    assert nodes.count("answer") == 1
    assert sum(base_node(n) == "act" for n in nodes) == 12 and "think#12" in nodes and "think#13" not in nodes
    assert final_state(rt, run_id)["answer"].endswith("km from Lisbon")
    assert rt.store.get_run(run_id).usage["tokens"] > 0


# --------------------------------------------------------------------------- acting on it later


async def test_a_server_started_later_can_answer_and_settle_the_paused_runs(seeded: Seeded, tmp_path: Path) -> None:
    rt, ids = seeded.copy(tmp_path / "later.db"), seeded.ids
    try:
        with pytest.raises(InvalidAnswer, match="amount"):
            await rt.resume(ids.refund_review, {"decision": "partial", "amount": -1, "reason": "damaged"})
        done = await rt.resume(ids.refund_review, {"decision": "partial", "amount": 400, "reason": "damaged"})
        assert done.status == RunStatus.SUCCEEDED
        assert (await rt.get_run(ids.refund_review)).status == RunStatus.SUCCEEDED

        proposed = (await rt.interrupts(ids.tool_review))[0].payload["value"]["args"]
        edited = {**proposed, "subject": "Outage follow-up (edited)", "action": "run"}
        done = await rt.resume(ids.tool_review, edited)
        assert done.status == RunStatus.SUCCEEDED
        [sent] = [e for e in rt.store.journal([done.id]) if e.status == EffectStatus.SUCCEEDED]
        assert sent.request["subject"] == "Outage follow-up (edited)"

        done = await rt.resume(ids.fork_unrecorded, {"action": "mock", "result": "on-call: sam"})
        assert done.status == RunStatus.SUCCEEDED

        done = await rt.resume(ids.in_doubt, {"action": "result", "result": "tx-confirmed-by-bank"})
        assert done.status == RunStatus.SUCCEEDED
        assert (await rt.state_at((await rt.history(done.id))[-1].id)).transfer == "tx-confirmed-by-bank"
        assert len(demo_approvals.SENT) >= 2
    finally:
        rt.close()


# --------------------------------------------------------------------------- the same every time


def fingerprint(rt: Runtime, ids: DemoIds) -> dict[str, Any]:
    """What a seeded store shows, without ids, keys or timings (checkpoint counts depend on
    how commits were grouped, so they are left out)."""
    out: dict[str, Any] = {}
    for name, run_id in ids.runs().items():
        run = rt.store.get_run(run_id)
        out[name] = (run.graph_name, run.kind.value, run.status.value,
                     sorted(attempts(rt, run_id)),
                     sorted((r.node, r.name, r.occurrence, r.label)
                            for r in journal_rows(rt.store.journal([run_id]), run)),
                     sorted((i.node, i.kind.value, i.status.value) for i in rt.store.interrupts(run_id)),
                     dict(rt.store.checkpoints(run_id)[-1].node_states))
    return out


def test_seeding_again_makes_the_same_structure(seeded: Seeded, tmp_path: Path) -> None:
    again = Seeded(tmp_path / "again.db")
    try:
        assert fingerprint(again.rt, again.ids) == fingerprint(seeded.rt, seeded.ids)
    finally:
        again.rt.close()
