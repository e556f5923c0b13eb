"""The JSON API over a real SQLite store: every route's round trip, its errors (404 for
unknown ids, 409 for conflicts, 422 naming the field for invalid input, never 500),
rejected actions that leave the store as it was, export/import between two stores,
the token rule, the body size limit, and the OpenAPI document."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import pytest
from waiting import AnHourLater, wait_for
from litestar import Litestar
from local_client import TestClient
from pydantic import BaseModel

from runtime import Graph, InvalidRequest, NodeContext, Runtime, RunStatus, SqlStore, append
from server.present import plain
from server.web import api, services
from server.web.app import MAX_BODY, MAX_IMPORT_BODY, create_app

if TYPE_CHECKING:
    from conftest import Seeded

Client = TestClient[Any]
MakeApp = Callable[..., Litestar]



def store_contents(rt: Runtime) -> tuple[Any, ...]:
    """Everything a rejected action must leave alone: runs, interrupts, trace events."""
    runs = rt.store.list_runs(None, None, 1000)
    return (plain(runs), plain(rt.store.interrupts(None, None)),
            {r.id: plain(rt.store.events(r.id)) for r in runs})


def error(response: Any, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["status"] == status
    message: str = body["error"]
    return message


def pages(client: Client, path: str, key: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Every item of a paged list, following ``next_after`` while ``has_more``."""
    items: list[dict[str, Any]] = []
    params: dict[str, int] = {} if limit is None else {"limit": limit}
    while True:
        r = client.get(path, params=params)
        assert r.status_code == 200, r.text
        page = r.json()
        assert len(page[key]) <= (limit or 1000) and (page[key] or not page["has_more"])
        items += page[key]
        if not page["has_more"]:
            return items
        params["after"] = page["next_after"]


def checkpoints(client: Client, run_id: str) -> list[dict[str, Any]]:
    return pages(client, f"/api/runs/{run_id}/checkpoints", "checkpoints")


def pending_interrupt(client: Client, run_id: str) -> dict[str, Any]:
    found = client.get("/api/interrupts", params={"run_id": run_id}).json()["interrupts"]
    assert len(found) == 1
    return dict(found[0])


# ------------------------------------------------------------------ reads


def test_runs_list_filters_by_status_graph_kind_and_search(shared: Seeded, reader: Client) -> None:
    every = reader.get("/api/runs").json()
    assert {r["id"] for r in every["runs"]} == {shared.succeeded, shared.failed, shared.interrupted,
                                                 shared.mapped, shared.looped}
    assert every["page"] == 1 and every["has_next"] is False
    assert [r["id"] for r in reader.get("/api/runs?status=failed").json()["runs"]] == [shared.failed]
    assert [r["id"] for r in reader.get("/api/runs?graph=api_map").json()["runs"]] == [shared.mapped]
    assert len(reader.get("/api/runs?kind=main").json()["runs"]) == 5
    assert reader.get("/api/runs?kind=fork").json()["runs"] == []
    found = reader.get("/api/runs", params={"q": shared.looped[-8:]}).json()
    assert [r["id"] for r in found["runs"]] == [shared.looped] and found["filters"] == {"q": shared.looped[-8:]}


def test_runs_list_pages(reader: Client) -> None:
    first = reader.get("/api/runs?per_page=2").json()
    second = reader.get("/api/runs?per_page=2&page=2").json()
    last = reader.get("/api/runs?per_page=2&page=3").json()
    assert first["has_next"] and second["has_next"] and not last["has_next"]
    ids = [r["id"] for p in (first, second, last) for r in p["runs"]]
    assert len(ids) == len(set(ids)) == 5


@pytest.mark.parametrize(("query", "field"), [("status=nope", "status"), ("kind=nope", "kind"),
                                              ("page=abc", "page"), ("page=0", "page"), ("per_page=0", "per_page"),
                                              ("per_page=100000", "per_page")])
def test_runs_list_rejects_a_bad_parameter_naming_it(reader: Client, query: str, field: str) -> None:
    assert field in error(reader.get(f"/api/runs?{query}"), 422)


def test_one_run_has_its_state_and_where_its_checkpoints_are(shared: Seeded, reader: Client) -> None:
    doc = reader.get(f"/api/runs/{shared.succeeded}").json()
    assert doc["run"]["status"] == "succeeded" and doc["run"]["graph_name"] == "api_order"
    assert doc["state"] == {"order_id": 7, "amount": 70, "receipt": "rcpt-7", "hold": False}
    cps = checkpoints(reader, shared.succeeded)
    assert doc["checkpoint_count"] == len(cps) and doc["head_checkpoint_id"] == cps[-1]["id"]
    assert doc["interrupts"] == [] and doc["children"] == [] and doc["orphaned"] is False
    waiting = reader.get(f"/api/runs/{shared.interrupted}").json()
    assert waiting["run"]["status"] == "interrupted" and waiting["interrupts"][0]["node"] == "ask"


@pytest.mark.parametrize("path", ["/api/runs/run_nope", "/api/runs/run_nope/checkpoints", "/api/runs/run_nope/journal",
                                  "/api/runs/run_nope/attempts", "/api/runs/run_nope/events",
                                  "/api/runs/run_nope/report", "/api/runs/run_nope/export", "/api/threads/run_nope",
                                  "/api/checkpoints/cp_nope", "/api/interrupts?run_id=run_nope", "/api/nowhere"])
def test_unknown_ids_are_404_in_json(reader: Client, path: str) -> None:
    error(reader.get(path), 404)


def test_checkpoints_of_a_map_run_name_each_item(shared: Seeded, reader: Client) -> None:
    cps = checkpoints(reader, shared.mapped)
    assert [c["seq"] for c in cps] == list(range(len(cps)))
    assert "snapshot" not in cps[0] and "state" not in cps[0]
    last = cps[-1]
    assert {n: s for n, s in last["node_states"].items() if n.startswith("work")} == {
        "work": "succeeded", "work[0]": "succeeded", "work[1]": "succeeded", "work[2]": "succeeded"}
    view = reader.get(f"/api/checkpoints/{last['id']}").json()
    assert view["state"]["results"] == [0, 1, 4] and view["state"]["total"] == 5
    assert view["seq"] == last["seq"] and view["ready"] == [] and view["interrupted"] == []


