"""Approvals in the debugger: the inbox of pending questions, an interrupt's screen, the
answer form generated from the node's response model, and answering it — through the
real app (Litestar TestClient) over a real SQLite store."""

from __future__ import annotations

import asyncio
import enum
import json
import re
import warnings
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Annotated, Any

import pytest
from litestar import Litestar
from local_client import TestClient
from pydantic import BaseModel, Field, field_validator, model_validator

from runtime import (
    EffectStatus,
    EventType,
    Graph,
    Interrupt,
    InterruptKind,
    InterruptStatus,
    NodeContext,
    NodeStatus,
    RunStatus,
    Runtime,
    SqlStore,
    append,
)
from server.web import approvals, form_errors, forms
from server.web.form_errors import ModelError
from server.web.app import create_app

XSS = "<script>alert(1)</script>"



# --------------------------------------------------------------------------- graphs

class Level(enum.Enum):
    LOW = "low"
    HIGH = "high"


class Address(BaseModel):
    city: str = Field(description="the city to ship to")
    zip: int


class Review(BaseModel):
    name: str = Field(description="who reviewed it")
    count: int = Field(3, ge=0, le=10, description="how many items")
    ratio: float
    ok: bool = True
    level: Level = Level.LOW
    tags: list[str] = []
    address: Address
    note: str | None = None

    @field_validator("name")
    @classmethod
    def somebody(cls, v: str) -> str:
        if v == "nobody":
            raise ValueError("nobody cannot review")
        return v


class S(BaseModel):
    q: str = ""
    value: str = ""


def review_graph() -> Graph:
    g = Graph("review", state=S)

    @g.node()
    async def ask(s: S, ctx: NodeContext) -> dict[str, Any]:
        answer = await ctx.interrupt({"question": "Review this order?", "item": s.q}, response=Review)
        return {"value": f"{answer.name}:{answer.count}:{answer.address.city}"}

    return g


class SearchArgs(BaseModel):
    query: str
    limit: int = 10


class ToolCall(BaseModel):
    approve: bool = Field(description="run the tool?")
    args: SearchArgs


def tool_graph() -> Graph:
    g = Graph("tools", state=S)

    @g.node()
    async def call(s: S, ctx: NodeContext) -> dict[str, Any]:
        d = await ctx.interrupt({"question": "Run search?", "tool": "search", "args": {"query": s.q, "limit": 3}},
                                response=ToolCall)
        return {"value": f"{d.approve}:{d.args.query}:{d.args.limit}"}

    return g


def plain_graph() -> Graph:
    g = Graph("plain", state=S)

    @g.node()
    async def confirm(s: S, ctx: NodeContext) -> dict[str, Any]:
        answer = await ctx.interrupt(XSS)
        return {"value": json.dumps(answer)}

    return g


class Pay(BaseModel):
    amount: float = 1.0
    receipt: str = ""


def pay_graph() -> Graph:
    g = Graph("pay", state=Pay)

    @g.node()
    async def charge(s: Pay, ctx: NodeContext) -> dict[str, Any]:
        receipt = await ctx.effect("payments.charge", lambda: f"live-{s.amount}", request={"amount": s.amount})
        return {"receipt": receipt}

    return g


class Vote(BaseModel):
    approve: bool
    note: str = Field("", max_length=20)


class Panel(BaseModel):
    reviewers: list[str] = ["ana", "ben", "cy"]
    votes: Annotated[list[str], append] = []
    value: str = ""


def panel_graph() -> Graph:
    """Each reviewer is asked at once (a map), and ``extra`` asks something else."""
    g = Graph("panel", state=Panel)

    @g.node(map_over="reviewers")
    async def vote(s: Panel, ctx: NodeContext, item: str) -> dict[str, Any]:
        answer = await ctx.interrupt({"question": f"{item}, approve?"}, response=Vote)
        return {"votes": [f"{item}:{answer.approve}:{answer.note}"]}

    @g.node()
    async def extra(s: Panel, ctx: NodeContext) -> dict[str, Any]:
        return {"value": str(await ctx.interrupt({"question": "anything else?"}, response=Vote))}

    return g


def two_asks_graph() -> Graph:
    """Each reviewer is asked two different things in a row, with the same model."""
    g = Graph("two_asks", state=Panel)

    @g.node(map_over="reviewers")
    async def vote(s: Panel, ctx: NodeContext, item: str) -> dict[str, Any]:
        budget = await ctx.interrupt({"question": f"{item}, approve the budget?"}, response=Vote)
        delete = await ctx.interrupt({"question": f"{item}, delete the old account?"}, response=Vote)
        return {"votes": [f"{item}:{budget.approve}:{delete.approve}"]}

    return g


# --------------------------------------------------------------------------- fixtures and helpers

@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'h.db'}"))
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient[Any]]:
    with TestClient(app=create_app(rt)) as c:   # one event loop for the app and its background runs
        yield c


def start(rt: Runtime, graph: Graph, given: dict[str, Any]) -> tuple[str, Interrupt]:
    run = asyncio.run(rt.start(graph, given))
    assert run.status == RunStatus.INTERRUPTED
    [question] = asyncio.run(rt.interrupts(run.id))
    return run.id, question


