"""Approvals: the inbox of questions runs are waiting on, and the screen that answers one.

The inbox lists pending interrupts across runs, newest first, filtered and paged on
the server and refreshed by polling. An interrupt's screen shows what it asks, the
run and node instance that asked, the state the run paused at and — once answered —
who answered and when (the trace's ``interrupt.answered`` event). Its form comes from
the node's response model when it declared one (``forms``: an input per field, or one
typed input for a model of a single value such as ``RootModel[float]``), from the
documented answers for the runtime's own effect questions, else a JSON box. An answer
is checked field by field, then against the model, before anything is written: a wrong
one is shown back with its errors next to the fields and the run stays paused. A run
waiting on several questions has them all on one form as well (``questions``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import urlencode

from litestar import Request, Response, get, post
from litestar.params import FromPath, FromQuery, QueryParameter, URLEncodedBody
from litestar.response import Redirect
from pydantic import ValidationError

from runtime import Runtime
from runtime.core.errors import InvalidRequest, NotFound
from runtime.core.jsonvalues import JSON
from runtime.core.records import Checkpoint, EventType, Interrupt, InterruptKind, InterruptStatus, Run
from runtime.core.states import RunStatus
from runtime.graph.instances import base_node
from server.present import interrupt_question

from . import actions, auth, form_errors, forms
from .render import is_htmx, render
from .services import Conflict, complete, in_thread

PER_PAGE = 25
#: the runtime's own questions about effects, and the answers it documents for them
EFFECT_CHOICES: dict[InterruptKind, list[tuple[str, str]]] = {
    InterruptKind.UNRECORDED: [("mock", "mock — the effect returns the result below"),
                               ("live", "live — run the effect for real"),
                               ("abort", "abort — fail this branch")],
    InterruptKind.IN_DOUBT: [("result", "result — it happened, and returned the result below"),
                             ("retry", "retry — call it again (same idempotency key)"),
                             ("abort", "abort — fail the run's node")],
}
#: the effect answers that carry a result
WITH_RESULT = frozenset({"mock", "result"})

ShortText = Annotated[str | None, QueryParameter(max_length=200)]


def _rt(request: Request[Any, Any, Any]) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


def question_text(i: Interrupt) -> str:
    """What an interrupt asks, in one line."""
    value = (i.payload or {}).get("value") if isinstance(i.payload, Mapping) else None
    if i.kind in EFFECT_CHOICES:
        return interrupt_question(i)
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        for key in ("question", "q", "prompt", "message"):
            if isinstance(value.get(key), str):
                return str(value[key])
    return interrupt_question(i)


# ------------------------------------------------------------------ inbox

@dataclass(frozen=True, slots=True)
class InboxPage:
    rows: Sequence[tuple[Interrupt, Run]]
    page: int
    has_next: bool
    total: int
    filters: Mapping[str, str]


def inbox_page(rt: Runtime, *, run: str | None = None, graph: str | None = None, kind: str | None = None,
               page: int = 1, per_page: int = PER_PAGE) -> InboxPage:
    if kind and kind not in set(InterruptKind):
        raise InvalidRequest(f"unknown kind {kind!r}; one of: {', '.join(InterruptKind)}")
    page = max(1, page)
    pending = rt.store.interrupts(None, InterruptStatus.PENDING)
    if run:
        pending = [i for i in pending if run in i.run_id]
    if kind:
        pending = [i for i in pending if i.kind == kind]
    runs: dict[str, Run] = {}

    def run_of(run_id: str) -> Run:
        if run_id not in runs:
            runs[run_id] = rt.store.get_run(run_id)
        return runs[run_id]

    if graph:
        pending = [i for i in pending if run_of(i.run_id).graph_name == graph]
    pending.sort(key=lambda i: (i.created_at, i.id), reverse=True)
    start = (page - 1) * per_page
    rows = [(i, run_of(i.run_id)) for i in pending[start:start + per_page]]
    filters = {k: v for k, v in (("run", run), ("graph", graph), ("kind", kind)) if v}
    return InboxPage(rows, page, len(pending) > start + per_page, len(pending), filters)


@get("/inbox", include_in_schema=False)
async def inbox(request: Request[Any, Any, Any], run: ShortText = None, graph: ShortText = None,
                kind: FromQuery[str | None] = None, page: FromQuery[int] = 1) -> Response[str]:
    data: InboxPage = await in_thread(inbox_page, _rt(request), run=run, graph=graph, kind=kind, page=page)

    def page_url(n: int) -> str:
        return "/inbox?" + urlencode({**data.filters, "page": n})

    block = "listing" if request.headers.get("hx-target") == "inbox-page" else "list"   # a filter: the form too
    return render(request, "inbox.html", {"p": data, "kinds": list(InterruptKind), "page_url": page_url,
                                          "question": question_text}, block=block)


# ------------------------------------------------------------------ one interrupt

@dataclass(slots=True)
class AnswerForm:
    mode: str                      # "model" (a declared response model), "value" (a model of one value,
    fields: list[forms.FormField]  # like RootModel[float]), "effect", or "json"
    errors: list[str] = field(default_factory=list)
    prefilled: list[str] = field(default_factory=list)   # fields holding what the question proposed


def answer_form(i: Interrupt, scope: str = "") -> AnswerForm:
    """The form that answers ``i``; ``scope`` names its inputs apart from other questions'
    when one form answers several."""
    form = _answer_form(i)
    forms.scoped(form.fields, scope)
    return form


def _answer_form(i: Interrupt) -> AnswerForm:
    value = i.payload.get("value") if isinstance(i.payload, Mapping) else None
    choices = EFFECT_CHOICES.get(i.kind)
    if choices is not None:
        return AnswerForm("effect", [
            forms.radio_field("action", "Decision", choices),
            forms.json_field("result", "Result (JSON)", required=False,
                             help=f"what the effect returns, needed for {' and '.join(c for c, _ in choices if c in WITH_RESULT)}: "
                                  f"the node gets it as the call's return value, and it is recorded as the "
                                  f"effect's outcome for good (give it the shape the node expects)"),
        ])
    schema = i.response_schema
    if isinstance(schema, Mapping) and forms.is_object_schema(schema):
        proposal = forms.proposed(value, schema)
        return AnswerForm("model", forms.build(schema, proposal), prefilled=list(proposal))
    one = forms.value_field("answer", "Answer", schema) if isinstance(schema, Mapping) else None
    if one is not None:
        return AnswerForm("value", [one])
    return AnswerForm("json", [forms.json_field("answer", "Answer (JSON)",
                                                help='any JSON value: "yes", true, {"approve": true}, null')])


def find_interrupt(rt: Runtime, interrupt_id: str) -> tuple[Interrupt, list[Interrupt]]:
    """The interrupt and the other questions its run asked."""
    found = rt.store.interrupt(interrupt_id)
    return found, [i for i in rt.store.interrupts(found.run_id) if i.id != found.id]


def paused_at(rt: Runtime, run_id: str, i: Interrupt) -> Checkpoint | None:
    """The checkpoint the run stood at while the question waited: its head while the
    question is open, else the last one made before the answer let the run go on
    (found among the light timeline rows, then read whole)."""
    head = rt.store.find_checkpoint(run_id)
    if head is None or i.answered_at is None or head.created_at < i.answered_at:
        return head
    rows = rt.store.checkpoint_summaries(run_id, 0, head.seq)
    # one made at the very moment of the answer is the resume's, not the pause's
    before = [c for c in rows if c.created_at < i.answered_at] or rows[:1]
    return rt.store.get_checkpoint(before[-1].id) if before else head


#: trace events read at a time while looking for an answer's record
EVENT_WINDOW = 200


def answered_by(rt: Runtime, i: Interrupt, after_seq: int) -> tuple[str | None, float | None]:
    """Who answered (as the trace recorded it) and when; the record comes after the
    pause, so the trace is read from there, a window at a time."""
    if i.status != InterruptStatus.ANSWERED:
        return None, None
    while True:
        window = rt.store.events(i.run_id, after_seq, EVENT_WINDOW)
        for ev in window:
            if ev.type == EventType.INTERRUPT_ANSWERED and ev.data.get("interrupt_id") == i.id:
                by = ev.data.get("by")
                return (str(by) if by is not None else None), ev.at
        if len(window) < EVENT_WINDOW:
            return None, i.answered_at
        after_seq = window[-1].seq


def screen(rt: Runtime, interrupt_id: str) -> dict[str, Any]:
    i, others = find_interrupt(rt, interrupt_id)
    run = complete(rt.get_run(i.run_id))
    cp = paused_at(rt, run.id, i)
    state = complete(rt.checkpoint(cp.id)).state if cp is not None else {}
    by, at = answered_by(rt, i, cp.event_seq if cp is not None else 0)
    value = i.payload.get("value") if isinstance(i.payload, Mapping) else i.payload
    # the node as it is now once the question is settled (at the pause it was interrupted)
    now = cp if i.status == InterruptStatus.PENDING else rt.store.find_checkpoint(run.id)
    elsewhere = run.status == RunStatus.RUNNING and not rt.orphaned(run) and not rt.drives(run.id)
    return {"i": i, "run": run, "value": value, "question": question_text(i), "cp": cp, "state": state,
            "node_status": now.node_states.get(i.node) if now is not None else None,
            "others": others, "alike": alike(i, others), "by": by, "at": at, "effect": i.kind in EFFECT_CHOICES,
            "pending": i.status == InterruptStatus.PENDING,
            # another process drives it, and goes on with other branches first (ADR 0011): an answer
            # is left for it in the store; one this server drives takes the answer at once
            "still_running": elsewhere, "sent": rt.store.sent_answers(run.id).get(i.id) if elsewhere else None}


def alike(i: Interrupt, others: Sequence[Interrupt]) -> list[Interrupt]:
    """The run's other open questions that one answer can settle too: asked by the same node
    (other items of a map, say) at the same place in it (its first ``ctx.interrupt``, its
    second, ...) for an answer of the same shape. A person's questions only; what the
    runtime asks about an effect is decided effect by effect."""
    if i.kind != InterruptKind.USER or i.status != InterruptStatus.PENDING:
        return []
    return [o for o in others if o.status == InterruptStatus.PENDING and o.kind == InterruptKind.USER
            and base_node(o.node) == base_node(i.node) and o.slot == i.slot
            and o.response_schema == i.response_schema]


@get("/interrupts/{interrupt_id:str}", include_in_schema=False)
async def interrupt_page(request: Request[Any, Any, Any], interrupt_id: FromPath[str]) -> Response[str]:
    ctx = await in_thread(screen, _rt(request), interrupt_id)
    return render(request, "interrupt.html", {**ctx, "form": answer_form(ctx["i"])})


# ------------------------------------------------------------------ answering

def check_answer(rt: Runtime, i: Interrupt, form: AnswerForm, data: Mapping[str, str]) -> tuple[JSON, bool]:
    """The answer the form describes, checked field by field and then against the
    node's model (when it can be imported here); errors go onto the form."""
    value, ok = forms.read(form.fields, data)
    if form.mode == "effect":
        action, result = form.fields
        if value.get("action") in WITH_RESULT:
            if "result" not in value and result.error is None:
                result.error = f"{result.label} is required when the decision is {value['action']!r} (null for no result)"
        else:   # the result box is ignored for live, retry and abort
            result.error = None
            value.pop("result", None)
        return value, action.error is None and result.error is None
    answer: JSON = value if form.mode == "model" else value.get("answer")
    ref = i.payload.get("response_ref") if isinstance(i.payload, Mapping) else None
    model = rt.graphs.model(ref) if isinstance(ref, str) and ref else None
    if model is not None:
        try:
            model.model_validate(answer)
        except ValidationError as e:
            # the answer is one value: its errors are its one field's
            found = form_errors.errors_of(e, form.fields, () if form.mode == "model" else ("answer",))
            if not ok:   # every wrong field at once: the model's say on the others too
                found = form_errors.beside_refused(form.fields, found)
            form.errors += form_errors.attach_errors(form.fields, found)
            return answer, False
        except Exception:
            if ok:
                raise
            # a model's own code may not expect an answer missing the fields the form refused:
            # those errors stand alone
    return answer, ok