def test_checkpoints_of_a_loop_run_name_each_iteration(shared: Seeded, reader: Client) -> None:
    last = checkpoints(reader, shared.looped)[-1]
    assert [n for n in last["node_states"] if n.startswith("model")] == ["model", "model#1"]
    state = reader.get(f"/api/checkpoints/{last['id']}").json()["state"]
    assert state["messages"] == ["user: go", "model 1", "tool 1", "model 2", "done"]


def test_a_checkpoint_waiting_on_a_question_says_so(shared: Seeded, reader: Client) -> None:
    last = checkpoints(reader, shared.interrupted)[-1]
    view = reader.get(f"/api/checkpoints/{last['id']}").json()
    assert view["interrupted"] == ["ask"] and view["state"]["title"] == "NOTES"


def test_journal_has_entries_and_how_each_effect_ended(shared: Seeded, reader: Client) -> None:
    doc = reader.get(f"/api/runs/{shared.succeeded}/journal").json()
    assert [(e["name"], e["status"]) for e in doc["entries"]] == [("payments.charge", "started"),
                                                                   ("payments.charge", "succeeded")]
    assert [(e["name"], e["label"], e["result"]) for e in doc["effects"]] == [("payments.charge", "LIVE", "rcpt-7")]


def test_attempts_carry_error_class_and_duration(shared: Seeded, reader: Client) -> None:
    attempts = reader.get(f"/api/runs/{shared.failed}/attempts").json()["attempts"]
    assert [(a["node"], a["status"]) for a in attempts] == [("first", "succeeded"), ("second", "failed")]
    assert attempts[1]["error_class"] == "invalid_input" and "n must be at least 1" in attempts[1]["error"]
    assert all(a["duration_s"] >= 0 for a in attempts)


def test_events_come_in_windows_that_cover_the_trace_once(shared: Seeded, reader: Client) -> None:
    every = reader.get(f"/api/runs/{shared.looped}/events?limit=1000").json()
    assert not every["has_more"]
    seqs: list[int] = []
    after = 0
    while True:
        page = reader.get(f"/api/runs/{shared.looped}/events", params={"after": after, "limit": 4}).json()
        assert len(page["events"]) <= 4
        seqs += [e["seq"] for e in page["events"]]
        after = page["next_after"]
        if not page["has_more"]:
            break
    assert seqs == [e["seq"] for e in every["events"]] == sorted(set(seqs))
    assert every["events"][0]["type"] == "run.created" and every["events"][-1]["type"] == "run.succeed"


def test_events_say_what_each_node_wrote(shared: Seeded, reader: Client) -> None:
    events = reader.get(f"/api/runs/{shared.looped}/events?limit=1000").json()["events"]
    succeeded = [e for e in events if e["type"] == "node.succeed"]
    writes = {(w.node, w.attempt): w.value for w in shared.rt.store.pending_writes(shared.looped)}
    assert succeeded and all(e["data"]["writes"] == writes[(e["node"], e["attempt"])] for e in succeeded)
    assert any(e["data"]["writes"] for e in succeeded)
    # a window of one event reads the same
    one = succeeded[-1]
    page = reader.get(f"/api/runs/{shared.looped}/events", params={"after": one["seq"] - 1, "limit": 1}).json()
    assert page["events"] == [one]


@pytest.mark.parametrize(("query", "field"), [("limit=0", "limit"), ("limit=1001", "limit"), ("after=-1", "after"),
                                              ("after=x", "after")])
def test_events_reject_a_bad_window_naming_it(shared: Seeded, reader: Client, query: str, field: str) -> None:
    assert field in error(reader.get(f"/api/runs/{shared.looped}/events?{query}"), 422)


class Count(BaseModel):
    turns: int = 0
    goal: int = 40


def long_loop() -> Graph:
    """A loop of 40 iterations: more checkpoints and events than one page of either."""
    g = Graph("api_long_loop", Count)

    @g.node(after=["again"], max_iterations=40)
    def step(s: Count) -> dict[str, Any]:
        return {"turns": s.turns + 1}

    @g.node(after=["step"], when=lambda s: s.turns < s.goal)
    def again(s: Count) -> dict[str, Any]:
        return {}

    return g


def test_a_long_run_is_read_a_bounded_page_at_a_time(seeded: Seeded, client: Client) -> None:
    run = asyncio.run(seeded.rt.start(long_loop(), {"goal": 40}))
    assert run.status == RunStatus.SUCCEEDED
    every_cp = [c.seq for c in seeded.rt.store.checkpoints(run.id)]
    every_ev = [e.seq for e in seeded.rt.store.events(run.id)]
    assert len(every_cp) > api.CHECKPOINTS_PER_PAGE and len(every_ev) > services.EVENTS_PER_PAGE
    first = client.get(f"/api/runs/{run.id}/checkpoints").json()
    assert [c["seq"] for c in first["checkpoints"]] == every_cp[:api.CHECKPOINTS_PER_PAGE]
    assert first["has_more"] and first["next_after"] == every_cp[api.CHECKPOINTS_PER_PAGE - 1]
    first = client.get(f"/api/runs/{run.id}/events").json()
    assert [e["seq"] for e in first["events"]] == every_ev[:services.EVENTS_PER_PAGE] and first["has_more"]
    for limit in (None, 7, 500):
        cps = pages(client, f"/api/runs/{run.id}/checkpoints", "checkpoints", limit)
        assert [c["seq"] for c in cps] == every_cp   # complete, in order, each once
        assert cps == [api.checkpoint_json(c) for c in seeded.rt.store.checkpoints(run.id)]
        evs = pages(client, f"/api/runs/{run.id}/events", "events", limit)
        assert [e["seq"] for e in evs] == every_ev
    last = client.get(f"/api/runs/{run.id}/checkpoints", params={"after": every_cp[-1]}).json()
    assert last == {"run_id": run.id, "checkpoints": [], "next_after": every_cp[-1], "has_more": False}


@pytest.mark.parametrize("run", ["succeeded", "failed", "interrupted", "mapped", "looped"])
def test_checkpoint_pages_of_every_kind_of_run_cover_its_history(shared: Seeded, reader: Client, run: str) -> None:
    run_id = getattr(shared, run)
    whole = [api.checkpoint_json(c) for c in shared.rt.store.checkpoints(run_id)]
    assert pages(reader, f"/api/runs/{run_id}/checkpoints", "checkpoints", 2) == whole