def settle(client: TestClient[Any]) -> None:
    """Wait until every run an action started in the background has stopped."""
    async def drained() -> None:
        while client.app.state.tasks:
            await asyncio.gather(*list(client.app.state.tasks))

    with client.portal() as portal:
        portal.call(drained)


def token(client: TestClient[Any], url: str) -> str:
    """The CSRF token of the form on ``url`` (its hidden field)."""
    page = client.get(url)
    assert page.status_code == 200
    found = re.search(r'name="_csrf_token" value="([^"]+)"', page.text)
    assert found
    return found.group(1)


def post_answer(client: TestClient[Any], interrupt_id: str, fields: dict[str, str], *,
                htmx: bool = False) -> Any:
    url = f"/interrupts/{interrupt_id}"
    data = {"_csrf_token": token(client, url), **fields}
    headers = {"HX-Request": "true"} if htmx else {}
    if htmx:   # htmx sends the token as a header (hx-headers on <body>)
        headers["x-csrftoken"] = client.cookies["csrftoken"]
        del data["_csrf_token"]
    return client.post(f"{url}/answer", data=data, headers=headers, follow_redirects=False)


class Controls(HTMLParser):
    """The form controls of a page by name: their attributes, and a select's options."""

    def __init__(self) -> None:
        super().__init__()
        self.controls: dict[str, dict[str, Any]] = {}
        self.radios: dict[str, list[str]] = {}
        self.picked: dict[str, str] = {}   # a radio group's checked value
        self.select: str | None = None
        self.textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: (v if v is not None else "") for k, v in attrs}
        name = a.get("name", "")
        if tag == "input" and a.get("type") == "radio":
            self.radios.setdefault(name, []).append(a["value"])
            if "checked" in a:
                self.picked[name] = a["value"]
            self.controls[name] = {"tag": "radio", **a}
        elif tag in ("input", "select", "textarea") and name:
            self.controls[name] = {"tag": tag, **a, "options": [], "text": ""}
            self.select = name if tag == "select" else None
            self.textarea = name if tag == "textarea" else None
        elif tag == "option" and self.select:
            self.controls[self.select]["options"].append((a.get("value"), "selected" in a))

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self.select = None
        if tag == "textarea":
            self.textarea = None

    def handle_data(self, data: str) -> None:
        if self.textarea:
            self.controls[self.textarea]["text"] += data


def controls(html: str) -> Controls:
    parser = Controls()
    parser.feed(html)
    return parser


def valid_review(**changes: str) -> dict[str, str]:
    fields = {"f.name": "ann", "f.count": "4", "f.ratio": "0.5", "f.ok": "true", "f.level": "high",
              "f.tags": '["a", "b"]', "f.address.city": "Oslo", "f.address.zip": "150", "f.note": ""}
    return {**fields, **changes}


def test_handlers_use_current_styles():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Litestar(route_handlers=approvals.HANDLERS)


# --------------------------------------------------------------------------- inbox

def test_inbox_lists_pending_questions_newest_first_and_filters(rt: Runtime, client: TestClient[Any]):
    r1, q1 = start(rt, review_graph(), {"q": "first"})
    r2, q2 = start(rt, plain_graph(), {})
    r3, q3 = start(rt, tool_graph(), {"q": "cats"})

    page = client.get("/inbox")
    assert page.status_code == 200
    assert 'sse-connect="/inbox/live"' in page.text and 'hx-trigger="sse:changed"' in page.text and 'id="inbox"' in page.text
    ids = re.findall(r'data-interrupt="([^"]+)"', page.text)
    assert ids == [q3.id, q2.id, q1.id]   # newest first
    row = page.text[page.text.index(f'data-interrupt="{q1.id}"'):].split("</tr>")[0]
    assert f'href="/runs/{r1}"' in row and "review" in row and ">ask<" in row and ">user<" in row
    assert f'href="/interrupts/{q1.id}"' in row and "Review this order?" in row

    assert re.findall(r'data-interrupt="([^"]+)"', client.get("/inbox", params={"graph": "plain"}).text) == [q2.id]
    assert re.findall(r'data-interrupt="([^"]+)"', client.get("/inbox", params={"run": r3}).text) == [q3.id]
    assert re.findall(r'data-interrupt="([^"]+)"', client.get("/inbox", params={"kind": "unrecorded"}).text) == []
    assert client.get("/inbox", params={"kind": "sometimes"}).status_code == 422

    # the polled fragment: only the list, no page around it
    fragment = client.get("/inbox", headers={"HX-Request": "true"})
    assert "<html" not in fragment.text and re.findall(r'data-interrupt="([^"]+)"', fragment.text) == [q3.id, q2.id, q1.id]
    assert 'id="inbox-filter"' not in fragment.text
    # a filter's fragment: the form drawn with its choices too, so the browser's history restores both
    filtered = client.get("/inbox", params={"graph": "plain"}, headers={"HX-Request": "true", "HX-Target": "inbox-page"})
    assert filtered.text.lstrip().startswith('<form id="inbox-filter"') and 'name="graph" value="plain"' in filtered.text
    assert re.findall(r'data-interrupt="([^"]+)"', filtered.text) == [q2.id]

    # pages: newest first across pages, with links to the next
    first = approvals.inbox_page(rt, per_page=2)
    second = approvals.inbox_page(rt, per_page=2, page=2)
    assert [i.id for i, _ in first.rows] == [q3.id, q2.id] and first.has_next and first.total == 3
    assert [i.id for i, _ in second.rows] == [q1.id] and not second.has_next

    # an answered question leaves the inbox
    assert post_answer(client, q2.id, {"f.answer": "true"}).status_code == 303
    settle(client)
    assert re.findall(r'data-interrupt="([^"]+)"', client.get("/inbox").text) == [q3.id, q1.id]


