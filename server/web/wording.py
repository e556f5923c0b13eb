"""A model's validation errors in words for people.

A validator says ``String should match pattern '^[A-Z]{3}-\\d+$'``: true, but it names
neither the field nor, for most people, what to type. Each error becomes a sentence that
names the field and says what it expects; the validator's own words are kept apart as
the detail, which pages show folded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from runtime.core.errors import InvalidRequest

#: what a value must be, by the validator's error type (``{…}`` from the error's context)
EXPECTED: Mapping[str, str] = {
    "missing": "is required",
    "string_pattern_mismatch": "is not in the expected format",
    "string_too_long": "must be at most {max_length} characters",
    "too_short": "must have at least {min_length} item(s)",
    "too_long": "must have at most {max_length} item(s)",
    "greater_than": "must be more than {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
    "multiple_of": "must be a multiple of {multiple_of}",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "finite_number": "must be a finite number",
    "bool_parsing": "must be yes or no (true or false)",
    "bool_type": "must be yes or no (true or false)",
    "string_type": "must be text",
    "literal_error": "must be one of {expected}",
    "enum": "must be one of {expected}",
    "list_type": "must be a list",
    "dict_type": "must be an object of named fields",
    "model_type": "must be an object of named fields",
    "model_attributes_type": "must be an object of named fields",
    "extra_forbidden": "is not a field this value has",
    "date_parsing": "must be a date like 2024-01-31",
    "date_from_datetime_parsing": "must be a date like 2024-01-31",
    "datetime_parsing": "must be a date and time like 2024-01-31T09:30:00",
    "datetime_from_date_parsing": "must be a date and time like 2024-01-31T09:30:00",
    "time_parsing": "must be a time like 09:30",
    "uuid_parsing": "must be a UUID like 123e4567-e89b-12d3-a456-426614174000",
    "url_parsing": "must be a web address like https://example.com",
    "url_scheme": "must be a web address starting with {expected_schemes}",
    "json_invalid": "is not valid JSON",
}
#: prefixes pydantic puts before a model author's own message (already written for people)
AUTHORED = {"value_error": "Value error, ", "assertion_error": "Assertion failed, "}


def expects(err: ErrorDetails) -> str | None:
    """What the value must be, in words (``must be at least 2``); None for an error type
    without words here."""
    kind = err["type"]
    ctx: Mapping[str, Any] = err.get("ctx") or {}
    if kind == "string_too_short":
        n = ctx.get("min_length", 1)
        return "must not be empty" if n == 1 else f"must be at least {n} characters"
    template = EXPECTED.get(kind)
    if template is None:
        return None
    try:
        return template.format(**ctx)
    except (KeyError, IndexError, ValueError):   # a context this version of pydantic does not give
        return template.split("{", 1)[0].rstrip()


def sentence(err: ErrorDetails, name: str) -> tuple[str, str]:
    """One error as (a sentence naming ``name`` and what it expects, the validator's words
    as detail: empty when the sentence already says all of them)."""
    raw = str(err["msg"])
    kind = err["type"]
    if kind in AUTHORED:   # a custom validator's own message: shown as its author wrote it
        return f"{name}: {raw.removeprefix(AUTHORED[kind])}", ""
    phrase = expects(err)
    if phrase is None:
        return f"{name} is not valid", raw
    return f"{name} {phrase}", "" if kind == "missing" else raw


def where(loc: tuple[str | int, ...]) -> str:
    """A location inside a field in words: ``("cc", 0)`` → ``cc item 0``."""
    return " ".join(f"item {p}" if isinstance(p, int) else str(p) for p in loc)


class Refused(InvalidRequest):
    """A refusal worded for people, with the words it replaces kept as ``detail``."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


def patch_refusal(error: InvalidRequest) -> InvalidRequest:
    """A patch the state model refused, in words (the runtime's message becomes the detail);
    any other refusal as it is. The model's verdict is the exception the runtime was handling."""
    verdict = error.__context__
    if not isinstance(verdict, ValidationError):
        return error
    said = [sentence(e, f"field {'.'.join(map(str, e['loc']))!r}" if e["loc"] else "the state")[0]
            for e in verdict.errors(include_url=False)]
    return Refused("The patch does not fit the state: " + "; ".join(said), str(error))