@pytest.mark.parametrize(("query", "field"), [("limit=0", "limit"), ("limit=501", "limit"), ("limit=-3", "limit"),
                                              ("limit=x", "limit"), ("after=-1", "after"), ("after=1.5", "after"),
                                              ("after=99999999999999999999", "after")])
def test_checkpoints_reject_a_bad_page_naming_it(shared: Seeded, reader: Client, query: str, field: str) -> None:
    message = error(reader.get(f"/api/runs/{shared.looped}/checkpoints?{query}"), 422)
    assert message.startswith(f"{field}:"), message


def test_a_page_past_the_end_is_empty(shared: Seeded, reader: Client) -> None:
    for path in ("checkpoints", "events"):
        page = reader.get(f"/api/runs/{shared.looped}/{path}", params={"after": 2**62}).json()
        assert page[path] == [] and not page["has_more"] and page["next_after"] == 2**62


def test_diff_between_two_checkpoints(shared: Seeded, reader: Client) -> None:
    cps = checkpoints(reader, shared.succeeded)
    doc = reader.get("/api/diff", params={"a": cps[0]["id"], "b": cps[-1]["id"]}).json()
    changes = {tuple(c["path"]): (c["op"], c.get("old"), c.get("new")) for c in doc["changes"]}
    assert changes == {("amount",): ("changed", 0, 70), ("receipt",): ("changed", "", "rcpt-7")}
    assert reader.get("/api/diff", params={"a": cps[0]["id"], "b": cps[0]["id"]}).json()["changes"] == []
    assert "'b'" in error(reader.get("/api/diff", params={"a": cps[0]["id"]}), 422)
    error(reader.get("/api/diff", params={"a": cps[0]["id"], "b": "cp_nope"}), 404)


def test_interrupts_filter_by_run_graph_kind_and_status(shared: Seeded, reader: Client) -> None:
    i = pending_interrupt(reader, shared.interrupted)
    assert i["graph_name"] == "api_review" and i["kind"] == "user" and i["status"] == "pending"
    assert i["payload"]["value"] == {"question": "publish NOTES?"} and "publish NOTES?" in i["question"]
    assert i["response_schema"]["required"] == ["approve"]
    assert [x["id"] for x in reader.get("/api/interrupts?graph=api_review&kind=user").json()["interrupts"]] == [i["id"]]
    assert reader.get("/api/interrupts?graph=api_order").json()["interrupts"] == []
    assert reader.get("/api/interrupts?kind=in_doubt").json()["interrupts"] == []
    assert reader.get(f"/api/interrupts?run_id={shared.succeeded}").json()["interrupts"] == []
    assert "kind" in error(reader.get("/api/interrupts?kind=bogus"), 422)
    assert "pending" in error(reader.get("/api/interrupts?pending=perhaps"), 422)


def test_report_of_a_run_that_is_not_a_replay_is_404(shared: Seeded, reader: Client) -> None:
    assert "not a replay" in error(reader.get(f"/api/runs/{shared.succeeded}/report"), 404)


# ------------------------------------------------------------------ answering


def test_an_answer_that_fails_the_response_model_is_422_and_changes_nothing(seeded: Seeded, client: Client) -> None:
    i = pending_interrupt(client, seeded.interrupted)
    before = store_contents(seeded.rt)
    url = f"/api/interrupts/{i['id']}/answer"
    assert "approve" in error(client.post(url, json={"answer": {"approve": "perhaps"}}), 422)
    assert "approve" in error(client.post(url, json={"answer": {"note": "no decision"}}), 422)
    assert "answer" in error(client.post(url, json={}), 422)
    assert "extra" in error(client.post(url, json={"answer": {"approve": True}, "extra": 1}), 422)
    assert "not valid JSON" in error(client.post(url, content=b'{"answer": tru'), 422)
    assert "object" in error(client.post(url, json=[{"approve": True}]), 422)
    assert "nests deeper" in error(client.post(url, content=b'{"answer": ' + b"[" * 5000 + b"]" * 5000 + b"}"), 422)
    assert "not accepted" in error(client.post(url, content=b'{"answer": {"approve": NaN}}'), 422)
    assert store_contents(seeded.rt) == before
    assert seeded.rt.store.get_run(seeded.interrupted).status == RunStatus.INTERRUPTED


def test_answering_resumes_the_run_and_records_who(seeded: Seeded, client: Client) -> None:
    i = pending_interrupt(client, seeded.interrupted)
    r = client.post(f"/api/interrupts/{i['id']}/answer", json={"answer": {"approve": True, "note": "fine"}})
    assert r.status_code == 202 and r.json() == {"run_id": seeded.interrupted}
    assert wait_for(seeded.rt, seeded.interrupted).status == RunStatus.SUCCEEDED
    state = client.get(f"/api/runs/{seeded.interrupted}").json()["state"]
    assert state["approved"] is True and state["note"] == "fine"
    events = client.get(f"/api/runs/{seeded.interrupted}/events?limit=1000").json()["events"]
    answered = [e for e in events if e["type"] == "interrupt.answered"]
    assert [e["data"] for e in answered] == [{"interrupt_id": i["id"], "by": "local"}]
    every = client.get("/api/interrupts?pending=false").json()["interrupts"]
    assert [(x["id"], x["status"], x["answer"]) for x in every] == [(i["id"], "answered", {"approve": True,
                                                                                        "note": "fine"})]
    assert "cannot be answered again" in error(
        client.post(f"/api/interrupts/{i['id']}/answer", json={"answer": {"approve": False}}), 409)


def test_answering_an_unknown_interrupt_is_404(reader: Client) -> None:
    error(reader.post("/api/interrupts/int_nope/answer", json={"answer": 1}), 404)


# ------------------------------------------------------------------ forks


