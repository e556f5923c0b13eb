"""Answering every open question of a paused run in one submission, whatever shape each
answer has: a yes/no approval, an object with a text field, a bare number, any JSON, and
the runtime's own question about an effect. Through the real app (Litestar TestClient)
over a real SQLite store: the run's page of questions, its form, and the JSON API."""

from __future__ import annotations

import asyncio
import re
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from local_client import TestClient
from pydantic import BaseModel

from runtime import (EventType, Graph, Interrupt, InterruptKind, InterruptStatus, NodeContext, RunStatus, Runtime,
                     SqlStore)
from server.web.app import create_app

from e2e.mixed_questions import ask_four  # the browser journey's questions, one node each
from test_approvals import client, controls, rt, settle  # noqa: F401 - the same fixtures: an app over a fresh SQLite store

# --------------------------------------------------------------------------- graph


class Mixed(BaseModel):
    price: float = 1.0
    approved: bool | None = None
    name: str = ""
    amount: float = 0.0
    comment: Any = None
    receipt: str = ""


def mixed_graph() -> Graph:
    """Four questions asked at once, each wanting an answer of its own shape, next to a payment."""
    g = Graph("mixed", state=Mixed)
    ask_four(g)

    @g.node()
    async def charge(s: Mixed, ctx: NodeContext) -> dict[str, Any]:
        receipt = await ctx.effect("payments.charge", lambda: f"live-{s.price}", request={"price": s.price})
        return {"receipt": receipt}

    return g


# --------------------------------------------------------------------------- fixtures and helpers

def paused(rt: Runtime) -> tuple[str, dict[str, Interrupt]]:
    """A run of ``mixed_graph`` waiting on its four questions, by node."""
    run = asyncio.run(rt.start(mixed_graph(), {}))
    assert run.status == RunStatus.INTERRUPTED
    asked = {q.node: q for q in asyncio.run(rt.interrupts(run.id))}
    assert sorted(asked) == ["amount", "approve", "comment", "label"]
    return run.id, asked


def paused_fork(rt: Runtime) -> tuple[str, dict[str, Interrupt]]:
    """A fork whose changed price leaves the mocked charge without a record: the runtime asks
    about that effect too, next to the four questions for a person."""
    run_id, _ = paused(rt)
    first = asyncio.run(rt.history(run_id))[0]
    branch = asyncio.run(rt.fork(first.id, {"price": 5.0}))
    assert branch.status == RunStatus.INTERRUPTED
    asked = {q.node: q for q in asyncio.run(rt.interrupts(branch.id))}
    assert sorted(asked) == ["amount", "approve", "charge", "comment", "label"]
    assert asked["charge"].kind == InterruptKind.UNRECORDED
    return branch.id, asked


def field(i: Interrupt, name: str) -> str:
    """The form name of one of a question's inputs on the run's page of questions."""
    return f"{i.id}:f.{name}"


def good(asked: dict[str, Interrupt]) -> dict[str, str]:
    return {field(asked["approve"], "approve"): "true", field(asked["label"], "name"): "v2.1",
            field(asked["amount"], "answer"): "12.5", field(asked["comment"], "answer"): '{"tone": "calm"}'}


def post_all(client: TestClient[Any], run_id: str, fields: dict[str, str], *, htmx: bool = False) -> Any:
    url = f"/runs/{run_id}/answers"
    page = client.get(url)
    assert page.status_code == 200
    c = controls(page.text).controls
    data = {"_csrf_token": c["_csrf_token"]["value"], "_ids": c["_ids"]["value"], **fields}
    headers = {"HX-Request": "true"} if htmx else {}
    return client.post(url, data=data, headers=headers, follow_redirects=False)


def snapshot(rt: Runtime, run_id: str) -> tuple[Any, ...]:
    """What a refused submission must leave as it was."""
    run = asyncio.run(rt.get_run(run_id))
    return (run.status, run.fence, [(e.seq, e.type) for e in asyncio.run(rt.events(run_id))],
            len(asyncio.run(rt.history(run_id))), len(rt.store.list_runs(limit=1000)),
            [(i.id, i.status, i.answer) for i in asyncio.run(rt.interrupts(run_id, pending=False))])


