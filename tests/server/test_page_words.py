"""What pages say, pinned: why a closed question cannot be answered, a fork's patch
checkpoint named in the compare page's choices as its timeline names it, the runs list's
thread column, and an answer field's help without a raw regular expression."""

from __future__ import annotations

import asyncio
import html
import re
from typing import Any

from conftest import Seeded
from local_client import TestClient
from pydantic import BaseModel, Field

from runtime.core.states import RunStatus
from server.web import forms

Client = TestClient[Any]


def answer_closed(client: Client, interrupt_id: str) -> Any:
    """An answer posted to a question that no longer shows a form (a valid token, from the cookie)."""
    client.get(f"/interrupts/{interrupt_id}")
    return client.post(f"/interrupts/{interrupt_id}/answer", data={"f.approve": "true"}, follow_redirects=False,
                       headers={"x-csrftoken": client.cookies["csrftoken"]})


def test_a_question_of_a_cancelled_run_says_it_was_never_answered(seeded: Seeded, client: Client) -> None:
    [question] = asyncio.run(seeded.rt.interrupts(seeded.interrupted))
    asyncio.run(seeded.rt.cancel(seeded.interrupted, "not needed"))
    assert asyncio.run(seeded.rt.get_run(seeded.interrupted)).status == RunStatus.CANCELLED
    reply = answer_closed(client, question.id)
    assert reply.status_code == 409
    said = html.unescape(reply.text)
    assert f"interrupt {question.id} was never answered and cannot be answered now: its run was cancelled" in said
    assert "answered again" not in said
    api = client.post(f"/api/interrupts/{question.id}/answer", json={"answer": {"approve": True}})
    assert api.status_code == 409 and "its run was cancelled" in api.text and "answered again" not in api.text


def test_the_compare_choices_name_a_patch_checkpoint_as_the_timeline_does(seeded: Seeded, client: Client) -> None:
    cps = seeded.rt.store.checkpoints(seeded.failed)
    fork = asyncio.run(seeded.rt.fork(cps[1].id, patch={"n": 2}))
    patch = next(c for c in seeded.rt.store.checkpoints(fork.id) if c.source == "patch")
    entry = re.search(rf'data-seq="{patch.seq}"[^>]*>\s*<span class="seq">(#\d+)</span> <span class="src">(\w+)</span> '
                      r'<span class="folded"[^>]*>([^<]*)</span>', client.get(f"/runs/{fork.id}").text)
    assert entry and entry.groups() == (f"#{patch.seq}", "patch", "patched: n")
    option = re.search(rf'<option value="{patch.id}"[^>]*>([^<]*)</option>', client.get(f"/diff?a={cps[0].id}").text)
    assert option and option.group(1) == " ".join(entry.groups()) == f"#{patch.seq} patch patched: n"


def test_the_runs_list_names_a_runs_thread_only_when_it_is_another_runs(seeded: Seeded, client: Client) -> None:
    fork = asyncio.run(seeded.rt.fork(seeded.rt.store.checkpoints(seeded.failed)[1].id, patch={"n": 2}))
    rows = dict(re.findall(r'<tr>\s*<td><a href="/runs/(run_\w+)">.*?<td class="thread">(.*?)</td>',
                           client.get("/runs").text, re.S))
    assert fork.id in rows and seeded.failed in rows
    # a fork is in the thread of the run it came from: named, linked
    assert rows[fork.id] == f'<a href="/threads/{seeded.failed}">{seeded.failed}</a>'
    # a main run is its own thread: linked, its id not said twice on the row
    assert seeded.failed not in re.sub(r'"[^"]*"', "", rows[seeded.failed])
    assert f'href="/threads/{seeded.failed}"' in rows[seeded.failed]


class Mail(BaseModel):
    to: str = Field(pattern=r"^[^@\s]+@[^@\s]+$", description="Recipient address.")
    code: str = Field(pattern=r"^[A-Z]{3}-\d+$")
    sent: str = Field(json_schema_extra={"format": "email"}, pattern=r"^\S+$")


def test_a_pattern_is_not_shown_beside_a_description_and_otherwise_said_plainly() -> None:
    helps = {f.name: f.help for f in forms.build(Mail.model_json_schema())}
    assert helps == {"f.to": "Recipient address.", "f.code": r"(must match the pattern ^[A-Z]{3}-\d+$)",
                     "f.sent": "(an email address)"}
    assert all("pattern:" not in h for h in helps.values())


def test_the_answer_page_says_no_pattern_and_the_pattern_still_refuses(seeded: Seeded, client: Client) -> None:
    from runtime import Graph, NodeContext

    g = Graph("mail", state=Mailbox)

    @g.node()
    async def ask(s: Mailbox, ctx: NodeContext) -> dict[str, Any]:
        answer = await ctx.interrupt({"question": "send?"}, response=Mail)
        return {"sent": answer.to}

    run = asyncio.run(seeded.rt.start(g, {}))
    [question] = asyncio.run(seeded.rt.interrupts(run.id))
    page = client.get(f"/interrupts/{question.id}").text
    assert '<p class="help" id="f-to-help">Recipient address.</p>' in page and "pattern:" not in page
    token = re.search(r'name="_csrf_token" value="([^"]+)"', page)
    assert token
    reply = client.post(f"/interrupts/{question.id}/answer", follow_redirects=False, data={
        "_csrf_token": token.group(1), "f.to": "not an address", "f.code": "ABC-1", "f.sent": "x@y"})
    assert reply.status_code == 422
    assert re.search(r'id="f-to-error">To is not in the expected format<', reply.text)


class Mailbox(BaseModel):
    sent: str = ""
