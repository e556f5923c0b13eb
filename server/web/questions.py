"""A paused run's open questions, answered together on one page (``/runs/RUN/answers``).

Parallel branches and the items of a map can each ask a person something, each with an
answer of its own shape, and the runtime asks its own questions about effects beside
them. This page shows every question the run waits on with its own inputs (the same
form its own screen has, its inputs named by the question's id), checks every answer —
field by field, then against the node's model — and only when all of them are good
resumes the run once with all of them. A refusal names each question and field that is
wrong, keeps what was typed, and records nothing: the run stays paused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from litestar import Request, Response, get, post
from litestar.params import FromPath, URLEncodedBody
from litestar.response import Redirect

from runtime import Runtime
from runtime.core.errors import InvalidRequest, NotFound
from runtime.core.jsonvalues import JSON
from runtime.core.records import Interrupt, InterruptStatus, Run

from . import actions, auth
from .approvals import EFFECT_CHOICES, AnswerForm, answer_form, check_answer, question_text
from .render import is_htmx, render
from .services import Conflict, complete, in_thread

#: the hidden field that lists the questions the page showed
SHOWN = "_ids"


@dataclass(slots=True)
class Question:
    """One open question and the part of the form that answers it."""

    i: Interrupt
    form: AnswerForm
    text: str
    value: JSON
    effect: bool


@dataclass(frozen=True, slots=True)
class Problem:
    """A bad answer: the question, the field (its path, and its input's element id; both ""
    for the answer as a whole), what is wrong."""

    i: Interrupt
    field: str
    anchor: str
    message: str


def open_questions(rt: Runtime, run_id: str) -> tuple[Run, list[Question]]:
    """The run (``NotFound`` when there is none) and the questions it waits on, in the order asked."""
    run = complete(rt.get_run(run_id))
    pending = sorted(rt.store.interrupts(run_id, InterruptStatus.PENDING), key=lambda i: (i.created_at, i.node))
    return run, [Question(i, answer_form(i, scope=i.id), question_text(i),
                          i.payload.get("value") if isinstance(i.payload, Mapping) else i.payload,
                          i.kind in EFFECT_CHOICES) for i in pending]


def problems(questions: Sequence[Question]) -> list[Problem]:
    """Every field in error, and every error of a question's answer as a whole."""
    out = []
    for q in questions:
        out += [Problem(q.i, ".".join(f.path), f.id, f.error)
                for top in q.form.fields for f in top.walk() if f.error]
        out += [Problem(q.i, "", "", e) for e in q.form.errors]
    return out


def _page(request: Request[Any, Any, Any], run: Run, questions: Sequence[Question], *, status: int = 200,
          errors: Sequence[str] = (), found: Sequence[Problem] = ()) -> Response[str]:
    return render(request, "answers.html", {"run": run, "questions": questions, "errors": list(errors),
                                            "problems": list(found), "shown": ",".join(q.i.id for q in questions)},
                  block="answers", status=status)


@get("/runs/{run_id:str}/answers", include_in_schema=False)
async def answers_page(request: Request[Any, Any, Any], run_id: FromPath[str]) -> Response[str]:
    run, questions = await in_thread(open_questions, request.app.state.runtime, run_id)
    return _page(request, run, questions)


@post("/runs/{run_id:str}/answers", include_in_schema=False)
async def answers_submit(request: Request[Any, Any, Any], run_id: FromPath[str],
                         data: URLEncodedBody[dict[str, str]]) -> Response[Any]:
    rt: Runtime = request.app.state.runtime
    run, questions = await in_thread(open_questions, rt, run_id)
    shown = {x for x in data.get(SHOWN, "").split(",") if x}
    if not questions:
        return _page(request, run, questions, status=409,
                     errors=[f"run {run_id} is {run.status.value}: it has no open questions to answer"])
    if shown != {q.i.id for q in questions}:
        return _page(request, run, questions, status=409, errors=[
            "the run's open questions changed since the page was shown (answered, or asked anew): "
            "reload the page to see them; nothing was answered"])
    given: dict[str, JSON] = {}
    for q in questions:
        value, ok = await in_thread(check_answer, rt, q.i, q.form, data)
        if ok:
            given[q.i.id] = value
    found = problems(questions)
    if found or len(given) != len(questions):
        return _page(request, run, questions, status=422, found=found)
    try:
        run_id = await actions.resume(rt, request.app.state.tasks, run_id, answers=given,
                                      by=auth.identity(request.scope))
    except (InvalidRequest, NotFound) as e:
        status = 409 if isinstance(e, Conflict) else 404 if isinstance(e, NotFound) else 422
        return _page(request, run, questions, status=status, errors=[str(e)])
    url = f"/runs/{run_id}"
    if is_htmx(request):
        return Response("", status_code=200, headers={"HX-Redirect": url})
    return Redirect(url, status_code=303)


HANDLERS = [answers_page, answers_submit]