def resumes(rt: Runtime, run_id: str) -> int:
    return sum(1 for e in asyncio.run(rt.events(run_id)) if e.type == EventType.RUN_RESUME)


def final_state(rt: Runtime, run_id: str) -> Any:
    return asyncio.run(rt.state_at(asyncio.run(rt.history(run_id))[-1].id))


def error_of(html: str, input_id: str) -> str:
    found = re.search(rf'id="{re.escape(input_id)}-error">([^<]*)<', html)
    assert found, input_id
    return unescape(found.group(1))


# --------------------------------------------------------------------------- the page

def test_every_open_question_is_on_one_form_with_inputs_for_its_own_shape(rt: Runtime, client: TestClient[Any]):
    run_id, asked = paused(rt)
    page = client.get(f"/runs/{run_id}/answers")
    assert page.status_code == 200
    html = page.text
    for q in ("Ship it?", "Name the release", "How much to refund?", "Anything to add?"):
        assert q in html
    c = controls(html).controls
    assert c[field(asked["approve"], "approve")]["type"] == "radio"             # a required yes/no: a choice
    assert c[field(asked["label"], "name")]["type"] == "text" and c[field(asked["label"], "name")]["minlength"] == "2"
    assert c[field(asked["amount"], "answer")]["type"] == "number"        # a bare number: a number input
    assert c[field(asked["comment"], "answer")]["tag"] == "textarea"     # no model: any JSON
    assert sorted(c["_ids"]["value"].split(",")) == sorted(q.id for q in asked.values())
    assert len(re.findall(r'<form class="stacked answer-form', html)) == 1
    # each question's own page and the run's page lead here
    assert f'href="/runs/{run_id}/answers"' in client.get(f"/interrupts/{asked['label'].id}").text
    assert f'href="/runs/{run_id}/answers"' in client.get(f"/runs/{run_id}").text


def test_a_run_with_nothing_to_answer_says_so(rt: Runtime, client: TestClient[Any]):
    run_id, asked = paused(rt)
    reply = post_all(client, run_id, good(asked))
    assert reply.status_code == 303
    settle(client)
    page = client.get(f"/runs/{run_id}/answers")
    assert page.status_code == 200 and "no open questions" in page.text and "answer-form" not in page.text
    assert client.get("/runs/run_nope/answers").status_code == 404


# --------------------------------------------------------------------------- answering them together

def test_questions_of_different_shapes_are_answered_together_and_the_run_resumes_once(
        rt: Runtime, client: TestClient[Any]):
    run_id, asked = paused(rt)
    assert resumes(rt, run_id) == 0
    reply = post_all(client, run_id, good(asked))
    assert reply.status_code == 303 and reply.headers["location"] == f"/runs/{run_id}"
    settle(client)
    assert asyncio.run(rt.get_run(run_id)).status == RunStatus.SUCCEEDED
    assert resumes(rt, run_id) == 1
    state = final_state(rt, run_id)
    assert (state.approved, state.name, state.amount, state.comment) == (True, "v2.1", 12.5, {"tone": "calm"})
    done = {i.node: i for i in asyncio.run(rt.interrupts(run_id, pending=False))}
    assert {n: (i.status, i.answer) for n, i in done.items()} == {
        "approve": (InterruptStatus.ANSWERED, {"approve": True}), "label": (InterruptStatus.ANSWERED, {"name": "v2.1"}),
        "amount": (InterruptStatus.ANSWERED, 12.5), "comment": (InterruptStatus.ANSWERED, {"tone": "calm"})}
    answered = [e.data for e in asyncio.run(rt.events(run_id)) if e.type == EventType.INTERRUPT_ANSWERED]
    assert sorted(d["interrupt_id"] for d in answered) == sorted(q.id for q in asked.values())
    assert all(d["by"] == "local" for d in answered)


