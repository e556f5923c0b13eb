"""Matching a resume's answers to a paused run's interrupts, and validating them.

Everything here runs before anything is written: an answer that does not fit is
rejected with a clear error and the run stays exactly as it was.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ValidationError

from ..core.errors import InvalidAnswer
from ..core.jsonvalues import JSON, problems, to_json, unstorable
from ..core.records import Interrupt, InterruptKind, InterruptStatus, Run
from ..history.registry import GraphRegistry
from .effect_answers import validate_in_doubt_answer, validate_unrecorded_answer

#: ``resume(run_id)`` with no answer at all
MISSING: JSON = object()


def match_answers(run: Run, interrupts: Sequence[Interrupt], answer: JSON,
                  answers: Mapping[str, JSON] | None) -> list[tuple[Interrupt, JSON]]:
    """Pair each answer with the pending interrupt it answers."""
    pending = [i for i in interrupts if i.status == InterruptStatus.PENDING]
    by_id = {i.id: i for i in pending}
    answered = {i.id for i in interrupts if i.status == InterruptStatus.ANSWERED}
    if answers:
        already = sorted(set(answers) & answered)
        if already:
            raise InvalidAnswer(f"run {run.id}: interrupt {', '.join(already)} was already answered")
        unknown = sorted(set(answers) - set(by_id))
        if unknown:
            raise InvalidAnswer(f"run {run.id} has no pending interrupt {', '.join(unknown)}; "
                                f"pending: {', '.join(by_id) or 'none'}")
        return [(by_id[k], v) for k, v in answers.items()]
    if not pending:
        raise InvalidAnswer(f"run {run.id} has no pending interrupt: it was already answered")
    if answer is MISSING:
        raise InvalidAnswer(f"run {run.id} is waiting for an answer to {', '.join(by_id)}")
    if len(pending) != 1:
        raise InvalidAnswer(f"run {run.id} has {len(pending)} pending interrupts "
                            f"({', '.join(by_id)}); answer them by id with answers={{id: value}}")
    return [(pending[0], answer)]


def validate_answers(graphs: GraphRegistry, given: Sequence[tuple[Interrupt, JSON]]) -> dict[str, JSON]:
    """Each answer as it will be recorded, by interrupt id; ``InvalidAnswer`` naming every
    answer that does not fit, not only the first (a person fixes them all at once)."""
    checked: dict[str, JSON] = {}
    wrong: list[str] = []
    for interrupt, value in given:
        try:
            checked[interrupt.id] = validate_answer(graphs, interrupt, value)
        except InvalidAnswer as e:
            wrong.append(str(e))
    if len(wrong) > 1:
        raise InvalidAnswer(f"{len(wrong)} answers do not fit: " + "; ".join(wrong))
    if wrong:
        raise InvalidAnswer(wrong[0])
    return checked


def validate_answer(graphs: GraphRegistry, interrupt: Interrupt, value: JSON) -> JSON:
    """The answer as it will be recorded, or ``InvalidAnswer`` saying what is wrong."""
    problem = unstorable(value)   # before a model's JSON dump could turn NaN into null
    if problem is not None:
        raise InvalidAnswer(f"answer to interrupt {interrupt.id} {problem}")
    if interrupt.kind == InterruptKind.IN_DOUBT:
        check_effect_answer(value, "in-doubt")
        return validate_in_doubt_answer(value).model_dump(mode="json")
    if interrupt.kind == InterruptKind.UNRECORDED:
        check_effect_answer(value, "unrecorded")
        return validate_unrecorded_answer(value).model_dump(mode="json")
    ref = interrupt.response_ref
    if not ref:
        try:
            return to_json(value, "answer")
        except Exception as e:
            raise InvalidAnswer(str(e)) from None
    model = graphs.model(ref)
    if model is None:
        raise InvalidAnswer(f"interrupt {interrupt.id} expects a {ref} answer, and that model "
                            f"cannot be imported here")
    try:
        return model.model_validate(value).model_dump(mode="json")
    except ValidationError as e:
        raise InvalidAnswer(f"answer to interrupt {interrupt.id} is invalid: {problems(e, 'answer')}"
                            f"{_unknown_fields(model, value)}") from None


def _unknown_fields(model: type[BaseModel], value: JSON) -> str:
    """``; unknown field 'aprove' (did you mean 'approve'?)`` for the keys of an answer that
    did not fit which ``model`` has no field of (a misspelt key is why a field is missing);
    nothing for a model that takes extra fields."""
    if not isinstance(value, Mapping) or model.model_config.get("extra") == "allow":
        return ""
    given = [f.alias or n for n, f in model.model_fields.items()]   # as an answer names them
    out = []
    for key in sorted(str(k) for k in value if k not in given and k not in model.model_fields):
        close = difflib.get_close_matches(key, given, n=1)
        out.append(f"; unknown field {key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return "".join(out) + (f" ({model.__name__} has: {', '.join(given)})" if out else "")


def check_effect_answer(answer: JSON, kind: str) -> None:
    """What a person sends about an effect (``kind``: "in-doubt" or "unrecorded"), checked
    before it is recorded: a misspelt key would otherwise be dropped, and a result asked
    for and not given recorded as null, the effect's outcome for good, and a result given beside
    "retry" or "live" dropped while the effect is called."""
    if not isinstance(answer, Mapping):
        return   # the model's own message names it
    extra = sorted(set(answer) - {"action", "result"})
    if extra:
        raise InvalidAnswer(f"an answer about an {kind} effect takes \"action\" and \"result\" only, "
                            f"not {', '.join(map(repr, extra))}")
    if answer.get("action") == "result" and "result" not in answer:
        raise InvalidAnswer('a "result" answer needs the "result" the effect returned (null is one, if it '
                            'returned nothing): it is recorded as the effect\'s outcome')
    takes_result, others = ("result", ("retry", "abort")) if kind == "in-doubt" else ("mock", ("live", "abort"))
    action = answer.get("action")
    if "result" in answer and action in others:
        raise InvalidAnswer(f'a "{action}" answer about an {kind} effect takes no "result"; to give the '
                            f'effect\'s result, answer {{"action": "{takes_result}", "result": ...}}')