def same_as_shown(alike: Sequence[Interrupt], ticked: str | None) -> list[str]:
    """The other questions the box named when the page was shown (its value lists their ids),
    if they all still wait for the same answer; ``Conflict`` if that changed meanwhile."""
    if not ticked:
        return []
    shown = sorted(set(ticked.split(",")))
    if not set(shown) <= {o.id for o in alike}:
        raise Conflict("the other questions this answer was to settle changed since the page was shown "
                       "(answered, or asked anew): reload the page to see them")
    return shown


def _go(request: Request[Any, Any, Any], url: str) -> Response[Any]:
    if is_htmx(request):
        return Response("", status_code=200, headers={"HX-Redirect": url})
    return Redirect(url, status_code=303)


@post("/interrupts/{interrupt_id:str}/answer", include_in_schema=False)
async def answer_submit(request: Request[Any, Any, Any], interrupt_id: FromPath[str],
                        data: URLEncodedBody[dict[str, str]]) -> Response[Any]:
    rt = _rt(request)
    ctx = await in_thread(screen, rt, interrupt_id)
    i: Interrupt = ctx["i"]
    form = answer_form(i)
    status = 422
    if not ctx["pending"]:
        form.errors.append(actions.closed(i, ctx["run"]))
        status = 409
    else:
        value, ok = await in_thread(check_answer, rt, i, form, data)
        if ok:
            try:
                also = same_as_shown(ctx["alike"], data.get("_same"))
                run_id = await actions.answer(rt, request.app.state.tasks, i.id, value,
                                              by=auth.identity(request.scope), also=also)
            except (InvalidRequest, NotFound) as e:
                form.errors.append(str(e))
                status = 409 if isinstance(e, Conflict) else 404 if isinstance(e, NotFound) else 422
            else:
                # another process takes it within a heartbeat: its page says when it has
                return _go(request, f"/interrupts/{i.id}" if ctx["still_running"] else f"/runs/{run_id}")
    return render(request, "interrupt.html", {**ctx, "form": form}, block="answer", status=status)


HANDLERS = [inbox, interrupt_page, answer_submit]