def test_an_approval_left_unanswered_is_refused_naming_it_not_taken_for_no(rt: Runtime, client: TestClient[Any]):
    run_id, asked = paused(rt)
    before = snapshot(rt, run_id)
    fields = good(asked)
    del fields[field(asked["approve"], "approve")]
    reply = post_all(client, run_id, fields, htmx=True)
    assert reply.status_code == 422 and "HX-Redirect" not in reply.headers
    message = "Approve is required: choose Yes or No"
    assert error_of(reply.text, f"{asked['approve'].id}-f-approve") == message
    summary = reply.text[reply.text.index('class="problems"'):].split("</ul>")[0]
    assert asked["approve"].id in summary and "approve" in summary and message in summary
    settle(client)
    assert snapshot(rt, run_id) == before and before[0] == RunStatus.INTERRUPTED


@pytest.mark.parametrize(("choice", "approved"), [("true", True), ("false", False)])
def test_an_approval_answered_yes_or_no_is_that_answer(rt: Runtime, client: TestClient[Any], choice: str,
                                                       approved: bool):
    run_id, asked = paused(rt)
    fields = {**good(asked), field(asked["approve"], "approve"): choice}
    assert post_all(client, run_id, fields, htmx=True).headers["HX-Redirect"] == f"/runs/{run_id}"
    settle(client)
    assert final_state(rt, run_id).approved is approved


@pytest.mark.parametrize(("node", "name", "typed", "message"), [
    ("label", "name", "v", "Name must be at least 2 characters"),   # the model's own bound
    ("amount", "answer", "lots", "Answer must be a number"),        # a bare number
    ("comment", "answer", "{calm", "Answer (JSON) is not valid JSON"),   # any JSON, but JSON
    ("label", "name", "", "Name is required"),
])
def test_a_bad_answer_among_good_ones_is_refused_naming_its_question_and_field(
        rt: Runtime, client: TestClient[Any], node: str, name: str, typed: str, message: str):
    run_id, asked = paused(rt)
    before = snapshot(rt, run_id)
    bad = asked[node]
    reply = post_all(client, run_id, {**good(asked), field(bad, name): typed})
    assert reply.status_code == 422
    html = reply.text
    assert message in error_of(html, f"{bad.id}-f-{name}")
    summary = html[html.index('class="problems"'):].split("</ul>")[0]
    assert bad.id in summary and node in summary and message in summary and f"#{bad.id}-f-{name}" in summary
    for other in set(asked) - {node}:
        assert asked[other].id not in summary
    c = controls(html).controls          # what was typed stays, for every question
    assert controls(html).picked[field(asked["approve"], "approve")] == "true"
    if name == "name" and typed:
        assert c[field(bad, "name")]["value"] == typed
    settle(client)
    assert snapshot(rt, run_id) == before and before[0] == RunStatus.INTERRUPTED


def test_every_bad_answer_is_named_at_once(rt: Runtime, client: TestClient[Any]):
    run_id, asked = paused(rt)
    before = snapshot(rt, run_id)
    reply = post_all(client, run_id, {**good(asked), field(asked["label"], "name"): "v",
                                      field(asked["amount"], "answer"): "", })
    assert reply.status_code == 422
    assert "2 answers" in reply.text
    assert error_of(reply.text, f"{asked['amount'].id}-f-answer") == "Answer is required"
    assert "at least 2 characters" in error_of(reply.text, f"{asked['label'].id}-f-name")
    # over htmx only the form comes back, to be swapped in place
    reply = post_all(client, run_id, {**good(asked), field(asked["amount"], "answer"): "x"}, htmx=True)
    assert reply.status_code == 422 and "<html" not in reply.text and f'id="{asked["amount"].id}-f-answer-error"' in reply.text
    settle(client)
    assert snapshot(rt, run_id) == before