def test_inbox_filters_effect_questions_by_kind(rt: Runtime, client: TestClient[Any]):
    branch_id, question = unrecorded_fork(rt)
    start(rt, plain_graph(), {})
    html = client.get("/inbox", params={"kind": "unrecorded"}).text
    assert re.findall(r'data-interrupt="([^"]+)"', html) == [question.id]
    assert "payments.charge" in html and f'href="/runs/{branch_id}"' in html


# --------------------------------------------------------------------------- the screen and its form

def test_screen_shows_the_question_with_its_run_node_and_state(rt: Runtime, client: TestClient[Any]):
    run_id, q = start(rt, review_graph(), {"q": "order-77"})
    page = client.get(f"/interrupts/{q.id}")
    assert page.status_code == 200
    html = page.text
    assert f'href="/runs/{run_id}"' in html and "Review this order?" in html
    assert f"node={q.node}" in html and ">user<" in html
    cp = asyncio.run(rt.history(run_id))[-1]
    assert f"/runs/{run_id}?cp={cp.seq}" in html                 # the state at the pause, linked
    state_panel = html[html.index('<div class="state">'):]
    assert '"order-77"' in state_panel                           # the state at the pause
    assert "Answer schema" in html and "Answered" not in html.split("<form")[0].split("</dl>")[0]
    assert client.get("/interrupts/int_nope").status_code == 404


def test_the_form_has_one_typed_input_per_field_of_the_response_model(rt: Runtime, client: TestClient[Any]):
    _, q = start(rt, review_graph(), {})
    html = client.get(f"/interrupts/{q.id}").text
    c = controls(html).controls
    assert c["f.name"]["tag"] == "input" and c["f.name"]["type"] == "text" and "required" in c["f.name"]
    assert c["f.count"]["type"] == "number" and c["f.count"]["step"] == "1"
    assert (c["f.count"]["min"], c["f.count"]["max"], c["f.count"]["value"]) == ("0", "10", "3")
    assert "required" not in c["f.count"]                                   # it has a default
    assert c["f.ratio"]["type"] == "number" and c["f.ratio"]["step"] == "any" and "required" in c["f.ratio"]
    assert c["f.ok"]["type"] == "checkbox" and "checked" in c["f.ok"]     # default true
    assert c["f.level"]["tag"] == "select" and c["f.level"]["options"] == [("low", True), ("high", False)]
    assert c["f.tags"]["tag"] == "textarea" and c["f.tags"]["text"].strip() == "[]"
    # the nested model ($ref into $defs) is a group of its own typed fields
    assert c["f.address.city"]["type"] == "text" and "required" in c["f.address.city"]
    assert c["f.address.zip"]["type"] == "number" and "required" in c["f.address.zip"]
    assert c["f.note"]["type"] == "text" and "required" not in c["f.note"]
    # required fields are marked next to their label; descriptions are help text
    for fid in ("f-name", "f-ratio", "f-address-city", "f-address-zip"):
        assert re.search(rf'<label for="{fid}">[^<]*<span class="req"', html), fid
    for fid in ("f-count", "f-note", "f-tags"):
        assert not re.search(rf'<label for="{fid}">[^<]*<span class="req"', html), fid
    assert re.search(r'<legend>Address <span class="req"', html)
    assert "who reviewed it" in html and "how many items" in html and "the city to ship to" in html


def test_proposed_tool_arguments_prefill_the_form_and_edited_ones_are_used(rt: Runtime, client: TestClient[Any]):
    run_id, q = start(rt, tool_graph(), {"q": "cats"})
    html = client.get(f"/interrupts/{q.id}").text
    c = controls(html).controls
    assert c["f.args.query"]["value"] == "cats" and c["f.args.limit"]["value"] == "3"
    # a required yes/no is a choice the person makes: nothing preselected, the browser asks for one
    found = controls(html)
    assert found.radios["f.approve"] == ["true", "false"] and "f.approve" not in found.picked
    assert "required" in c["f.approve"] and re.search(r'<label class="choice"><input type="radio" name="f.approve" value="true"[^>]*> Yes<', html)
    assert "run the tool?" in html
    assert "what the question proposes (args)" in html
    reply = post_answer(client, q.id, {"f.approve": "true", "f.args.query": "dogs", "f.args.limit": "7"})
    assert reply.status_code == 303 and reply.headers["location"] == f"/runs/{run_id}"
    settle(client)
    assert asyncio.run(rt.get_run(run_id)).status == RunStatus.SUCCEEDED
    assert asyncio.run(rt.state_at(asyncio.run(rt.history(run_id))[-1].id)).value == "True:dogs:7"


# --------------------------------------------------------------------------- answering