def test_a_fork_with_a_patch_runs_in_the_background_and_shows_in_the_thread(seeded: Seeded, client: Client) -> None:
    base = checkpoints(client, seeded.failed)[1]   # after `first`, before `second`
    r = client.post(f"/api/checkpoints/{base['id']}/fork", json={"patch": {"n": 2}})
    assert r.status_code == 202
    fork_id = r.json()["run_id"]
    run = wait_for(seeded.rt, fork_id)
    assert run.status == RunStatus.SUCCEEDED and run.parent_run_id == seeded.failed
    doc = client.get(f"/api/runs/{fork_id}").json()
    assert doc["run"]["kind"] == "fork" and doc["state"]["log"] == ["first", "second with n=2"]
    thread = client.get(f"/api/threads/{seeded.failed}").json()
    assert [(b["run"]["id"], b["depth"], b["patched"]) for b in thread["runs"]] == [
        (seeded.failed, 0, []), (fork_id, 1, ["n"])]
    assert thread["runs"][1]["base_seq"] == base["seq"]
    assert thread["state"]["log"] == ["first", "second with n=2"]


@pytest.mark.parametrize(("body", "named"), [
    ({"patch": {"bogus": 1}}, "bogus"),
    ({"patch": {"n": "two"}}, "n"),
    ({"patch": [1]}, "patch"),
    ({"patch": {"n": 2}, "effects": "maybe"}, "effects"),
    ({"mocks": ["payments.charge"]}, "mocks"),
    ({"patch": {"n": 2}, "sideways": True}, "sideways"),
    (b'{"patch": {"n": 2}', "not valid JSON"),
    (b'{"patch": {"n": 1e400}}', "too large"),
    (b"\xff\xfe", "UTF-8"),
    ("a string", "object"),
])
def test_an_invalid_fork_is_422_naming_the_field_and_writes_nothing(seeded: Seeded, client: Client, body: Any,
                                                                      named: str) -> None:
    base = checkpoints(client, seeded.failed)[1]
    before = store_contents(seeded.rt)
    url = f"/api/checkpoints/{base['id']}/fork"
    r = client.post(url, content=body) if isinstance(body, bytes) else client.post(url, json=body)
    assert named in error(r, 422)
    assert store_contents(seeded.rt) == before


def test_forking_an_unknown_checkpoint_is_404(reader: Client) -> None:
    error(reader.post("/api/checkpoints/cp_nope/fork", json={}), 404)


# ------------------------------------------------------------------ resume, cancel, compensate


def test_resuming_a_failed_run_starts_a_continuation(seeded: Seeded, client: Client) -> None:
    r = client.post(f"/api/runs/{seeded.failed}/resume")
    assert r.status_code == 202
    cont = wait_for(seeded.rt, r.json()["run_id"])
    assert cont.id != seeded.failed and cont.parent_run_id == seeded.failed
    assert cont.kind.value == "continuation" and cont.status == RunStatus.FAILED   # `second` still fails
    assert client.get(f"/api/runs/{seeded.failed}").json()["children"] == [cont.id]


def test_resume_conflicts_and_mistakes(seeded: Seeded, client: Client) -> None:
    assert "already succeeded" in error(client.post(f"/api/runs/{seeded.succeeded}/resume"), 409)
    assert "answer its interrupts" in error(client.post(f"/api/runs/{seeded.interrupted}/resume", json={}), 409)
    error(client.post("/api/runs/run_nope/resume"), 404)
    assert "answers" in error(client.post(f"/api/runs/{seeded.failed}/resume", json={"answers": {}}), 422)
    assert "nothing to answer" in error(
        client.post(f"/api/runs/{seeded.failed}/resume", json={"answers": {"int_x": 1}}), 409)
    # continued once: the run's state, not the request, refuses a second continuation
    cont = wait_for(seeded.rt, client.post(f"/api/runs/{seeded.failed}/resume").json()["run_id"])
    before = store_contents(seeded.rt)
    said = error(client.post(f"/api/runs/{seeded.failed}/resume"), 409)
    assert said == f"run {seeded.failed} was already continued by {cont.id}; resume that run instead"
    assert store_contents(seeded.rt) == before


def test_a_replay_of_an_unknown_id_says_it_names_no_run_or_checkpoint(reader: Client) -> None:
    assert error(reader.post("/api/runs/nope/replay"), 404) == "no run or checkpoint with id 'nope'"


class Panel(BaseModel):
    reviewers: list[str] = ["ana", "ben", "cy"]
    votes: Annotated[list[str], append] = []


class Vote(BaseModel):
    approve: bool


def panel_graph() -> Graph:
    """Every reviewer is asked at once: a paused run with one question per map item."""
    g = Graph("api_panel", Panel)

    @g.node(map_over="reviewers")
    async def vote(s: Panel, ctx: NodeContext, item: str) -> dict[str, Any]:
        answer = await ctx.interrupt({"question": f"{item}, approve?"}, response=Vote)
        return {"votes": [f"{item}:{'yes' if answer.approve else 'no'}"]}

    return g


def paused_panel(seeded: Seeded, client: Client) -> tuple[str, list[str]]:
    """A run of ``panel_graph`` waiting for its three questions; their ids in item order."""
    run = asyncio.run(seeded.rt.start(panel_graph(), {}))
    assert run.status == RunStatus.INTERRUPTED
    found = client.get("/api/interrupts", params={"run_id": run.id}).json()["interrupts"]
    by_node = {i["node"]: i["id"] for i in found}
    assert sorted(by_node) == ["vote[0]", "vote[1]", "vote[2]"]
    return run.id, [by_node[f"vote[{k}]"] for k in range(3)]


def test_resume_answers_every_question_of_a_paused_run_at_once(seeded: Seeded, client: Client) -> None:
    run_id, ids = paused_panel(seeded, client)
    answers = {ids[2]: {"approve": False}, ids[0]: {"approve": True}, ids[1]: {"approve": True}}
    r = client.post(f"/api/runs/{run_id}/resume", json={"answers": answers})
    assert r.status_code == 202 and r.json() == {"run_id": run_id}
    assert wait_for(seeded.rt, run_id).status == RunStatus.SUCCEEDED
    assert client.get(f"/api/runs/{run_id}").json()["state"]["votes"] == ["ana:yes", "ben:yes", "cy:no"]
    events = client.get(f"/api/runs/{run_id}/events?limit=1000").json()["events"]
    answered = [e["data"] for e in events if e["type"] == "interrupt.answered"]
    assert sorted(answered, key=lambda d: ids.index(d["interrupt_id"])) == [
        {"interrupt_id": i, "by": "local"} for i in ids]
    again = client.post(f"/api/runs/{run_id}/resume", json={"answers": {ids[0]: {"approve": False}}})
    assert "already succeeded" in error(again, 409)


