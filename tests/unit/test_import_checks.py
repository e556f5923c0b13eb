"""Importing a thread checks how its records fit together: a hand-edited or hostile
document is rejected with the record and the reason, and nothing is written.

Every document here is a real export (a run with an effect and a question, and a fork
of it that pauses on the same question), changed in one place, then imported into a
fresh SQLite file."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from runtime import Graph, InvalidRequest, MemoryStore, NodeContext, Runtime, SqlStore, append
from runtime.graph import ExecutableGraph


class Ticket(BaseModel):
    n: int = 0
    receipt: str = ""
    ok: bool = False
    log: Annotated[list[str], append] = []


def desk() -> ExecutableGraph:
    """pay (an effect) → ask (a question) → done."""
    g = Graph("desk", state=Ticket)

    @g.node()
    async def pay(s: Ticket, ctx: NodeContext) -> dict:
        receipt = await ctx.effect("pay", lambda: "r-1", request={"n": s.n})
        return {"receipt": receipt, "log": ["paid"]}

    @g.node(after=["pay"])
    async def ask(s: Ticket, ctx: NodeContext) -> dict:
        return {"ok": bool(await ctx.interrupt({"q": "ok?"})), "log": ["asked"]}

    @g.node(after=["ask"])
    def done(s: Ticket) -> dict:
        return {"n": s.n + 1}

    return g.compile()


GRAPH = desk()
BY_REF = desk()   # what a document's graph ref names (resolving a ref marks the graph with it)


async def record() -> dict[str, Any]:
    """runs[0]: succeeded after its question was answered (journal: started, succeeded);
    runs[1]: a fork from its first checkpoint, the effect mocked, paused on the question."""
    rt = Runtime(MemoryStore(), graphs=[GRAPH])
    try:
        run = await rt.start(GRAPH, {"n": 1})
        run = await rt.resume(run.id, True)
        await rt.fork((await rt.history(run.id))[0].id)
        return json.loads(json.dumps(await rt.export_thread(run.id)))
    finally:
        rt.close()


@pytest.fixture(scope="module")
def exported() -> str:
    return json.dumps(asyncio.run(record()))


@pytest.fixture
def doc(exported: str) -> dict[str, Any]:
    return json.loads(exported)


@pytest.fixture
async def target(tmp_path: Path) -> AsyncIterator[Runtime]:
    """A fresh store whose Runtime has the graph (so states are checked against Ticket)."""
    rt = Runtime(SqlStore(f"sqlite:///{tmp_path / 'target.db'}"), graphs=[GRAPH])
    yield rt
    rt.close()


@pytest.fixture
async def bare(tmp_path: Path) -> AsyncIterator[Runtime]:
    """A fresh store whose Runtime does not have the graph's code."""
    rt = Runtime(SqlStore(f"sqlite:///{tmp_path / 'bare.db'}"))
    yield rt
    rt.close()


async def rejected(rt: Runtime, document: dict[str, Any]) -> str:
    """The import's error message, after checking that nothing was written."""
    with pytest.raises(InvalidRequest) as caught:
        await rt.import_thread(document)
    assert rt.store.list_runs() == [] and rt.store.interrupts() == []
    return str(caught.value)


def at(document: dict[str, Any], i: int, key: str | None = None, j: int | None = None) -> str:
    """How an error names a record: ``runs[0].checkpoints[3] (run run_…)``."""
    path = f"runs[{i}]" + (f".{key}" if key else "") + (f"[{j}]" if j is not None else "")
    return f"{path} (run {document['runs'][i]['run']['id']})"


def run_of(document: dict[str, Any], i: int) -> dict[str, Any]:
    return document["runs"][i]["run"]


# --------------------------------------------------------------------------- the real thing


async def test_a_real_export_imports_and_every_read_works(doc, target):
    runs = await target.import_thread(doc)
    assert [r.id for r in runs] == [run_of(doc, 0)["id"], run_of(doc, 1)["id"]]
    for r in runs:
        for cp in await target.history(r.id):
            await target.state_at(cp.id)
            await target.checkpoint(cp.id)
        assert len(await target.events(r.id)) == r.event_seq
    assert (await target.replay(runs[0].id)).same