def test_a_required_yes_or_no_left_unanswered_is_refused_naming_it_and_the_run_stays_paused(
        rt: Runtime, client: TestClient[Any]):
    run_id, q = start(rt, tool_graph(), {"q": "cats"})
    before = snapshot(rt, run_id)
    reply = post_answer(client, q.id, {"f.args.query": "dogs", "f.args.limit": "7"})
    assert reply.status_code == 422
    assert re.search(r'id="f-approve-error">Approve is required: choose Yes or No<', reply.text)
    assert controls(reply.text).controls["f.args.query"]["value"] == "dogs"   # what was typed is kept
    settle(client)
    assert snapshot(rt, run_id) == before and before[0] == RunStatus.INTERRUPTED
    # an answer the form cannot read as yes or no is refused too, never taken for no
    reply = post_answer(client, q.id, {"f.approve": "on", "f.args.query": "dogs", "f.args.limit": "7"})
    assert reply.status_code == 422 and re.search(r'id="f-approve-error">Approve must be one of: Yes, No<', reply.text)
    settle(client)
    assert snapshot(rt, run_id) == before


@pytest.mark.parametrize(("choice", "approved"), [("true", "True"), ("false", "False")])
def test_yes_and_no_each_answer_a_required_yes_or_no(rt: Runtime, client: TestClient[Any], choice: str,
                                                     approved: str):
    run_id, q = start(rt, tool_graph(), {"q": "cats"})
    reply = post_answer(client, q.id, {"f.approve": choice, "f.args.query": "dogs", "f.args.limit": "7"})
    assert reply.status_code == 303
    settle(client)
    assert asyncio.run(rt.state_at(asyncio.run(rt.history(run_id))[-1].id)).value == f"{approved}:dogs:7"
    assert asyncio.run(rt.interrupts(run_id, pending=False))[0].answer["approve"] is (choice == "true")


def snapshot(rt: Runtime, run_id: str) -> tuple[Any, ...]:
    run = asyncio.run(rt.get_run(run_id))
    return (run.status, run.fence, len(asyncio.run(rt.events(run_id))), len(asyncio.run(rt.history(run_id))),
            len(rt.store.list_runs(limit=1000)), [i.status for i in asyncio.run(rt.interrupts(run_id, pending=False))])


def test_an_answer_without_the_csrf_token_is_refused_and_changes_nothing(rt: Runtime, client: TestClient[Any]):
    run_id, q = start(rt, review_graph(), {})
    client.get(f"/interrupts/{q.id}")   # the cookie is set; the token is not sent
    before = snapshot(rt, run_id)
    reply = client.post(f"/interrupts/{q.id}/answer", data=valid_review(), follow_redirects=False)
    assert reply.status_code == 403
    settle(client)
    assert snapshot(rt, run_id) == before and before[0] == RunStatus.INTERRUPTED


def test_json_typed_into_an_answer_field_is_read_as_the_json_api_reads_it(rt: Runtime, client: TestClient[Any]):
    """Nested past the API's depth, or with NaN: the field says so (not a 500), nothing is answered."""
    run_id, q = start(rt, review_graph(), {})
    before = snapshot(rt, run_id)
    for tags, said in (("[" * 100_000 + "]" * 100_000, "Tags nests deeper than 100 levels"),
                       ('["a", NaN]', "Tags is not accepted")):
        reply = post_answer(client, q.id, valid_review(**{"f.tags": tags}))
        assert reply.status_code == 422, reply.text[:300]
        found = re.search(r'id="f-tags-error">([^<]*)<', reply.text)
        assert found and found.group(1).startswith(said), found
    assert snapshot(rt, run_id) == before


def test_an_invalid_answer_shows_errors_by_its_fields_and_keeps_the_run_paused(rt: Runtime, client: TestClient[Any]):
    run_id, q = start(rt, review_graph(), {})
    before = snapshot(rt, run_id)
    reply = post_answer(client, q.id, valid_review(**{
        "f.name": "", "f.count": "abc", "f.ratio": "11", "f.level": "medium", "f.tags": '["a", ',
        "f.address.zip": "12.5"}))
    assert reply.status_code == 422
    html = reply.text

    def error(fid: str) -> str:
        found = re.search(rf'id="{fid}-error">([^<]*)<', html)
        assert found, fid
        return found.group(1)

    # each names its field by its label, as the model's own errors do
    assert error("f-name") == "Name is required"
    assert error("f-count") == "Count must be a whole number"
    assert error("f-level") == "Level must be one of: low, high"
    assert error("f-tags").startswith("Tags is not valid JSON")
    assert error("f-address-zip") == "Zip must be a whole number"
    assert 'id="f-ratio-error"' not in html and 'id="f-address-city-error"' not in html
    c = controls(html).controls   # what was typed is kept
    assert c["f.count"]["value"] == "abc" and c["f.ratio"]["value"] == "11" and c["f.address.city"]["value"] == "Oslo"
    assert c["f.tags"]["text"] == '["a", ' and c["f.address.zip"]["value"] == "12.5"
    assert "checked" in c["f.ok"] and c["f.level"]["options"] == [("low", False), ("high", False)]

    # bounds, and the model's own validators, land on their fields too
    reply = post_answer(client, q.id, valid_review(**{"f.count": "11", "f.name": "nobody"}))
    assert reply.status_code == 422
    assert re.search(r'id="f-count-error">Count must be at most 10<', reply.text)
    reply = post_answer(client, q.id, valid_review(**{"f.name": "nobody"}))
    assert reply.status_code == 422 and re.search(r'id="f-name-error">[^<]*nobody cannot review<', reply.text)

    # over htmx, only the answer block comes back, to be swapped in place
    reply = post_answer(client, q.id, valid_review(**{"f.ratio": "x"}), htmx=True)
    assert reply.status_code == 422 and "<html" not in reply.text and 'id="f-ratio-error"' in reply.text
    settle(client)
    assert snapshot(rt, run_id) == before and before[0] == RunStatus.INTERRUPTED