def test_the_runtimes_own_question_about_an_effect_is_answered_with_the_rest(rt: Runtime, client: TestClient[Any]):
    branch_id, asked = paused_fork(rt)
    charge = asked["charge"]
    page = controls(client.get(f"/runs/{branch_id}/answers").text)
    assert page.radios[field(charge, "action")] == ["mock", "live", "abort"]
    before = snapshot(rt, branch_id)
    reply = post_all(client, branch_id, {**good(asked), field(charge, "action"): "mock"})
    assert reply.status_code == 422
    assert "required when the decision is 'mock'" in error_of(reply.text, f"{charge.id}-f-result")
    assert snapshot(rt, branch_id) == before

    reply = post_all(client, branch_id, {**good(asked), field(charge, "action"): "mock",
                                         field(charge, "result"): '"rcpt-fake"'})
    assert reply.status_code == 303
    settle(client)
    assert asyncio.run(rt.get_run(branch_id)).status == RunStatus.SUCCEEDED
    assert resumes(rt, branch_id) == 1
    state = final_state(rt, branch_id)
    assert (state.receipt, state.name, state.amount) == ("rcpt-fake", "v2.1", 12.5)


def test_a_form_shown_before_the_questions_changed_is_refused(rt: Runtime, client: TestClient[Any]):
    run_id, asked = paused(rt)
    url = f"/runs/{run_id}/answers"
    c = controls(client.get(url).text).controls
    # meanwhile someone answers one of them alone, on its own page
    assert client.post(f"/api/interrupts/{asked['comment'].id}/answer", json={"answer": "done"}).status_code == 202
    settle(client)
    before = snapshot(rt, run_id)
    reply = client.post(url, data={"_csrf_token": c["_csrf_token"]["value"], "_ids": c["_ids"]["value"],
                                   **good(asked)}, follow_redirects=False)
    assert reply.status_code == 409 and "reload" in reply.text
    assert snapshot(rt, run_id) == before
    # reloaded, it shows the three still open, and answers them
    fields = {k: v for k, v in good(asked).items() if not k.startswith(asked["comment"].id)}
    assert post_all(client, run_id, fields).status_code == 303
    settle(client)
    assert asyncio.run(rt.get_run(run_id)).status == RunStatus.SUCCEEDED


def test_a_bare_number_question_gets_a_number_input_on_its_own_page_too(rt: Runtime, client: TestClient[Any]):
    run_id, asked = paused(rt)
    q = asked["amount"]
    page = client.get(f"/interrupts/{q.id}")
    c = controls(page.text).controls
    assert c["f.answer"]["type"] == "number" and "required" in c["f.answer"]
    token = c["_csrf_token"]["value"]
    reply = client.post(f"/interrupts/{q.id}/answer", data={"_csrf_token": token, "f.answer": "lots"},
                        follow_redirects=False)
    assert reply.status_code == 422 and error_of(reply.text, "f-answer") == "Answer must be a number"
    reply = client.post(f"/interrupts/{q.id}/answer", data={"_csrf_token": token, "f.answer": "7"},
                        follow_redirects=False)
    assert reply.status_code == 303
    settle(client)
    [done] = [i for i in asyncio.run(rt.interrupts(run_id, pending=False)) if i.id == q.id]
    assert done.answer == 7.0


# --------------------------------------------------------------------------- the JSON API

def api_error(reply: Any, status: int) -> str:
    assert reply.status_code == status, reply.text
    message: str = reply.json()["error"]
    return message


def test_the_api_answers_questions_of_different_shapes_at_once(rt: Runtime, client: TestClient[Any]):
    branch_id, asked = paused_fork(rt)
    answers = {asked["approve"].id: {"approve": False}, asked["label"].id: {"name": "v3"},
               asked["amount"].id: 4, asked["comment"].id: None,
               asked["charge"].id: {"action": "mock", "result": "rcpt-api"}}
    reply = client.post(f"/api/runs/{branch_id}/resume", json={"answers": answers})
    assert reply.status_code == 202 and reply.json() == {"run_id": branch_id}
    settle(client)
    assert asyncio.run(rt.get_run(branch_id)).status == RunStatus.SUCCEEDED and resumes(rt, branch_id) == 1
    state = final_state(rt, branch_id)
    assert (state.approved, state.name, state.amount, state.comment, state.receipt) == (
        False, "v3", 4.0, None, "rcpt-api")