def test_some_answers_move_the_run_and_it_pauses_again_for_the_rest(seeded: Seeded, client: Client) -> None:
    run_id, ids = paused_panel(seeded, client)
    r = client.post(f"/api/runs/{run_id}/resume", json={"answers": {ids[1]: {"approve": True}}})
    assert r.status_code == 202
    assert wait_for(seeded.rt, run_id).status == RunStatus.INTERRUPTED
    pending = client.get("/api/interrupts", params={"run_id": run_id}).json()["interrupts"]
    assert sorted(i["id"] for i in pending) == sorted([ids[0], ids[2]])   # the same questions, not new ones
    assert "already answered" in error(
        client.post(f"/api/runs/{run_id}/resume", json={"answers": {ids[1]: {"approve": False}}}), 409)
    r = client.post(f"/api/runs/{run_id}/resume", json={"answers": {ids[0]: {"approve": False},
                                                                    ids[2]: {"approve": True}}})
    assert r.status_code == 202
    assert wait_for(seeded.rt, run_id).status == RunStatus.SUCCEEDED
    assert client.get(f"/api/runs/{run_id}").json()["state"]["votes"] == ["ana:no", "ben:yes", "cy:yes"]


@pytest.mark.parametrize(("answers", "named"), [
    ({"good": {"approve": True}, "bad": {"approve": "perhaps"}}, "approve"),
    ({"good": {"approve": True}, "int_nope": {"approve": True}}, "int_nope"),
    ({}, "at least one"),
    ([{"approve": True}], "answers"),
])
def test_one_bad_answer_among_many_is_422_and_no_question_is_answered(seeded: Seeded, client: Client,
                                                                      answers: Any, named: str) -> None:
    run_id, ids = paused_panel(seeded, client)
    if isinstance(answers, dict):
        answers = {ids[0] if k == "good" else ids[1] if k == "bad" else k: v for k, v in answers.items()}
    before = store_contents(seeded.rt)
    assert named in error(client.post(f"/api/runs/{run_id}/resume", json={"answers": answers}), 422)
    assert store_contents(seeded.rt) == before
    assert seeded.rt.store.get_run(run_id).status == RunStatus.INTERRUPTED


def test_resume_and_fork_take_new_limits(seeded: Seeded, client: Client) -> None:
    r = client.post(f"/api/runs/{seeded.failed}/resume", json={"max_steps": 40, "max_cost": 2.5, "deadline": 60})
    assert r.status_code == 202
    cont = wait_for(seeded.rt, r.json()["run_id"])
    assert cont.limits["max_steps"] == 40 and cont.limits["max_cost"] == 2.5 and cont.limits["deadline_s"] == 60
    start = checkpoints(client, seeded.failed)[0]   # before `first`: the fork has two nodes to run
    r = client.post(f"/api/checkpoints/{start['id']}/fork", json={"patch": {"n": 2}, "max_steps": 1})
    assert r.status_code == 202
    fork = wait_for(seeded.rt, r.json()["run_id"])
    assert fork.limits["max_steps"] == 1
    assert fork.status == RunStatus.FAILED and fork.error is not None
    assert fork.error["class"] == "limit_exceeded" and "max_steps=1" in fork.error["message"]


@pytest.mark.parametrize(("body", "named"), [
    ({"max_steps": 0}, "max_steps"),
    ({"max_steps": 2.5}, "max_steps"),
    ({"max_tokens": "many"}, "max_tokens"),
    ({"max_cost": -1}, "max_cost"),
    ({"deadline": 1e400}, "too large"),
    ({"deadline": 0}, "deadline"),
])
def test_a_bad_limit_is_422_naming_it_and_writes_nothing(seeded: Seeded, client: Client, body: Any,
                                                         named: str) -> None:
    base = checkpoints(client, seeded.failed)[1]
    before = store_contents(seeded.rt)
    for url in (f"/api/runs/{seeded.failed}/resume", f"/api/checkpoints/{base['id']}/fork"):
        r = client.post(url, content=json.dumps(body).encode() if body.get("deadline") != 1e400
                        else b'{"deadline": 1e400}')
        assert named in error(r, 422)
    assert store_contents(seeded.rt) == before


@pytest.mark.parametrize(("body", "said", "raw"), [
    ({"max_steps": 0}, "max_steps: must be a whole number of at least 1",
     {"loc": ["max_steps"], "type": "greater_than_equal", "msg": "Input should be greater than or equal to 1"}),
    ({"max_steps": 2.5}, "max_steps: must be a whole number of at least 1",
     {"loc": ["max_steps"], "type": "int_type", "msg": "Input should be a valid integer"}),
    ({"max_cost": -1}, "max_cost: must be a number above 0",
     {"loc": ["max_cost"], "type": "greater_than", "msg": "Input should be greater than 0"}),
    ({"effects": "maybe"}, "effects: must be one of 'mock' or 'live'",
     {"loc": ["effects"], "type": "literal_error", "msg": "Input should be 'mock' or 'live'"}),
    ({"patch": [1]}, "patch: must be a JSON object (state fields to change at the checkpoint)",
     {"loc": ["patch"], "type": "dict_type", "msg": "Input should be a valid dictionary"}),
    ({"patch": {"n": "two"}}, "patch.n: must be a whole number",
     {"loc": ["patch", "n"], "type": "int_parsing",
      "msg": "Input should be a valid integer, unable to parse string as an integer"}),
])
def test_a_refused_body_says_what_the_field_expects_with_the_validators_words_as_details(
        seeded: Seeded, client: Client, body: Any, said: str, raw: dict[str, Any]) -> None:
    base = checkpoints(client, seeded.failed)[1]
    before = store_contents(seeded.rt)
    r = client.post(f"/api/checkpoints/{base['id']}/fork", json=body)
    assert error(r, 422) == said
    assert r.json()["details"] == [raw]
    assert store_contents(seeded.rt) == before