async def test_a_continued_run_keeps_its_expired_lease_and_imports(tmp_path):
    failed = []

    g = Graph("once", state=Ticket)

    @g.node()
    def flaky(s: Ticket) -> dict:
        if not failed:
            failed.append(1)
            raise PermissionError("closed")
        return {"n": 1}

    source = Runtime(MemoryStore())
    first = await source.start(g, {})
    await source.resume(first.id)  # a continuation takes the failed run's lease and leaves it to expire
    document = await source.export_thread(first.id)
    assert document["runs"][0]["run"]["lease_owner"] is not None
    fresh = Runtime(SqlStore(f"sqlite:///{tmp_path / 'fresh.db'}"))
    try:
        assert len(await fresh.import_thread(document)) == 2
    finally:
        fresh.close()
        source.close()


# --------------------------------------------------------------------------- nodes and graphs


@pytest.mark.parametrize("key, j, field", [
    ("pending_writes", 0, "node"), ("attempts", 0, "node"), ("journal", 0, "node"),
    ("interrupts", 0, "node"), ("events", 2, "node"),
])
async def test_a_record_naming_a_node_the_graph_lacks_is_rejected(doc, target, key, j, field):
    doc["runs"][0][key][j][field] = "ghost"
    message = await rejected(target, doc)
    assert f"{at(doc, 0, key, j)}: names node(s) 'ghost', which graph 'desk'" in message


async def test_checkpoint_node_states_naming_a_node_the_graph_lacks_are_rejected(doc, target):
    doc["runs"][0]["checkpoints"][3]["node_states"]["ghost"] = "succeeded"
    assert f"{at(doc, 0, 'checkpoints', 3)}: node_states names node(s) 'ghost'" in await rejected(target, doc)


async def test_checkpoint_node_states_lacking_a_node_are_rejected(doc, target):
    del doc["runs"][0]["checkpoints"][3]["node_states"]["done"]
    assert f"{at(doc, 0, 'checkpoints', 3)}: node_states lack node(s) 'done'" in await rejected(target, doc)


async def test_a_run_of_a_graph_version_the_document_does_not_describe_is_rejected(doc, bare):
    doc["graphs"] = []
    message = await rejected(bare, doc)
    assert f"{at(doc, 0, 'run')}: unknown graph version {GRAPH.version}" in message


async def test_node_names_are_checked_against_the_documents_graph_when_the_code_is_unknown(doc, bare):
    doc["runs"][0]["attempts"][0]["node"] = "ghost"
    assert f"{at(doc, 0, 'attempts', 0)}: names node(s) 'ghost'" in await rejected(bare, doc)


async def test_a_graph_description_disagreeing_with_the_known_graph_is_rejected(doc, target):
    doc["graphs"][0]["order"] = ["pay", "ask", "ghost"]
    assert "graphs[0].order: lists nodes pay, ask, ghost" in await rejected(target, doc)


async def test_an_import_does_not_replace_the_stores_description_of_a_graph(doc, tmp_path):
    rt = Runtime(SqlStore(f"sqlite:///{tmp_path / 'kept.db'}"))
    try:
        rt.store.save_graph({**GRAPH.describe(), "ref": "desk_module:graph"})
        doc["graphs"][0]["ref"] = "somewhere_else:graph"
        await rt.import_thread(doc)
        assert rt.store.graph_description(GRAPH.version)["ref"] == "desk_module:graph"
    finally:
        rt.close()


# --------------------------------------------------------------------------- states


async def test_a_snapshot_that_does_not_fit_the_state_model_is_rejected(doc, target):
    doc["runs"][0]["checkpoints"][2]["snapshot"]["n"] = "many"
    message = await rejected(target, doc)
    assert f"{at(doc, 0, 'checkpoints', 2)}: snapshot does not fit Ticket: n: Input should be a valid integer" \
        in message


async def test_a_snapshot_is_checked_against_the_graph_its_ref_names_when_none_is_registered(doc, bare):
    doc["graphs"][0]["ref"] = "test_import_checks:BY_REF"
    doc["runs"][0]["checkpoints"][2]["snapshot"]["n"] = "many"
    assert f"{at(doc, 0, 'checkpoints', 2)}: snapshot does not fit Ticket" in await rejected(bare, doc)