def test_a_valid_answer_resumes_the_run_and_records_who_answered(rt: Runtime, client: TestClient[Any],
                                                                 monkeypatch: pytest.MonkeyPatch):
    run_id, q = start(rt, review_graph(), {})
    reply = post_answer(client, q.id, valid_review())
    assert reply.status_code == 303 and reply.headers["location"] == f"/runs/{run_id}"
    settle(client)
    run = asyncio.run(rt.get_run(run_id))
    assert run.status == RunStatus.SUCCEEDED
    assert asyncio.run(rt.state_at(asyncio.run(rt.history(run_id))[-1].id)).value == "ann:4:Oslo"
    [answered] = [e for e in asyncio.run(rt.events(run_id)) if e.type == EventType.INTERRUPT_ANSWERED]
    assert answered.data == {"interrupt_id": q.id, "by": "local"}
    [done] = asyncio.run(rt.interrupts(run_id, pending=False))
    assert done.status == InterruptStatus.ANSWERED
    assert done.answer == {"name": "ann", "count": 4, "ratio": 0.5, "ok": True, "level": "high", "tags": ["a", "b"],
                           "address": {"city": "Oslo", "zip": 150}, "note": None}

    page = client.get(f"/interrupts/{q.id}").text
    assert re.search(r'id="answered"><dt>Answered</dt><dd>by <strong>local</strong> at \d{4}-', page)
    # the state shown is the one the run paused at, not where it ended
    pause = asyncio.run(rt.history(run_id))[1]
    assert pause.node_states["ask"] == NodeStatus.INTERRUPTED
    assert f"/runs/{run_id}?cp={pause.seq}\">checkpoint #{pause.seq}<" in page and '"ann:4:Oslo"' not in page
    assert '<form class="stacked answer-form"' not in page
    # the trace is read a window at a time from the pause on, however small the window
    monkeypatch.setattr(approvals, "EVENT_WINDOW", 1)
    assert approvals.answered_by(rt, done, 0)[0] == "local"
    assert approvals.answered_by(rt, done, pause.event_seq)[0] == "local"
    again = post_answer_raw(client, q.id, valid_review())
    assert again.status_code == 409 and "cannot be answered again" in again.text


def post_answer_raw(client: TestClient[Any], interrupt_id: str, fields: dict[str, str]) -> Any:
    """A post with a valid token, for a screen that no longer shows the form."""
    client.get(f"/interrupts/{interrupt_id}")
    return client.post(f"/interrupts/{interrupt_id}/answer", data=fields, follow_redirects=False,
                       headers={"x-csrftoken": client.cookies["csrftoken"]})


def test_an_answer_over_htmx_redirects_with_hx_redirect(rt: Runtime, client: TestClient[Any]):
    run_id, q = start(rt, plain_graph(), {})
    reply = post_answer(client, q.id, {"f.answer": '{"ok": true}'}, htmx=True)
    assert reply.status_code == 200 and reply.headers["HX-Redirect"] == f"/runs/{run_id}"
    settle(client)
    assert asyncio.run(rt.get_run(run_id)).status == RunStatus.SUCCEEDED
    assert asyncio.run(rt.state_at(asyncio.run(rt.history(run_id))[-1].id)).value == '{"ok": true}'


def test_a_question_without_a_model_takes_any_json(rt: Runtime, client: TestClient[Any]):
    run_id, q = start(rt, plain_graph(), {})
    c = controls(client.get(f"/interrupts/{q.id}").text).controls
    assert c["f.answer"]["tag"] == "textarea" and "required" in c["f.answer"]
    before = snapshot(rt, run_id)
    for bad, message in (("", r"Answer \(JSON\) is required"), ("{yes}", r"Answer \(JSON\) is not valid JSON")):
        reply = post_answer(client, q.id, {"f.answer": bad})
        assert reply.status_code == 422 and re.search(rf'id="f-answer-error">{message}', reply.text)
    assert snapshot(rt, run_id) == before
    assert post_answer(client, q.id, {"f.answer": "false"}).status_code == 303
    settle(client)
    assert asyncio.run(rt.state_at(asyncio.run(rt.history(run_id))[-1].id)).value == "false"


# --------------------------------------------------------------------------- the runtime's own questions