def test_an_unknown_field_is_named_with_the_fields_the_route_takes(seeded: Seeded, client: Client) -> None:
    r = client.post(f"/api/runs/{seeded.succeeded}/replay", json={"graph": "x"})
    assert error(r, 422) == "graph: is not a field of this request (it takes: version, mocks, queue)"
    assert r.json()["details"] == [{"loc": ["graph"], "type": "extra_forbidden", "msg": "Extra inputs are not permitted"}]


def test_an_error_that_is_no_refused_body_has_no_details(seeded: Seeded, client: Client) -> None:
    r = client.post(f"/api/runs/{seeded.succeeded}/replay", json={"version": "nope"})
    assert "nope" in error(r, 422) and "details" not in r.json()


def test_cancel_a_running_run_then_it_has_ended(seeded: Seeded, client: Client) -> None:
    start = checkpoints(client, seeded.succeeded)[0]
    r = client.post(f"/api/checkpoints/{start['id']}/fork", json={"patch": {"hold": True}})
    held = r.json()["run_id"]
    wait_for(seeded.rt, held, [RunStatus.RUNNING])
    assert "running" in error(client.post(f"/api/runs/{held}/resume"), 409)
    assert "reason" in error(client.post(f"/api/runs/{held}/cancel", json={"reason": 3}), 422)
    assert "reason" in error(client.post(f"/api/runs/{held}/cancel", json={"reason": "x" * 501}), 422)
    assert "compensate a run once it has ended" in error(client.post(f"/api/runs/{held}/compensate"), 409)
    # a state that does not allow it is a conflict (409), not bad input
    assert "replay it once it has stopped" in error(client.post(f"/api/runs/{held}/replay", json={}), 409)
    assert "replay it once it has stopped" in error(
        client.post(f"/api/runs/{checkpoints(client, held)[0]['id']}/replay", json={}), 409)
    assert "export it once it has stopped" in error(client.get(f"/api/runs/{held}/export"), 409)
    r = client.post(f"/api/runs/{held}/cancel", json={"reason": "wrong order"})
    assert r.status_code == 202 and r.json() == {"run_id": held}
    run = wait_for(seeded.rt, held, [RunStatus.CANCELLED, RunStatus.FAILED, RunStatus.SUCCEEDED])
    assert run.status == RunStatus.CANCELLED and "wrong order" in str(run.error)
    assert "nothing to cancel" in error(client.post(f"/api/runs/{held}/cancel", json={}), 409)
    error(client.post("/api/runs/run_nope/cancel"), 404)


def test_compensate_undoes_live_effects_and_reports(seeded: Seeded, client: Client) -> None:
    assert "retry_in_doubt" in error(
        client.post(f"/api/runs/{seeded.succeeded}/compensate", json={"retry_in_doubt": "yes"}), 422)
    assert seeded.world.refunds == []
    r = client.post(f"/api/runs/{seeded.succeeded}/compensate", json={"retry_in_doubt": False})
    assert r.status_code == 200, r.text
    report = r.json()
    assert report["run_id"] == seeded.succeeded and report["complete"] is True
    assert [(s["name"], s["status"]) for s in report["steps"]] == [("payments.charge", "compensated")]
    assert seeded.world.refunds == ["rcpt-7"]
    effects = client.get(f"/api/runs/{seeded.succeeded}/journal").json()["effects"]
    assert [e["label"] for e in effects] == ["COMPENSATED"]
    again = client.post(f"/api/runs/{seeded.succeeded}/compensate").json()
    assert [s["status"] for s in again["steps"]] == ["already"] and seeded.world.refunds == ["rcpt-7"]
    error(client.post("/api/runs/run_nope/compensate"), 404)


def test_resuming_a_compensated_run_is_a_conflict(seeded: Seeded, client: Client) -> None:
    from runtime import Graph, NodeContext

    undone: list[str] = []
    g = Graph("api_undone")

    @g.node()
    async def book(s: Any, ctx: NodeContext) -> dict[str, Any]:
        await ctx.effect("hotel", lambda: "room-1", compensate=lambda info: undone.append(info.result))
        raise ValueError("then it fails")

    run = asyncio.run(seeded.rt.start(g, {}))
    assert run.status == RunStatus.FAILED
    assert client.post(f"/api/runs/{run.id}/compensate").json()["complete"] is True and undone == ["room-1"]
    assert "was compensated" in error(client.post(f"/api/runs/{run.id}/resume"), 409)
    assert [r.id for r in seeded.rt.store.list_runs(thread_id=run.thread_id)] == [run.id]   # nothing continued


# ------------------------------------------------------------------ replay


def test_replay_runs_in_the_background_and_reports_no_divergence(seeded: Seeded, client: Client) -> None:
    r = client.post(f"/api/runs/{seeded.succeeded}/replay", json={})
    assert r.status_code == 202
    replay_id = r.json()["run_id"]
    assert wait_for(seeded.rt, replay_id).status == RunStatus.SUCCEEDED
    report = client.get(f"/api/runs/{replay_id}/report").json()
    assert report["same"] is True and report["source_run_id"] == seeded.succeeded
    assert {n["node"] for n in report["nodes"]} == {"price", "charge"}
    assert seeded.world.charges == ["7"]   # the replay's charge was served from the journal


@pytest.mark.parametrize(("body", "named"), [({"version": "nope"}, "nope"), ({"mocks": 3}, "mocks"),
                                             ({"version": 3}, "version"), ({"graph": "x"}, "graph")])
def test_an_invalid_replay_is_422_and_writes_nothing(seeded: Seeded, client: Client, body: Any, named: str) -> None:
    before = store_contents(seeded.rt)
    assert named in error(client.post(f"/api/runs/{seeded.succeeded}/replay", json=body), 422)
    assert store_contents(seeded.rt) == before


# ------------------------------------------------------------------ export and import


def _thread_runs(client: Client, thread_id: str) -> list[dict[str, Any]]:
    runs = client.get("/api/runs", params={"q": thread_id}).json()["runs"]
    return sorted(({k: r[k] for k in ("id", "thread_id", "status", "kind", "graph_name", "parent_run_id")}
                   for r in runs if r["thread_id"] == thread_id), key=lambda r: r["id"])