async def test_a_run_input_that_does_not_fit_the_state_model_is_rejected(doc, target):
    run_of(doc, 0)["input"]["log"] = "not a list"
    assert f"{at(doc, 0, 'run')}: input does not fit Ticket: log" in await rejected(target, doc)


async def test_node_writes_that_do_not_fit_the_state_model_are_rejected(doc, target):
    doc["runs"][0]["pending_writes"][3]["value"] = {"n": "two"}
    assert f"{at(doc, 0, 'pending_writes', 3)}: writes give a state that does not fit Ticket" \
        in await rejected(target, doc)


async def test_node_writes_to_a_field_the_state_model_lacks_are_rejected(doc, target):
    doc["runs"][0]["pending_writes"][3]["value"] = {"total": 2}
    assert f"{at(doc, 0, 'pending_writes', 3)}: writes unknown state field(s) 'total'" in await rejected(target, doc)


async def test_a_snapshot_must_be_an_object_when_the_graph_is_unknown(doc, bare):
    doc["runs"][0]["checkpoints"][2]["snapshot"] = ["n", 1]
    assert "runs[0].checkpoints[2].snapshot: Input should be a valid dictionary" in await rejected(bare, doc)


async def test_a_non_finite_number_is_rejected_with_its_path(doc, target):
    doc["runs"][0]["checkpoints"][4]["created_at"] = float("nan")
    assert "holds nan at runs[0].checkpoints[4].created_at, which has no JSON form" in await rejected(target, doc)


@pytest.mark.parametrize("key, j, field", [("run", None, "fence"), ("run", None, "max_concurrency"),
                                           ("attempts", 0, "attempt"), ("events", 2, "seq"),
                                           ("checkpoints", 1, "seq")])
@pytest.mark.parametrize("value", [2**40, 2**70, -1])
async def test_a_whole_number_a_store_cannot_keep_is_rejected_with_its_path(doc, target, key, j, field, value):
    """PostgreSQL's columns are 32-bit: refused by name here, on every store alike, not by the
    database halfway through the import (or, on SQLite, as an overflow)."""
    record = doc["runs"][0][key] if j is None else doc["runs"][0][key][j]
    record[field] = value
    message = await rejected(target, doc)
    assert f"{field}: is {value}, out of range: a whole number from 0 to 2147483647" in message


@pytest.mark.parametrize("turn", ["two", [2], 0, True])
async def test_a_turn_number_that_is_no_whole_number_from_1_is_rejected(doc, target, turn):
    run_of(doc, 0)["options"]["turn"] = turn
    assert f"options.turn must be a whole number from 1, got {turn!r}" in await rejected(target, doc)


async def test_a_number_field_given_as_the_string_nan_is_rejected(doc, target):
    doc["runs"][0]["events"][3]["at"] = "NaN"
    assert "runs[0].events[3].at: is 'NaN', which is not a finite number" in await rejected(target, doc)


async def test_values_nested_too_deeply_to_read_are_rejected(doc, target):
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    doc["runs"][0]["events"][3]["data"]["detail"] = deep
    assert "nested more than 128 levels deep (at runs[0].events[3].data.detail" in await rejected(target, doc)


# --------------------------------------------------------------------------- sequences


async def test_a_dropped_checkpoint_is_rejected(doc, target):
    del doc["runs"][0]["checkpoints"][2]
    message = await rejected(target, doc)
    assert f"{at(doc, 0, 'checkpoints', 2)}: seq is 3, expected 2" in message
    assert f"{at(doc, 0, 'run')}: head_seq is 4, but its last checkpoint is seq 4" not in message


async def test_a_checkpoint_whose_parent_is_not_the_one_before_it_is_rejected(doc, target):
    doc["runs"][0]["checkpoints"][3]["parent_id"] = doc["runs"][0]["checkpoints"][1]["id"]
    assert f"{at(doc, 0, 'checkpoints', 3)}: parent_id is" in await rejected(target, doc)


async def test_a_first_checkpoint_not_on_the_runs_base_is_rejected(doc, target):
    doc["runs"][1]["checkpoints"][0]["parent_id"] = None
    message = await rejected(target, doc)
    assert f"{at(doc, 1, 'checkpoints', 0)}: parent_id is None, expected" in message
    assert "(the run's base_checkpoint_id)" in message


