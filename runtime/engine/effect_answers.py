"""How a person settles a question about an effect: one whose outcome is unknown (in doubt),
or one a mocked branch has no record of (unrecorded). The answers' models and their checks."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ValidationError

from ..core.errors import InvalidAnswer
from ..core.jsonvalues import JSON


class InDoubtAnswer(BaseModel):
    """How a person settles an effect whose outcome is unknown."""

    action: Literal["result", "retry", "abort"]
    result: JSON = None


class UnrecordedAnswer(BaseModel):
    """How a person settles an effect that a mocked run has no record of."""

    action: Literal["mock", "live", "abort"]
    result: JSON = None


def validate_unrecorded_answer(answer: JSON) -> UnrecordedAnswer:
    try:
        decided = UnrecordedAnswer.model_validate(answer)
    except ValidationError as e:
        raise InvalidAnswer(
            "an unrecorded effect needs {\"action\": \"mock\", \"result\": ...}, "
            f"{{\"action\": \"live\"}} or {{\"action\": \"abort\"}}: {e.errors()[0]['msg']}"
        ) from None
    if decided.action == "mock" and "result" not in (answer or {}):
        raise InvalidAnswer('a "mock" answer needs the "result" the effect should return')
    return decided


def validate_in_doubt_answer(answer: JSON) -> InDoubtAnswer:
    try:
        return InDoubtAnswer.model_validate(answer)
    except ValidationError as e:
        raise InvalidAnswer(
            "an in-doubt effect needs {\"action\": \"result\", \"result\": ...}, "
            f"{{\"action\": \"retry\"}} or {{\"action\": \"abort\"}}: {e.errors()[0]['msg']}"
        ) from None