def test_export_then_import_into_a_fresh_store_gives_the_same_runs(seeded: Seeded, client: Client,
                                                                   empty_rt: Runtime, make_app: MakeApp) -> None:
    base = checkpoints(client, seeded.failed)[1]
    fork_id = client.post(f"/api/checkpoints/{base['id']}/fork", json={"patch": {"n": 5}}).json()["run_id"]
    wait_for(seeded.rt, fork_id)
    document = client.get(f"/api/runs/{seeded.failed}/export").json()
    assert document["thread_id"] == seeded.failed
    with TestClient(make_app(empty_rt)) as other:
        r = other.post("/api/import", json=document)
        assert r.status_code == 201, r.text
        assert r.json()["thread_id"] == seeded.failed
        assert sorted(r.json()["run_ids"]) == sorted([seeded.failed, fork_id])
        assert _thread_runs(other, seeded.failed) == _thread_runs(client, seeded.failed)
        for run_id in (seeded.failed, fork_id):
            assert other.get(f"/api/runs/{run_id}").json()["state"] == client.get(f"/api/runs/{run_id}").json()["state"]
            assert checkpoints(other, run_id) == checkpoints(client, run_id)
        assert "already" in error(other.post("/api/import", json=document), 422)
        # its effects happened where it was exported from: going on here mocks them unless told
        assert other.get(f"/api/runs/{seeded.failed}").json()["run"]["options"]["imported"]["effects"] == "mock"


def test_an_import_can_take_a_thread_over_with_live_effects(seeded: Seeded, client: Client,
                                                           empty_rt: Runtime, make_app: MakeApp) -> None:
    document = client.get(f"/api/runs/{seeded.failed}/export").json()
    with TestClient(make_app(empty_rt)) as other:
        before = store_contents(empty_rt)
        assert "effects must be 'mock' or 'live'" in error(other.post("/api/import?effects=yes", json=document), 422)
        assert store_contents(empty_rt) == before
        r = other.post("/api/import?effects=live", json=document)
        assert r.status_code == 201, r.text
        assert other.get(f"/api/runs/{seeded.failed}").json()["run"]["options"]["imported"]["effects"] == "live"


@pytest.mark.parametrize(("body", "named"), [(b"", "empty"), (b"[]", "object"), (b"{}", "format"),
                                             (b'{"format": ', "not valid JSON")])
def test_an_invalid_import_is_422_and_writes_nothing(seeded: Seeded, client: Client, body: bytes, named: str) -> None:
    before = store_contents(seeded.rt)
    assert named in error(client.post("/api/import", content=body), 422)
    assert store_contents(seeded.rt) == before


def test_an_export_whose_checkpoint_lacks_an_instance_it_changed_is_422(seeded: Seeded, client: Client,
                                                                         empty_rt: Runtime, make_app: MakeApp) -> None:
    document = client.get(f"/api/runs/{seeded.looped}/export").json()
    cps = document["runs"][0]["checkpoints"]
    j, instance = next((j, n) for j, cp in enumerate(cps) if j for n in cp["changed"] if "#" in n)
    del cps[j]["node_states"][instance]
    with TestClient(make_app(empty_rt)) as other:
        message = error(other.post("/api/import", json=document), 422)
    assert f"checkpoints[{j}] (run {seeded.looped}): changed names node(s) {instance!r}" in message
    assert empty_rt.store.list_runs() == []


def test_a_body_over_the_limit_is_refused_with_413(reader: Client) -> None:
    r = reader.post(f"/api/runs/{'x' * 8}/resume", content=b" " * (MAX_BODY + 1))
    assert r.status_code == 413
    r = reader.post("/api/import", content=b" " * (MAX_IMPORT_BODY + 1))
    assert r.status_code == 413