async def test_a_head_seq_other_than_the_last_checkpoint_is_rejected(doc, target):
    run_of(doc, 0)["head_seq"] = 3
    assert f"{at(doc, 0, 'run')}: head_seq is 3, but its last checkpoint is seq 4" in await rejected(target, doc)


async def test_a_dropped_event_is_rejected(doc, target):
    del doc["runs"][0]["events"][5]
    message = await rejected(target, doc)
    assert f"{at(doc, 0, 'events', 5)}: seq is 7, expected 6" in message
    assert f"{at(doc, 0, 'run')}: event_seq is 18, but the run has 17 event(s)" in message


async def test_a_dropped_last_event_is_rejected(doc, target):
    doc["runs"][0]["events"].pop()
    assert f"{at(doc, 0, 'run')}: event_seq is 18, but the run has 17 event(s)" in await rejected(target, doc)


async def test_checkpoint_event_seqs_that_go_back_are_rejected(doc, target):
    doc["runs"][0]["checkpoints"][3]["event_seq"] = 5
    assert f"{at(doc, 0, 'checkpoints', 3)}: event_seq 5 is lower than" in await rejected(target, doc)


async def test_a_checkpoint_event_seq_past_the_runs_is_rejected(doc, target):
    doc["runs"][0]["checkpoints"][4]["event_seq"] = 19
    assert f"{at(doc, 0, 'checkpoints', 4)}: event_seq 19 is not between 0 and the run's event_seq 18" \
        in await rejected(target, doc)


async def test_node_states_the_events_do_not_rebuild_are_rejected(doc, target):
    doc["runs"][0]["checkpoints"][4]["node_states"]["done"] = "skipped"
    doc["runs"][0]["checkpoints"][4]["changed"] = ["done"]
    assert f"{at(doc, 0, 'checkpoints', 4)}: node_states disagree with the run's events up to event_seq 18: " \
           f"done is skipped (the events say succeeded)" in await rejected(target, doc)


async def test_an_unknown_node_event_type_is_rejected(doc, target):
    doc["runs"][0]["events"][16]["type"] = "node.vanish"
    assert f"{at(doc, 0, 'events', 16)}: unknown node event type 'node.vanish'" in await rejected(target, doc)


async def test_changed_that_omits_a_node_whose_status_changed_is_rejected(doc, target):
    doc["runs"][0]["checkpoints"][1]["changed"] = []
    assert f"{at(doc, 0, 'checkpoints', 1)}: changed omits node(s) 'pay'" in await rejected(target, doc)


async def test_a_first_checkpoint_without_a_snapshot_is_rejected(doc, target):
    doc["runs"][1]["checkpoints"][0]["snapshot"] = None
    assert f"{at(doc, 1, 'checkpoints', 0)}: a run's first checkpoint holds the full state" \
        in await rejected(target, doc)


# --------------------------------------------------------------------------- a loop's instances


def looping() -> ExecutableGraph:
    """model ⇄ tool three times: model#1, tool#1, … are instances no graph order lists."""
    g = Graph("looping", state=Ticket)

    @g.node(max_iterations=5, after=["tool"])
    def model(s: Ticket) -> dict:
        return {"n": s.n + 1}

    @g.node(after=["model"], when=lambda s: s.n < 3)
    def tool(s: Ticket) -> dict:
        return {"log": [f"t{s.n}"]}

    return g.compile()


LOOP = looping()


@pytest.fixture(scope="module")
def loop_export() -> str:
    async def go() -> dict[str, Any]:
        rt = Runtime(MemoryStore(), graphs=[LOOP])
        try:
            return await rt.export_thread((await rt.start(LOOP, {})).id)
        finally:
            rt.close()
    return json.dumps(asyncio.run(go()))


@pytest.fixture
def loop_target(store) -> Iterator[Runtime]:
    """A fresh store of each kind (the SQL store writes statuses as each checkpoint's changes)."""
    rt = Runtime(store, graphs=[LOOP])
    yield rt
    rt.close()