def test_the_api_names_every_bad_answer_with_its_question_and_field_and_answers_none(
        rt: Runtime, client: TestClient[Any]):
    branch_id, asked = paused_fork(rt)
    before = snapshot(rt, branch_id)
    answers = {asked["approve"].id: {"approve": True}, asked["label"].id: {"name": 5},
               asked["amount"].id: "lots", asked["comment"].id: "fine",
               asked["charge"].id: {"action": "mock"}}
    reply = client.post(f"/api/runs/{branch_id}/resume", json={"answers": answers})
    message = api_error(reply, 422)
    assert "3 of 5 answers" in message
    problems = dict(re.findall(r"interrupt (int_\w+) (\([^)]*\): [^;]+)", message))
    assert set(problems) == {asked["label"].id, asked["amount"].id, asked["charge"].id}
    # what each expects in words; the response models' own words are the details
    assert problems[asked["label"].id] == "(node 'label', field 'name'): must be a string"
    assert problems[asked["amount"].id] == "(node 'amount'): must be a number"
    details = {(d["interrupt_id"], tuple(d["loc"])): d["msg"] for d in reply.json()["details"]}
    assert details[(asked["label"].id, ("name",))] == "Input should be a valid string"
    assert "valid number" in details[(asked["amount"].id, ())]
    assert "result" in problems[asked["charge"].id]
    assert f"interrupt {asked['label'].id} (node 'label'" in message
    settle(client)
    assert snapshot(rt, branch_id) == before

    # an answer to a question the run does not wait on is named in the same refusal
    message = api_error(client.post(f"/api/runs/{branch_id}/resume",
                                    json={"answers": {**answers, "int_bogus": 1}}), 422)
    assert "4 of 6 answers" in message and f"interrupt int_bogus: not a question of run {branch_id}" in message
    assert asked["label"].id in message
    settle(client)
    assert snapshot(rt, branch_id) == before

    # one question's own route says the same of its answer
    message = api_error(client.post(f"/api/interrupts/{asked['label'].id}/answer", json={"answer": {}}), 422)
    assert f"interrupt {asked['label'].id} (node 'label', field 'name')" in message and "required" in message
    assert snapshot(rt, branch_id) == before


class Crowd(BaseModel):
    items: list[int] = list(range(300))
    votes: list[bool] = []


def crowd_graph() -> Graph:
    """A map whose every item asks a question of its own."""
    g = Graph("crowd", state=Crowd)

    @g.node(map_over="items")
    async def ask(s: Crowd, ctx: NodeContext, item: int) -> dict[str, Any]:
        return {"votes": [bool(await ctx.interrupt({"question": f"keep {item}?"}))]}

    return g


def action_bar(html: str) -> str:
    return html.split('id="run-actions"', 1)[1].split("</div>", 1)[0]


def test_a_map_whose_every_item_asks_keeps_the_action_bar_to_a_few_questions(tmp_path: Path):
    # a runtime that lets all 300 items run at once, so all 300 questions are open together
    crowd_rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'crowd.db'}"), max_concurrency=300)
    try:
        run = asyncio.run(crowd_rt.start(crowd_graph(), {}))
        assert run.status == RunStatus.INTERRUPTED and len(asyncio.run(crowd_rt.interrupts(run.id))) == 300
        with TestClient(app=create_app(crowd_rt)) as crowd:
            bar = action_bar(crowd.get(f"/runs/{run.id}").text)
            assert bar.count('href="/interrupts/') == 3
            assert f'href="/runs/{run.id}/answers">Answer all 300<' in bar and "and 297 more" in bar
            assert bar.count(f'href="/runs/{run.id}/answers"') == 2
            assert crowd.get(f"/runs/{run.id}/answers").status_code == 200
    finally:
        crowd_rt.close()


@pytest.mark.parametrize("reviewers", [["ana"], ["ana", "ben", "cy"]])
def test_a_few_open_questions_each_keep_their_button(rt: Runtime, client: TestClient[Any], reviewers: list[str]):
    run = asyncio.run(rt.start(crowd_graph(), {"items": list(range(len(reviewers)))}))
    bar = action_bar(client.get(f"/runs/{run.id}").text)
    assert bar.count('href="/interrupts/') == len(reviewers) and "more" not in bar
    assert ("Answer all" in bar) == (len(reviewers) > 1)