def unrecorded_fork(rt: Runtime) -> tuple[str, Interrupt]:
    """A live run, then a fork that changes the charge's request: mocked, it has no record of it."""
    run = asyncio.run(rt.start(pay_graph(), {"amount": 1.0}))
    assert run.status == RunStatus.SUCCEEDED
    first = asyncio.run(rt.history(run.id))[0]
    branch = asyncio.run(rt.fork(first.id, {"amount": 5.0}))
    assert branch.status == RunStatus.INTERRUPTED
    [question] = asyncio.run(rt.interrupts(branch.id))
    assert question.kind == InterruptKind.UNRECORDED
    return branch.id, question


def test_an_unrecorded_effect_is_answered_with_a_mock_result(rt: Runtime, client: TestClient[Any]):
    branch_id, q = unrecorded_fork(rt)
    html = client.get(f"/interrupts/{q.id}").text
    page = controls(html)
    assert page.radios["f.action"] == ["mock", "live", "abort"]
    assert page.controls["f.result"]["tag"] == "textarea"
    assert "payments.charge" in html and "Recorded request" in html

    before = snapshot(rt, branch_id)
    reply = post_answer(client, q.id, {"f.action": "mock", "f.result": ""})
    assert reply.status_code == 422 and re.search(r'id="f-result-error">Result \(JSON\) is required when the decision is', reply.text)
    reply = post_answer(client, q.id, {"f.result": '"r"'})
    assert reply.status_code == 422 and 'id="f-action-error">Decision is required<' in reply.text
    assert snapshot(rt, branch_id) == before

    reply = post_answer(client, q.id, {"f.action": "mock", "f.result": '"rcpt-fake"'})
    assert reply.status_code == 303 and reply.headers["location"] == f"/runs/{branch_id}"
    settle(client)
    assert asyncio.run(rt.get_run(branch_id)).status == RunStatus.SUCCEEDED
    assert asyncio.run(rt.state_at(asyncio.run(rt.history(branch_id))[-1].id)).receipt == "rcpt-fake"
    [entry] = [e for e in rt.store.journal([branch_id]) if e.name == "payments.charge"]
    assert entry.status == EffectStatus.MOCKED and entry.source == f"answer:{q.id}"
    [done] = asyncio.run(rt.interrupts(branch_id, pending=False))
    assert done.answer == {"action": "mock", "result": "rcpt-fake"}


def test_in_doubt_questions_offer_result_retry_and_abort():
    question = Interrupt("int_1", "run_1", "charge", "effect:pay#0@run_1/1", InterruptKind.IN_DOUBT,
                         {"value": {"effect": "pay", "occurrence": 0}, "response_ref": None},
                         InterruptStatus.PENDING, 0.0)
    form = approvals.answer_form(question)
    assert form.mode == "effect"
    assert [v for v, _ in form.fields[0].options] == ["result", "retry", "abort"]
    assert form.fields[1].kind == "json" and not form.fields[1].required


# --------------------------------------------------------------------------- escaping

def test_payloads_states_and_typed_values_are_shown_as_text(rt: Runtime, client: TestClient[Any]):
    run_id, q = start(rt, plain_graph(), {"q": XSS})
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    for url in (f"/interrupts/{q.id}", "/inbox"):
        html = client.get(url).text
        assert XSS not in html and escaped in html, url
    reply = post_answer(client, q.id, {"f.answer": XSS})
    assert reply.status_code == 422 and XSS not in reply.text and escaped in reply.text


# --------------------------------------------------------------------------- schema → fields

def test_schema_shapes_become_the_right_fields():
    class Mode(enum.Enum):
        A = 1
        B = 2

    class Inner(BaseModel):
        x: int

    class M(BaseModel):
        mode: Mode | None = None
        fixed: str = Field("x", json_schema_extra={"const": "x"})
        pick: int
        inner: Inner | None = None
        either: int | str = 0
        extra: dict[str, int] = {}

    schema = M.model_json_schema()
    by_name = {f.name: f for f in forms.build(schema)}
    mode = by_name["f.mode"]
    assert mode.kind == "select" and mode.nullable and mode.options[0] == (forms.NULL_OPTION, "(none)")
    assert mode.values == {"1": 1, "2": 2} and mode.text == forms.NULL_OPTION
    assert by_name["f.fixed"].kind == "select" and by_name["f.fixed"].text == "x"
    assert by_name["f.pick"].kind == "integer" and by_name["f.pick"].required
    assert by_name["f.inner"].kind == "json" and by_name["f.inner"].nullable   # optional model: JSON or null
    assert by_name["f.either"].kind == "json" and by_name["f.either"].text == "0"
    assert by_name["f.extra"].kind == "json" and by_name["f.extra"].json_type == "object"
    fields = forms.build(schema)
    value, ok = forms.read(fields, {"f.mode": "2", "f.fixed": "x", "f.pick": "5", "f.inner": "null",
                                    "f.either": '"s"', "f.extra": '{"a": 1}'})
    assert ok and value == {"mode": 2, "fixed": "x", "pick": 5, "inner": None, "either": "s", "extra": {"a": 1}}
    M.model_validate(value)
    value, ok = forms.read(forms.build(schema), {"f.pick": "5", "f.extra": "[1]"})
    assert not ok