def first_with(document: dict[str, Any], instance: str, key: str) -> int:
    """The first checkpoint of runs[0] (after its first) whose ``key`` names ``instance``."""
    cps = document["runs"][0]["checkpoints"]
    return next(j for j in range(1, len(cps)) if instance in (cps[j][key] or ()))


async def test_a_real_loop_export_imports(loop_export, loop_target):
    assert len(await loop_target.import_thread(json.loads(loop_export))) == 1


async def test_changed_naming_an_instance_node_states_lack_is_rejected(loop_export, loop_target):
    doc = json.loads(loop_export)
    j = first_with(doc, "model#1", "changed")
    del doc["runs"][0]["checkpoints"][j]["node_states"]["model#1"]
    assert f"{at(doc, 0, 'checkpoints', j)}: changed names node(s) 'model#1', which node_states lack" \
        in await rejected(loop_target, doc)


async def test_node_states_dropping_an_instance_the_checkpoint_before_held_are_rejected(loop_export, loop_target):
    doc = json.loads(loop_export)
    j = first_with(doc, "model#1", "node_states")
    j = next(k for k in range(j + 1, len(doc["runs"][0]["checkpoints"]))
             if "model#1" not in doc["runs"][0]["checkpoints"][k]["changed"])
    del doc["runs"][0]["checkpoints"][j]["node_states"]["model#1"]
    message = await rejected(loop_target, doc)
    assert message.startswith(f"{at(doc, 0, 'checkpoints', j)}: node_states lack node(s) 'model#1', which the "
                              f"checkpoint before it holds")   # the one problem: not also the next checkpoint's


# --------------------------------------------------------------------------- statuses


@pytest.mark.parametrize("status", ["running", "queued"])
async def test_a_run_that_is_not_at_rest_is_rejected(doc, target, status):
    run_of(doc, 0)["status"] = status
    assert f"{at(doc, 0, 'run')}: status '{status}': an export holds stopped runs" in await rejected(target, doc)


async def test_a_run_holding_a_lease_is_rejected(doc, target):
    run_of(doc, 1).update(lease_owner="elsewhere:1:abc", lease_expires_at=4_000_000_000.0)
    assert f"{at(doc, 1, 'run')}: holds a lease (lease_owner 'elsewhere:1:abc'" in await rejected(target, doc)


async def test_a_status_the_runs_events_did_not_record_is_rejected(doc, target):
    run_of(doc, 0)["status"] = "failed"
    assert f"{at(doc, 0, 'run')}: status is 'failed', but its last run event ({at(doc, 0, 'events', 17)}, " \
           f"run.succeed) recorded 'succeeded'" in await rejected(target, doc)


async def test_a_pending_interrupt_of_a_run_that_ended_is_rejected(doc, target):
    doc["runs"][0]["interrupts"][0]["status"] = "pending"
    assert f"{at(doc, 0, 'interrupts', 0)}: is pending, but the run is succeeded" in await rejected(target, doc)


async def test_an_interrupted_run_without_a_pending_interrupt_is_rejected(doc, target):
    doc["runs"][1]["interrupts"][0]["status"] = "cancelled"
    assert f"{at(doc, 1, 'run')}: the run is interrupted, but none of its interrupts is pending" \
        in await rejected(target, doc)


# --------------------------------------------------------------------------- references


async def test_a_parent_run_missing_from_the_document_is_rejected(doc, target):
    del doc["runs"][0]
    message = await rejected(target, doc)
    assert f"{at(doc, 0, 'run')}: parent {run_of(doc, 0)['parent_run_id']} is not earlier in the document" \
        in message


async def test_a_base_checkpoint_of_another_run_than_the_parent_is_rejected(doc, target):
    own = doc["runs"][1]["checkpoints"][1]["id"]
    run_of(doc, 1)["base_checkpoint_id"] = own
    assert f"{at(doc, 1, 'run')}: base checkpoint {own} belongs to run {run_of(doc, 1)['id']}, not to its parent" \
        in await rejected(target, doc)


async def test_a_base_checkpoint_missing_from_the_document_is_rejected(doc, target):
    run_of(doc, 1)["base_checkpoint_id"] = "cp_elsewhere"
    assert f"{at(doc, 1, 'run')}: base_checkpoint_id cp_elsewhere is not a checkpoint in the document" \
        in await rejected(target, doc)


