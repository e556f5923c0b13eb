"""server.present: the text lines and JSON views the command line prints and the
web handlers render, from real records and a real run."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from runtime import Graph, MemoryStore, NodeStatus, Runtime, SqlStore
from runtime.core.records import EffectStatus, JournalEntry, NodeAttempt
from server.present import (
    attempt_json,
    attempt_line,
    journal_json,
    journal_line,
    load_run_view,
    plain,
    run_line,
    value_text,
)

ATTEMPT = NodeAttempt(run_id="run_1", node="charge", attempt=2, status=NodeStatus.FAILED, started_at=10.0,
                      ended_at=10.25, error_class="transient", error="timeout", decision="retry in 2 s")
ENTRY = JournalEntry(run_id="run_1", node="charge", name="payments.charge", occurrence=0, attempt=1,
                     key="k1", status=EffectStatus.SUCCEEDED, request={"amount": 5}, result="rcpt-1")


class State(BaseModel):
    n: int = 0


class Items(BaseModel):
    items: list[int] = []


def graph() -> Graph:
    g = Graph("present_demo", state=State)

    @g.node()
    def step(state: State) -> dict[str, int]:
        return {"n": state.n + 1}

    return g


def test_plain_gives_json_data_with_enum_values():
    data = plain(ATTEMPT)
    assert data["status"] == "failed" and type(data["status"]) is str
    assert json.loads(json.dumps(data)) == data


def test_attempt_line_shows_status_duration_error_and_decision():
    assert attempt_line(ATTEMPT) == "  charge #2  failed      0.250s  transient: timeout  (retry in 2 s)"


def test_attempt_json_adds_the_duration():
    assert attempt_json(ATTEMPT)["duration_s"] == 0.25


def test_journal_line_shows_identity_status_request_and_result():
    assert journal_line(ENTRY) == ('  charge  payments.charge #0 (attempt 1)  succeeded  '
                                   'request {"amount": 5}  result "rcpt-1"')


def test_journal_line_shows_the_error_of_a_failed_effect():
    failed = JournalEntry(run_id="run_1", node="charge", name="payments.charge", occurrence=0, attempt=1,
                          key="k1", status=EffectStatus.FAILED, request={}, error="card declined")
    assert journal_line(failed).endswith("failed  request {}  error: card declined")


def test_journal_json_is_json_data():
    assert journal_json(ENTRY)["status"] == "succeeded" and journal_json(ENTRY)["request"] == {"amount": 5}


def test_value_text_cuts_a_long_value_with_an_ellipsis():
    assert value_text("x" * 50, 10) == '"xxxxxxxx…' and value_text([1, 2]) == "[1, 2]"


async def test_run_view_of_a_real_run(tmp_path: Path):
    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'a.db'}"))
    try:
        run = await rt.start(graph(), {"n": 4})
        view = await load_run_view(rt, run.id)
    finally:
        rt.close()
    doc = view.to_json()
    assert list(doc) == ["run", "checkpoints", "state", "interrupts", "children", "unused_mocks", "uncalled_mocks",
                         "sent"]
    assert doc["run"]["status"] == "succeeded" and doc["state"] == {"n": 5} and doc["children"] == []
    assert doc["unused_mocks"] == doc["uncalled_mocks"] == [] and doc["sent"] == {}
    lines = view.lines()
    assert lines[0].startswith(f"{run.id}  succeeded") and lines[-1] == 'state: {"n": 5}'


async def test_run_line_names_the_instance_a_run_failed_in():
    g = Graph("present_map", state=Items)

    @g.node(map_over="items")
    def work(state: Items, item: int) -> dict[str, int]:
        if item == 2:
            raise RuntimeError("no answer for 2")
        return {}

    rt = Runtime(store=MemoryStore())
    try:
        run = await rt.start(g, {"items": [1, 2, 3]})
    finally:
        rt.close()
    assert run_line(run).endswith("  internal: RuntimeError: no answer for 2 (node work[1])")