def test_a_required_boolean_is_a_yes_or_no_choice_and_an_optional_one_a_box():
    class M(BaseModel):
        must: bool
        maybe: bool | None
        nice: bool = True

    by_name = {f.name: f for f in forms.build(M.model_json_schema())}
    must, maybe, nice = by_name["f.must"], by_name["f.maybe"], by_name["f.nice"]
    assert must.kind == "radio" and must.options == [("true", "Yes"), ("false", "No")] and must.text == ""
    assert maybe.kind == "radio" and maybe.nullable and nice.kind == "checkbox" and nice.checked
    one = forms.value_field("answer", "Answer", {"type": "boolean"})
    assert one is not None and one.kind == "radio" and one.required
    fields = forms.build(M.model_json_schema())
    value, ok = forms.read(fields, {})
    assert not ok and fields[0].error == "Must is required: choose Yes or No" and fields[1].error is None
    assert value == {"maybe": None, "nice": False}
    value, ok = forms.read(forms.build(M.model_json_schema()), {"f.must": "false", "f.maybe": "true"})
    assert ok and value == {"must": False, "maybe": True, "nice": False}


def test_model_errors_land_on_the_deepest_field_they_name():
    fields = forms.build(Review.model_json_schema())
    loose = form_errors.attach_errors(fields, [ModelError(("address", "zip"), "bad zip", "raw"),
                                               ModelError(("tags", 2), "Tags item 2 too long"), ModelError((), "whole")])
    by_name = {f.name: f for top in fields for f in top.walk()}
    assert by_name["f.address.zip"].error == "bad zip" and by_name["f.address.zip"].detail == "raw"
    assert by_name["f.tags"].error == "Tags item 2 too long" and by_name["f.tags"].detail is None
    assert loose == ["whole"]


def test_one_answer_can_settle_the_same_question_asked_by_every_item_of_a_map(rt: Runtime,
                                                                                client: TestClient[Any]):
    run = asyncio.run(rt.start(panel_graph(), {}))
    assert run.status == RunStatus.INTERRUPTED
    asked = {q.node: q for q in asyncio.run(rt.interrupts(run.id))}
    assert sorted(asked) == ["extra", "vote[0]", "vote[1]", "vote[2]"]
    page = client.get(f"/interrupts/{asked['vote[1]'].id}").text
    assert "Give the same answer to the 2 other open questions from" in page and "vote[0], vote[2]" in page
    assert "_same" not in client.get(f"/interrupts/{asked['extra'].id}").text   # no other question like it

    box = controls(page).controls["_same"]
    assert sorted(box["value"].split(",")) == sorted([asked["vote[0]"].id, asked["vote[2]"].id])
    reply = post_answer(client, asked["vote[1]"].id, {"f.approve": "true", "f.note": "ok", "_same": box["value"]})
    assert reply.status_code == 303
    settle(client)
    assert asyncio.run(rt.get_run(run.id)).status == RunStatus.INTERRUPTED   # `extra` still waits
    assert [q.node for q in asyncio.run(rt.interrupts(run.id))] == ["extra"]
    answered = [e.data for e in asyncio.run(rt.events(run.id)) if e.type == EventType.INTERRUPT_ANSWERED]
    assert sorted(d["interrupt_id"] for d in answered) == sorted(asked[f"vote[{k}]"].id for k in range(3))
    reply = post_answer(client, asked["extra"].id, {"f.approve": "false", "f.note": ""})
    settle(client)
    state = asyncio.run(rt.state_at(asyncio.run(rt.history(run.id))[-1].id))
    assert state.votes == ["ana:True:ok", "ben:True:ok", "cy:True:ok"]


def test_without_the_box_ticked_only_the_question_shown_is_answered(rt: Runtime, client: TestClient[Any]):
    run = asyncio.run(rt.start(panel_graph(), {}))
    asked = {q.node: q for q in asyncio.run(rt.interrupts(run.id))}
    reply = post_answer(client, asked["vote[0]"].id, {"f.approve": "false", "f.note": ""})
    assert reply.status_code == 303
    settle(client)
    assert sorted(q.node for q in asyncio.run(rt.interrupts(run.id))) == ["extra", "vote[1]", "vote[2]"]
    # an answer that does not fit is refused for every question, and none is answered
    same = f'{asked["vote[2]"].id}'
    reply = post_answer(client, asked["vote[1]"].id, {"f.approve": "true", "f.note": "x" * 30, "_same": same})
    assert reply.status_code == 422 and "20 characters" in reply.text
    assert sorted(q.node for q in asyncio.run(rt.interrupts(run.id))) == ["extra", "vote[1]", "vote[2]"]


def test_the_box_offers_only_the_same_question_and_only_those_shown(rt: Runtime, client: TestClient[Any]):
    run = asyncio.run(rt.start(two_asks_graph(), {}))
    budget = {q.node: q for q in asyncio.run(rt.interrupts(run.id))}
    shown = controls(client.get(f"/interrupts/{budget['vote[1]'].id}").text).controls["_same"]["value"]
    assert sorted(shown.split(",")) == sorted([budget["vote[0]"].id, budget["vote[2]"].id])

    # meanwhile someone answers ana's budget question alone: ana now asks something else
    assert post_answer(client, budget["vote[0]"].id, {"f.approve": "false"}).status_code == 303
    settle(client)
    now = {q.node: q for q in asyncio.run(rt.interrupts(run.id))}
    assert now["vote[0]"].id != budget["vote[0]"].id and now["vote[0]"].slot != budget["vote[0]"].slot
    page = client.get(f"/interrupts/{budget['vote[1]'].id}").text
    assert controls(page).controls["_same"]["value"] == budget["vote[2]"].id   # not ana's other question

    # the page shown before: its answer would have gone to a question no longer there
    reply = post_answer(client, budget["vote[1]"].id, {"f.approve": "true", "_same": shown})
    assert reply.status_code == 409 and "reload the page" in reply.text
    assert {q.id for q in asyncio.run(rt.interrupts(run.id))} == {q.id for q in now.values()}   # none answered


