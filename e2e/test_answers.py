"""Answering the questions runs wait on, from the inbox: an unrecorded effect served with
a mock, a typed approval through the form generated from its response model, an answer
the form refuses, and four questions of different shapes answered on one page."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Page, expect


def pending_question(demo: Any, run_id: str) -> dict[str, Any]:
    found = demo.api(f"/api/interrupts?run_id={run_id}")["interrupts"]
    assert len(found) == 1, found
    question: dict[str, Any] = found[0]
    return question


def open_from_inbox(page: Page, interrupt_id: str) -> None:
    page.goto("/inbox")
    row = page.locator(f'tr[data-interrupt="{interrupt_id}"]')
    row.get_by_role("link", name="Answer").click()
    expect(page).to_have_url(re.compile(rf"/interrupts/{interrupt_id}$"))
    expect(page.get_by_role("heading", level=1)).to_contain_text("pending")


def answered(page: Page, run_id: str) -> None:
    """The answer let the run go on: its page (we land there) follows it to the end."""
    expect(page).to_have_url(re.compile(rf"/runs/{run_id}$"))
    expect(page.locator("#run-status")).to_have_text("succeeded", timeout=15_000)


def test_answer_an_unrecorded_effect_with_a_mock(page: Page, demo: Any, shot: Any) -> None:
    run_id = demo.ids["fork_unrecorded"]
    question = pending_question(demo, run_id)
    assert (question["kind"], question["node"]) == ("unrecorded", "page")
    source_journal = demo.api(f"/api/runs/{demo.ids['support']}/journal")["entries"]

    open_from_inbox(page, question["id"])
    expect(page.locator(".question")).to_contain_text("has no record of this one")
    asks = page.locator("details.panel", has=page.get_by_role("heading", name="What it asks"))
    expect(asks.locator("dd", has_text="pager.notify")).to_have_count(1)
    expect(asks).to_contain_text('summary: "my invoice is wrong"')
    form = page.locator("#answer form")
    result_error = page.locator('#answer [data-field="f.result"] .field-error')
    # a mock needs its result, and the result must be JSON: refused next to the box, the run still waits
    form.locator('input[name="f.action"][value="mock"]').check()
    form.get_by_role("button", name="Answer and resume").click()
    expect(result_error).to_contain_text("required when the decision is 'mock'")
    form = page.locator("#answer form")
    expect(form.locator('input[name="f.action"][value="mock"]')).to_be_checked()
    form.locator("#f-result").fill("on-call: robin")
    form.get_by_role("button", name="Answer and resume").click()
    expect(result_error).to_contain_text("JSON")
    expect(page).to_have_url(re.compile(rf"/interrupts/{question['id']}$"))
    assert pending_question(demo, run_id)["id"] == question["id"]

    form = page.locator("#answer form")
    form.locator("#f-result").fill('"on-call: robin (mocked)"')
    shot("-form")
    form.get_by_role("button", name="Answer and resume").click()
    answered(page, run_id)

    # the mock is what the paging node got, and the run went on to route the ticket
    expect(page.locator(".state")).to_contain_text('"on-call: robin (mocked)"')
    expect(page.locator(".state")).to_contain_text('"standard-urgent"')
    effects = demo.api(f"/api/runs/{run_id}/journal")["effects"]
    paged = [e for e in effects if e["name"] == "pager.notify"]
    assert len(paged) == 1 and paged[0]["result"] == "on-call: robin (mocked)", paged
    assert all(e["label"] == "MOCKED" for e in effects), effects
    # nothing was called for real: the recording the fork came from is untouched
    assert demo.api(f"/api/runs/{demo.ids['support']}/journal")["entries"] == source_journal

    # the question now says who answered, and the inbox no longer lists it
    page.goto(f"/interrupts/{question['id']}")
    expect(page.get_by_role("heading", level=1)).to_contain_text("answered")
    expect(page.locator("#answered")).to_contain_text("by local")
    expect(page.locator("#answer form")).to_have_count(0)
    page.goto("/inbox")
    expect(page.locator(f'tr[data-interrupt="{question["id"]}"]')).to_have_count(0)


def test_approve_a_refund_through_its_form(page: Page, demo: Any, shot: Any) -> None:
    run_id = demo.ids["refund_review"]
    question = pending_question(demo, run_id)
    runs_before = demo.run_count()
    events_before = len(demo.api(f"/api/runs/{run_id}/events?limit=1000")["events"])

    open_from_inbox(page, question["id"])
    expect(page.locator(".question")).to_have_text("Refund 990.00 EUR for order 8?")
    form = page.locator("#answer form")
    decision, amount, reason = form.locator("#f-decision"), form.locator("#f-amount"), form.locator("#f-reason")
    # the form comes from the response model: its choices, bounds and descriptions
    expect(decision.locator("option")).to_have_text(["— choose —", "approve", "partial", "reject"])
    expect(amount).to_have_attribute("max", "10000")
    expect(form.locator('[data-field="f.amount"] .help')).to_have_text("Euros to refund (0 when rejected).")
    expect(form.locator("#f-notify_customer")).to_be_checked()

    # an empty form does not even leave the browser: required fields
    submit = form.get_by_role("button", name="Answer and resume")
    submit.click()
    expect(form.locator("#f-decision:invalid")).to_have_count(1)

    # past the browser's checks, the server refuses it field by field and keeps what was typed
    form.evaluate("f => { f.noValidate = true }")
    decision.select_option("partial")
    amount.fill("25000")
    form.locator("#f-note").fill("x" * 10)
    submit.click()
    amount_error = page.locator('#answer [data-field="f.amount"] .field-error')
    expect(amount_error).to_be_visible()
    expect(amount_error).to_contain_text("10000")
    expect(page.locator('#answer [data-field="f.reason"] .field-error')).to_be_visible()
    expect(page.locator('#answer [data-field="f.decision"] .field-error')).to_have_count(0)
    expect(page.locator("#answer #f-amount")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#answer #f-amount")).to_have_value("25000")
    expect(page.locator("#answer #f-decision")).to_have_value("partial")
    expect(page.locator("#answer #f-note")).to_have_value("x" * 10)
    expect(page).to_have_url(re.compile(rf"/interrupts/{question['id']}$"))
    shot("-refused")
    # … and nothing happened: the run still waits, on the same question, with the same trace
    assert demo.api(f"/api/runs/{run_id}")["run"]["status"] == "interrupted"
    assert pending_question(demo, run_id)["id"] == question["id"]
    assert len(demo.api(f"/api/runs/{run_id}/events?limit=1000")["events"]) == events_before
    assert demo.run_count() == runs_before

    # a valid answer: the run pays the refund and ends
    form = page.locator("#answer form")
    form.locator("#f-decision").select_option("approve")
    form.locator("#f-amount").fill("990")
    form.locator("#f-reason").select_option("damaged")
    form.locator("#f-note").fill("box arrived crushed")
    form.get_by_role("button", name="Answer and resume").click()
    answered(page, run_id)
    state = page.locator(".state")
    expect(state).to_contain_text('"approve"')
    expect(state).to_contain_text('"box arrived crushed"')
    expect(state).to_contain_text(re.compile(r'paid: "rf-8-'))
    assert demo.run_count() == runs_before   # answering moves the run on; it makes no new one
    decision_value = demo.api(f"/api/runs/{run_id}")["state"]["decision"]
    assert decision_value == {"decision": "approve", "amount": 990.0, "reason": "damaged",
                              "notify_customer": True, "note": "box arrived crushed"}
    shot()


def test_answer_questions_of_different_shapes_together(page: Page, release: Any, shot: Any) -> None:
    run_id = release.ids["release"]
    asked = {q["node"]: q["id"] for q in release.api(f"/api/interrupts?run_id={run_id}")["interrupts"]}
    assert sorted(asked) == ["amount", "approve", "comment", "label"]
    events_before = len(release.api(f"/api/runs/{run_id}/events?limit=1000")["events"])

    # from one question's screen to the page that answers them all
    page.goto(f"{release.url}/interrupts/{asked['label']}")
    page.get_by_role("link", name="Answer all 4 open questions together").click()
    expect(page).to_have_url(re.compile(rf"/runs/{run_id}/answers$"))
    form = page.locator("#answers form")
    expect(form.locator("fieldset.question-block")).to_have_count(4)
    approve, name = form.locator(f"#{asked['approve']}-f-approve"), form.locator(f"#{asked['label']}-f-name")
    amount, comment = form.locator(f"#{asked['amount']}-f-answer"), form.locator(f"#{asked['comment']}-f-answer")
    # each question has the input its answer needs (a required yes/no: two choices, neither made)
    expect(approve.get_by_role("radio")).to_have_count(2)
    expect(approve.get_by_label("Yes")).not_to_be_checked()
    expect(approve.get_by_label("No")).not_to_be_checked()
    expect(name).to_have_attribute("type", "text")
    expect(amount).to_have_attribute("type", "number")
    expect(comment).to_have_js_property("tagName", "TEXTAREA")

    # two bad answers and an approval left unanswered: refused, each named with its question and
    # field, nothing answered (an approval not chosen is never taken for no)
    form.evaluate("f => { f.noValidate = true }")
    name.fill("v")
    amount.fill("12.5")
    comment.fill("{calm")
    form.get_by_role("button", name="Answer all 4 and resume").click()
    problems = page.locator("#answers .problems li")
    expect(problems).to_have_count(3)
    expect(problems.filter(has_text=asked["approve"])).to_contain_text(
        "field approve: Approve is required: choose Yes or No")
    expect(problems.filter(has_text=asked["comment"])).to_contain_text("is not valid JSON")
    expect(problems.filter(has_text=asked["label"])).to_contain_text("field name: Name must be at least 2 characters")
    expect(page.locator(f'#answers [data-field="{asked["label"]}:f.name"] .field-error')).to_contain_text("2 characters")
    # what was typed is kept, for every question
    expect(page.locator(f"#answers #{asked['approve']}-f-approve").get_by_role("radio", checked=True)).to_have_count(0)
    expect(page.locator(f"#answers #{asked['amount']}-f-answer")).to_have_value("12.5")
    expect(page.locator(f"#answers #{asked['label']}-f-name")).to_have_value("v")
    expect(page).to_have_url(re.compile(rf"/runs/{run_id}/answers$"))
    shot("-refused")
    assert release.api(f"/api/runs/{run_id}")["run"]["status"] == "interrupted"
    assert len(release.api(f"/api/interrupts?run_id={run_id}")["interrupts"]) == 4
    assert len(release.api(f"/api/runs/{run_id}/events?limit=1000")["events"]) == events_before

    # fixed, all four are answered in one go and the run resumes once
    form = page.locator("#answers form")
    form.locator(f"#{asked['approve']}-f-approve").get_by_label("Yes").check()
    form.locator(f"#{asked['label']}-f-name").fill("v2.1")
    form.locator(f"#{asked['comment']}-f-answer").fill('{"tone": "calm"}')
    form.get_by_role("button", name="Answer all 4 and resume").click()
    answered(page, run_id)
    state = release.api(f"/api/runs/{run_id}")["state"]
    assert (state["approved"], state["name"], state["amount"], state["comment"]) == (True, "v2.1", 12.5, {"tone": "calm"})
    events = release.api(f"/api/runs/{run_id}/events?limit=1000")["events"]
    assert sum(1 for e in events if e["type"] == "run.resume") == 1
    assert sorted(e["data"]["interrupt_id"] for e in events if e["type"] == "interrupt.answered") == sorted(asked.values())
    shot()


def test_an_email_is_sent_as_proposed_and_the_page_watching_its_run_follows(page: Page, demo: Any,
                                                                            shot: Any) -> None:
    """The proposed body spans lines: the form shows it whole and sends it back unchanged.
    A second tab, left on the paused run's page, sees the run go on and end."""
    run_id = demo.ids["tool_review"]
    question = pending_question(demo, run_id)
    proposed = question["payload"]["value"]["args"]["body"]
    assert "\n" in proposed

    watching = page.context.new_page()
    watching.goto(f"/runs/{run_id}")
    expect(watching.locator("#run-status")).to_have_text("interrupted")

    open_from_inbox(page, question["id"])
    # shown as it will be sent, line breaks included, in the question and in the form
    shown = page.locator(".j-str", has_text="As requested").first
    assert "\n\n" in shown.inner_text()
    form = page.locator("#answer form")
    expect(form.locator("textarea#f-body")).to_have_value(proposed)
    form.locator("#f-action").select_option("run")
    form.get_by_role("button", name="Answer and resume").click()
    answered(page, run_id)
    # Back shows the question as it is now, not a kept copy with its form ready to send again
    page.go_back()
    expect(page).to_have_url(re.compile(rf"/interrupts/{question['id']}$"))
    expect(page.get_by_role("heading", level=1)).to_contain_text("answered")
    expect(page.locator("#answer form")).to_have_count(0)

    expect(watching.locator("#run-status")).to_have_text("succeeded", timeout=15_000)
    shot()
    [done] = [i for i in demo.api(f"/api/interrupts?run_id={run_id}&pending=false")["interrupts"]
              if i["id"] == question["id"]]
    assert done["answer"]["body"] == proposed
    watching.close()