def test_a_thread_forked_with_the_largest_patch_a_body_takes_imports_back(seeded: Seeded, client: Client,
                                                                          empty_rt: Runtime, make_app: MakeApp) -> None:
    """Its export holds the patched value several times over (the fork's options, its
    checkpoint's snapshot, its trace), more than any other body may hold: import takes it."""
    base = checkpoints(client, seeded.interrupted)[0]
    patch = {"doc": "x" * (MAX_BODY // 3)}
    fork_id = client.post(f"/api/checkpoints/{base['id']}/fork", json={"patch": patch}).json()["run_id"]
    wait_for(seeded.rt, fork_id)
    exported = client.get(f"/api/runs/{seeded.interrupted}/export").content
    assert len(exported) > MAX_BODY
    with TestClient(make_app(empty_rt)) as other:
        r = other.post("/api/import", content=exported, headers={"content-type": "application/json"})
        assert r.status_code == 201, r.text[:300]
        assert other.get(f"/api/runs/{fork_id}").json()["state"]["doc"] == patch["doc"]


# ------------------------------------------------------------------ the token rule


def test_serving_off_loopback_without_a_token_is_refused(seeded: Seeded) -> None:
    with pytest.raises(InvalidRequest, match="without a token"):
        create_app(seeded.rt, host="0.0.0.0")


def test_with_a_token_requests_need_it_and_answers_record_its_name(seeded: Seeded, make_app: MakeApp) -> None:
    with TestClient(make_app(seeded.rt, host="0.0.0.0", token="alice:s3cret")) as c:
        assert c.get("/api/runs").status_code == 401
        assert c.get("/api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
        auth = {"Authorization": "Bearer s3cret"}
        assert c.get("/api/runs", headers=auth).status_code == 200
        intr = c.get("/api/interrupts", headers=auth).json()["interrupts"][0]
        url = f"/api/interrupts/{intr['id']}/answer"
        assert c.post(url, json={"answer": {"approve": True}}).status_code == 401
        assert c.post(url, json={"answer": {"approve": True}}, headers=auth).status_code == 202
        wait_for(seeded.rt, intr["run_id"])
        events = c.get(f"/api/runs/{intr['run_id']}/events?limit=1000", headers=auth).json()["events"]
    answered = [e["data"] for e in events if e["type"] == "interrupt.answered"]
    assert answered == [{"interrupt_id": intr["id"], "by": "alice"}]


# ------------------------------------------------------------------ OpenAPI

ROUTES = {
    ("get", "/api/runs"), ("get", "/api/runs/{run_id}"), ("get", "/api/threads/{thread_id}"),
    ("get", "/api/runs/{run_id}/checkpoints"), ("get", "/api/checkpoints/{checkpoint_id}"),
    ("get", "/api/runs/{run_id}/journal"), ("get", "/api/runs/{run_id}/attempts"),
    ("get", "/api/runs/{run_id}/events"), ("get", "/api/diff"), ("get", "/api/runs/{run_id}/report"),
    ("get", "/api/runs/{run_id}/export"), ("post", "/api/runs/{run_id}/resume"),
    ("post", "/api/runs/{run_id}/cancel"), ("post", "/api/runs/{run_id}/compensate"),
    ("post", "/api/checkpoints/{checkpoint_id}/fork"), ("post", "/api/runs/{run_id}/replay"),
    ("post", "/api/import"), ("get", "/api/interrupts"), ("post", "/api/interrupts/{interrupt_id}/answer"),
}


def test_openapi_lists_every_route_with_its_body_and_statuses(reader: Client) -> None:
    assert reader.get("/schema").status_code == 200
    doc = reader.get("/schema/openapi.json").json()
    listed = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert listed == ROUTES
    fork = doc["paths"]["/api/checkpoints/{checkpoint_id}/fork"]["post"]
    limits = {"deadline", "max_steps", "max_tokens", "max_cost"}
    assert set(fork["requestBody"]["content"]["application/json"]["schema"]["properties"]) == {
        "patch", "effects", "mocks", "queue", *limits}
    resume = doc["paths"]["/api/runs/{run_id}/resume"]["post"]
    assert set(resume["requestBody"]["content"]["application/json"]["schema"]["properties"]) == {"answers", "queue", *limits}
    assert set(fork["responses"]) == {"202", "404", "422"}
    assert set(doc["paths"]["/api/import"]["post"]["responses"]) == {"201", "413", "422"}   # 413: past its own, larger, body limit
    assert set(doc["paths"]["/api/runs/{run_id}/compensate"]["post"]["responses"]) == {"200", "202", "404", "409", "422"}   # 202: left to a worker
    assert set(doc["paths"]["/api/runs/{run_id}/export"]["get"]["responses"]) == {"200", "404", "409"}
    assert set(doc["paths"]["/api/runs/{run_id}/replay"]["post"]["responses"]) == {"202", "404", "409", "422"}
    assert all("requestBody" in ops["post"] for ops in doc["paths"].values() if "post" in ops)


def test_api_handlers_declare_parameters_in_the_current_style() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with TestClient(Litestar(route_handlers=api.HANDLERS)) as c:
            assert c.get("/api/runs?page=abc").status_code == 422   # the router's own parameter errors


MALFORMED = [b"null", b"1", b"[]", b'"text"', b"{", b'{"zzz": 1}', b"[" * 3000 + b"]" * 3000, b"\x00"]


def test_no_malformed_body_is_a_500_or_changes_anything(seeded: Seeded, client: Client) -> None:
    cp = checkpoints(client, seeded.failed)[0]["id"]
    intr = pending_interrupt(client, seeded.interrupted)["id"]
    urls = [f"/api/runs/{seeded.failed}/resume", f"/api/runs/{seeded.interrupted}/cancel",
            f"/api/runs/{seeded.succeeded}/compensate", f"/api/checkpoints/{cp}/fork",
            f"/api/runs/{seeded.succeeded}/replay", "/api/import", f"/api/interrupts/{intr}/answer"]
    before = store_contents(seeded.rt)
    for url in urls:
        for body in MALFORMED:
            r = client.post(url, content=body, headers={"content-type": "application/json"})
            assert r.status_code == 422, (url, body[:20], r.status_code, r.text)
            assert r.json()["error"]
    assert store_contents(seeded.rt) == before


def test_an_event_cursor_past_any_store_is_refused_not_a_crash(shared: Seeded, reader: Client) -> None:
    r = reader.get(f"/api/runs/{shared.succeeded}/events", params={"after": 2 ** 70})
    assert r.status_code == 422 and "after" in r.json()["error"]


def test_cancelling_a_paused_run_whose_graph_this_server_lacks_ends_it_from_its_records(
        seeded: Seeded, make_app: MakeApp) -> None:
    """A server started over a store without the graphs' code still cancels a run that
    waits for an answer: nothing is in flight, so no code is needed to end it."""
    rt = Runtime(store=SqlStore(f"sqlite:///{seeded.path}"))   # no graphs registered
    try:
        with TestClient(make_app(rt)) as c:
            r = c.post(f"/api/runs/{seeded.interrupted}/cancel", json={"reason": "no longer needed"})
            assert r.status_code == 202, r.text
            run = wait_for(rt, seeded.interrupted, [RunStatus.CANCELLED])
            assert run.error == {"class": "cancelled", "message": "no longer needed"}
            questions = c.get("/api/interrupts", params={"run_id": seeded.interrupted, "pending": False}).json()[
                "interrupts"]
            assert questions and {q["status"] for q in questions} == {"cancelled"}
    finally:
        rt.close()


def test_cancelling_a_run_left_mid_step_needs_its_graph_and_says_so(
        seeded: Seeded, client: Client, make_app: MakeApp) -> None:
    """A run whose process stopped while it ran may have work in flight; taking it over
    to cancel it needs the graph's code. A server without it answers with the reason
    instead of accepting a cancel that then fails unseen, and the run stays as it was."""
    start = checkpoints(client, seeded.succeeded)[0]
    held = client.post(f"/api/checkpoints/{start['id']}/fork", json={"patch": {"hold": True}}).json()["run_id"]
    before = wait_for(seeded.rt, held, [RunStatus.RUNNING])
    rt = Runtime(store=SqlStore(f"sqlite:///{seeded.path}"), clock=AnHourLater())   # no graphs registered
    try:
        with TestClient(make_app(rt)) as c:
            message = error(c.post(f"/api/runs/{held}/cancel", json={"reason": "no longer needed"}), 404)
            assert "api_order" in message and "not registered" in message and "--graph MODULE:GRAPH" in message
            after = rt.store.get_run(held)
            assert (after.status, after.fence, after.lease_owner) == (RunStatus.RUNNING, before.fence,
                                                                      before.lease_owner)
    finally:
        rt.close()
    assert client.post(f"/api/runs/{held}/cancel", json={}).status_code == 202
    assert wait_for(seeded.rt, held, [RunStatus.CANCELLED]).status == RunStatus.CANCELLED