# --------------------------------------------------------------------------- texts that span lines

class EmailReview(BaseModel):
    to: str = Field(pattern=r"^[^@\s]+@[^@\s]+$")
    subject: str = Field(min_length=1)
    body: str
    cc: list[str] = []


BODY = "\nHello,\n\nAs requested.\n\nRegards"   # a leading line break, too


def email_graph() -> Graph:
    g = Graph("email", state=S)

    @g.node()
    async def review(s: S, ctx: NodeContext) -> dict[str, Any]:
        d = await ctx.interrupt({"question": "Send it?", "tool": "send_email",
                                 "args": {"to": "ops@example.com", "subject": "Outage", "body": BODY}},
                                response=EmailReview)
        return {"value": json.dumps(d.model_dump(mode="json"))}

    return g


def test_a_proposed_text_with_line_breaks_is_edited_in_a_textarea_and_kept_as_proposed(
        rt: Runtime, client: TestClient[Any]):
    run_id, q = start(rt, email_graph(), {})
    html = client.get(f"/interrupts/{q.id}").text
    found = re.search(r'<textarea id="f-body" name="f.body"[^>]*>(.*?)</textarea>', html, re.S)
    # the parser drops one line break after the tag: what it shows is the proposal itself
    assert found and found.group(1) == "\n" + BODY
    assert controls(html).controls["f.subject"]["type"] == "text"   # one line stays an input
    # a browser sends a textarea's line breaks as CRLF
    reply = post_answer(client, q.id, {"f.to": "ops@example.com", "f.subject": "Outage",
                                       "f.body": BODY.replace("\n", "\r\n"), "f.cc": "[]"})
    assert reply.status_code == 303, reply.text
    settle(client)
    [answered] = asyncio.run(rt.interrupts(run_id, pending=False))
    assert answered.answer == {"to": "ops@example.com", "subject": "Outage", "body": BODY, "cc": []}


def test_every_wrong_field_is_named_at_once_whether_the_form_or_the_model_refuses_it(
        rt: Runtime, client: TestClient[Any]):
    run_id, q = start(rt, email_graph(), {})
    before = snapshot(rt, run_id)
    reply = post_answer(client, q.id, {"f.to": "not-an-email", "f.subject": "", "f.body": "hi", "f.cc": "[oops"})
    assert reply.status_code == 422
    errors = dict(re.findall(r'id="f-(\w+)-error">([^<]*)<', reply.text))
    assert set(errors) == {"to", "subject", "cc"}
    assert errors["subject"] == "Subject is required" and errors["cc"].startswith("Cc is not valid JSON")
    # the model's pattern: the message names the field and what is wrong; the pattern itself is a detail
    assert errors["to"] == "To is not in the expected format"
    detail = re.search(r'id="f-to-error">[^<]*</p><details class="error-detail"><summary>details</summary>'
                       r'<code>([^<]*)</code></details>', reply.text)
    assert detail and detail.group(1) == "String should match pattern &#39;^[^@\\s]+@[^@\\s]+$&#39;"
    settle(client)
    assert snapshot(rt, run_id) == before


class Tidied(BaseModel):
    name: str
    count: int

    @model_validator(mode="before")
    @classmethod
    def tidy(cls, data: Any) -> Any:
        data["name"] = data["name"].strip()   # its own code expects every field
        return data


def tidied_graph() -> Graph:
    g = Graph("tidied", state=S)

    @g.node()
    async def ask(s: S, ctx: NodeContext) -> dict[str, Any]:
        d = await ctx.interrupt({"question": "Who, how many?"}, response=Tidied)
        return {"value": f"{d.name}:{d.count}"}

    return g


def test_a_model_whose_own_code_fails_on_a_partial_answer_leaves_the_forms_errors_standing(
        rt: Runtime, client: TestClient[Any]):
    run_id, q = start(rt, tidied_graph(), {})
    before = snapshot(rt, run_id)
    reply = post_answer(client, q.id, {"f.name": "", "f.count": "abc"})
    assert reply.status_code == 422
    errors = dict(re.findall(r'id="f-(\w+)-error">([^<]*)<', reply.text))
    assert errors == {"name": "Name is required", "count": "Count must be a whole number"}
    settle(client)
    assert snapshot(rt, run_id) == before
    reply = post_answer(client, q.id, {"f.name": "  ann ", "f.count": "2"})
    assert reply.status_code == 303
    settle(client)
    assert asyncio.run(rt.state_at(asyncio.run(rt.history(run_id))[-1].id)).value == "ann:2"