async def test_a_branch_without_a_parent_is_rejected(doc, target):
    run_of(doc, 1)["parent_run_id"] = None
    assert f"{at(doc, 1, 'run')}: a fork run needs a parent_run_id" in await rejected(target, doc)


async def test_a_run_of_another_thread_is_rejected(doc, target):
    run_of(doc, 1)["thread_id"] = "thread_elsewhere"
    assert f"{at(doc, 1, 'run')}: belongs to thread thread_elsewhere" in await rejected(target, doc)


async def test_a_source_naming_a_run_outside_the_document_is_rejected(doc, target):
    run_of(doc, 1)["options"]["source"]["run_id"] = "run_elsewhere"
    assert f"{at(doc, 1, 'run')}: options.source.run_id 'run_elsewhere' is not a run in the document" \
        in await rejected(target, doc)


async def test_repeated_checkpoint_ids_are_rejected(doc, target):
    doc["runs"][1]["checkpoints"][2]["id"] = doc["runs"][0]["checkpoints"][4]["id"]
    assert f"{at(doc, 1, 'checkpoints', 2)}: checkpoint id" in await rejected(target, doc)


async def test_an_interrupt_that_exists_in_the_store_is_rejected_and_left_alone(doc, exported, target):
    await target.import_thread(json.loads(exported))
    held = (await target.interrupts(run_of(doc, 0)["id"], pending=False))[0]   # answered
    for item in doc["runs"]:  # the same thread under new run ids, its interrupts' ids kept
        for key in ("checkpoints", "pending_writes", "attempts", "journal", "interrupts", "events"):
            for row in item[key]:
                row["run_id"] += "x"
        item["run"]["id"] += "x"
    with pytest.raises(InvalidRequest, match=f"interrupt {held.id} already exists in this store"):
        await target.import_thread(doc)
    assert len(target.store.list_runs()) == 2
    assert await target.interrupts(held.run_id, pending=False) == [held]


# --------------------------------------------------------------------------- journal and interrupts


async def test_an_effect_left_started_in_a_succeeded_run_is_rejected(doc, target):
    doc["runs"][0]["journal"][1].update(status="started", result=None)
    assert f"{at(doc, 0, 'journal', 1)}: effect 'pay' #0 of node 'pay' ends 'started'" in await rejected(target, doc)


async def test_a_mocked_entry_without_its_result_is_rejected(doc, target):
    del doc["runs"][1]["journal"][0]["result"]
    assert f"{at(doc, 1, 'journal', 0)}: the entry of mocked effect 'pay' has no result field" \
        in await rejected(target, doc)


async def test_an_unknown_journal_status_is_rejected(doc, target):
    doc["runs"][0]["journal"][1]["status"] = "done"
    assert "runs[0].journal[1].status: Input should be 'started'" in await rejected(target, doc)


async def test_a_journal_entry_of_a_run_outside_the_lineage_is_rejected(doc, target):
    doc["runs"][1]["journal"][0]["run_id"] = run_of(doc, 0)["id"]
    assert f"{at(doc, 1, 'journal', 0)}: belongs to run {run_of(doc, 0)['id']}" in await rejected(target, doc)


async def test_an_interrupt_payload_that_is_not_an_object_is_rejected(doc, target):
    doc["runs"][1]["interrupts"][0]["payload"] = "ok?"
    assert f"{at(doc, 1, 'interrupts', 0)}: payload must be an object, got str" in await rejected(target, doc)


async def test_an_outcome_naming_a_missing_interrupt_is_rejected(doc, target):
    doc["runs"][0]["pending_writes"][1]["value"]["interrupt_id"] = "int_elsewhere"
    assert f"{at(doc, 0, 'pending_writes', 1)}: names interrupt 'int_elsewhere'" in await rejected(target, doc)


async def test_an_outcome_recorded_against_a_missing_checkpoint_is_rejected(doc, target):
    doc["runs"][0]["pending_writes"][3]["checkpoint_seq"] = 9
    assert f"{at(doc, 0, 'pending_writes', 3)}: checkpoint_seq 9 is not a checkpoint of the run" \
        in await rejected(target, doc)


