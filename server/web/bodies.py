"""The JSON API's request bodies: what each action accepts, with the descriptions the
OpenAPI document shows. Strict, and closed to unknown fields: a wrong type or an unknown
field is a 422 naming it before any action runs.

A refusal (``refused``) says, per field, ``max_steps: must be a whole number of at least 1``:
the field by its JSON name and what it expects, as the answer forms word theirs
(``wording``); the validator's own errors ride along as ``details``, so a client loses
nothing it was told before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

from annotated_types import Ge, Gt
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from runtime.core.errors import InvalidRequest

from . import wording


#: the largest request body accepted (a fork's patch, an answer, …)
MAX_BODY = 20 * 1024 * 1024
#: and for an imported thread: its export holds what those bodies brought, some of it more
#: than once (a patched value is in the fork's options, its checkpoint's snapshot and its
#: trace), and a long thread many times over (``harness import FILE`` has no limit)
MAX_IMPORT_BODY = 256 * 1024 * 1024


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Limits(Body):
    """Limits a resumed or forked run gets instead of the ones it inherits."""

    deadline: float | None = Field(None, gt=0, description="seconds the run may take from now")
    max_steps: int | None = Field(None, ge=1, description="node attempts the run (with its lineage) may start")
    max_tokens: int | None = Field(None, ge=1, description="model tokens the run (with its lineage) may use")
    max_cost: float | None = Field(None, gt=0, description="cost the run (with its lineage) may spend")

    def limits(self) -> dict[str, Any]:
        return {"deadline": self.deadline, "max_steps": self.max_steps, "max_tokens": self.max_tokens,
                "max_cost": self.max_cost}


class ForkBody(_Limits):
    patch: dict[str, Any] | None = Field(None, description="state fields to change at the checkpoint")
    effects: Literal["mock", "live"] = Field("mock", description="serve effects from the journal, or run them")
    mocks: dict[str, Any] | None = Field(None, description="{effect name: result} for effects with no record")
    queue: bool = Field(False, description="leave the fork to a worker: it is created QUEUED for one, with its "
                                           "patch, effects mode, mocks and limits, and nothing of it runs in the "
                                           "server (always so on a server started with --workers)")


class ReplayBody(Body):
    version: str | None = Field(None, description="a registered version of the run's graph: its hash, or the "
                                                   "MODULE:GRAPH it was registered by (default: its own)")
    mocks: dict[str, Any] | None = Field(None, description="{effect name: result} for effects with no record")
    queue: bool = Field(False, description="leave the replay to a worker: it is created QUEUED for one, and "
                                           "nothing of it runs in the server; GET /api/runs/{run_id}/report "
                                           "once it has ended (always so on a server started with --workers)")


class CancelBody(Body):
    reason: str = Field("", max_length=500, description="why, recorded with the cancellation")


class CompensateBody(Body):
    retry_in_doubt: bool = Field(False, description="call again compensations whose outcome was never recorded")
    queue: bool = Field(False, description="leave it to a worker, which imports the undo functions: the answer "
                                           "(202) says queued and has no steps; the run's journal records each "
                                           "undo as it is made (always so on a server started with --workers)")


class AnswerBody(Body):
    answer: Any = Field(description="the answer (checked against the question's response model, if any)")


class ResumeBody(_Limits):
    answers: dict[str, Any] | None = Field(
        None, description="{interrupt id: answer} for a run waiting for answers; every one is checked "
                          "before the run moves, and the run goes on with all of them")
    queue: bool = Field(False, description="leave what goes on to a worker: the answered run, or a failed run's "
                                           "continuation, waits QUEUED for one (always so on a server started "
                                           "with --workers)")


# ------------------------------------------------------------------ refusals in words

#: a number's type and its bound are one expectation: whichever was missed, both are said
NUMBER_ERRORS = frozenset({"int_type", "int_parsing", "int_from_float", "float_type", "float_parsing",
                           "finite_number", "greater_than", "greater_than_equal"})
#: words for JSON where the forms' words speak of inputs (a box ticked, a text typed)
JSON_WORDS: Mapping[str, str] = {
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "dict_type": "must be a JSON object",
    "model_type": "must be a JSON object",
}


class BodyRefused(InvalidRequest):
    """A request body its model refused: ``str()`` in words, the validator's errors as ``details``."""

    def __init__(self, message: str, details: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.details = details


def _number(field: FieldInfo) -> str | None:
    """What a number field expects, type and bound together; None for another field."""
    kinds = set(get_args(field.annotation)) or {field.annotation}
    noun = "a whole number" if int in kinds else "a number" if float in kinds else None
    if noun is None:
        return None
    bound = next((f" of at least {m.ge}" if isinstance(m, Ge) else f" above {m.gt}"
                  for m in field.metadata if isinstance(m, (Ge, Gt))), "")
    return f"must be {noun}{bound}"


def expects(err: ErrorDetails) -> str:
    """What a JSON value must be, in words; the validator's own when there are none (and a
    model author's own message as written)."""
    if err["type"] in wording.AUTHORED:
        return str(err["msg"]).removeprefix(wording.AUTHORED[err["type"]])
    return JSON_WORDS.get(err["type"]) or wording.expects(err) or f"is not valid: {err['msg']}"


def _expects(err: ErrorDetails, model: type[Body]) -> str:
    kind, loc = err["type"], err["loc"]
    field = model.model_fields.get(str(loc[0])) if len(loc) == 1 else None
    if kind == "extra_forbidden":
        return f"is not a field of this request (it takes: {', '.join(model.model_fields)})"
    if field is not None and kind in NUMBER_ERRORS and (said := _number(field)):
        return said
    if kind == "dict_type" and field is not None and field.description:
        # what goes in it: "a JSON object (state fields to change at the checkpoint)"
        return f"{expects(err)} ({field.description.split('; ')[0]})"
    return expects(err)


def raw(errors: list[ErrorDetails], prefix: tuple[str | int, ...] = ()) -> list[dict[str, Any]]:
    """The validator's own words for each error: where, its type, its message."""
    return [{"loc": [*prefix, *e["loc"]], "type": e["type"], "msg": e["msg"]} for e in errors]


def refused(error: ValidationError, model: type[Body]) -> BodyRefused:
    """A body's validation errors: each its field and what that expects, the validator's own
    words kept as details."""
    errors = error.errors(include_url=False, include_input=False)
    message = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {_expects(e, model)}" for e in errors)
    return BodyRefused(message, raw(errors))


def patch_refused(error: InvalidRequest) -> InvalidRequest:
    """A fork's patch the state model refused (the verdict is the exception the runtime was
    handling), worded as the body's own fields are: ``patch.n: must be a whole number``;
    any other refusal as it is."""
    verdict = error.__context__
    if not isinstance(verdict, ValidationError):
        return error
    errors = verdict.errors(include_url=False, include_input=False)
    message = "; ".join(f"{'.'.join(map(str, ('patch', *e['loc'])))}: {expects(e)}" for e in errors)
    return BodyRefused(message, raw(errors, ("patch",)))