async def test_an_outcome_value_that_is_not_an_object_is_rejected(doc, target):
    doc["runs"][0]["pending_writes"][3]["value"] = [2]
    assert f"{at(doc, 0, 'pending_writes', 3)}: value of a 'writes' outcome must be an object" \
        in await rejected(target, doc)


# --------------------------------------------------------------------------- run settings


@pytest.mark.parametrize("field, value, problem", [
    ("options.effects", "sometimes", "options.effects must be one of 'live', 'mock'"),
    ("options.patched", "yes", "options.patched must be true or false"),
    # a string would be read as a set of letters, a number not at all
    ("options.dropped_fields", "notes", "options.dropped_fields must list field names"),
    ("options.dropped_fields", [5], "options.dropped_fields must list field names"),
    ("limits.max_steps", "ten", "limits.max_steps must be a number"),
    ("usage.tokens", None, "usage.tokens must be a number"),
    ("max_concurrency", 0, "max_concurrency must be at least 1"),
])
async def test_run_settings_the_run_loop_cannot_read_are_rejected(doc, target, field, value, problem):
    holder = run_of(doc, 1)
    *path, last = field.split(".")
    for part in path:
        holder = holder[part]
    holder[last] = value
    assert f"{at(doc, 1, 'run')}: {problem}" in await rejected(target, doc)


# --------------------------------------------------------------------------- reporting


async def test_every_problem_is_reported_in_one_error(doc, target):
    doc["runs"][0]["attempts"][0]["node"] = "ghost"
    run_of(doc, 1)["max_concurrency"] = 0
    message = await rejected(target, doc)
    assert message.startswith("invalid exported thread (2 problems):\n")
    assert at(doc, 0, "attempts", 0) in message and at(doc, 1, "run") in message


@pytest.mark.parametrize("key, j, field", [("run", None, "id"), ("checkpoints", 1, "id"),
                                           ("checkpoints", 1, "source"), ("events", 2, "type")])
async def test_a_nul_in_an_id_or_name_is_rejected_on_every_store(loop_export, loop_target, key, j, field):
    """PostgreSQL's text columns cannot hold NUL: refused by name before anything is read or
    written, on every store alike (it failed with the driver's error, a run id even before the checks)."""
    doc = json.loads(loop_export)
    record = doc["runs"][0][key] if j is None else doc["runs"][0][key][j]
    record[field] = record[field][:3] + "\x00" + record[field][3:]
    message = await rejected(loop_target, doc)
    assert f".{field}: holds a NUL character, which no id or name may" in message


@pytest.mark.parametrize("key, j, field", [("run", None, "created_at"), ("events", 2, "at"),
                                           ("checkpoints", 1, "created_at"), ("attempts", 0, "ended_at")])
@pytest.mark.parametrize("value", [1796526108815.0, -1.0, 1e300])
async def test_a_time_no_calendar_shows_is_rejected_with_its_path(doc, target, key: str, j: int | None,
                                                                  field: str, value: float):
    """Milliseconds given for seconds, say: stored, every page showing the run failed."""
    (doc["runs"][0][key] if j is None else doc["runs"][0][key][j])[field] = value
    where = f"runs[0].{key}" + ("" if j is None else f"[{j}]") + f".{field}"
    assert f"{where}: is {value!r}, not a time: seconds since 1970-01-01 UTC" in await rejected(target, doc)


@pytest.mark.parametrize("key, j", [("run", None), ("checkpoints", 1)])
@pytest.mark.parametrize("value", ["run?x=1#top", "a/b", "50%", "a\\b", "tab\there", "  "])
async def test_an_id_that_cannot_name_a_page_is_rejected(doc, target, key: str, j: int | None, value: str):
    """A run's or a checkpoint's id is a segment of the debugger's addresses: stored with a '?'
    or a '#', every link to it led elsewhere."""
    record = doc["runs"][0][key] if j is None else doc["runs"][0][key][j]
    record["id"] = value
    where = f"runs[0].{key}" + ("" if j is None else f"[{j}]") + ".id"
    assert f"{where}: is {value!r}: an id names a page of the debugger" in await rejected(target, doc)
