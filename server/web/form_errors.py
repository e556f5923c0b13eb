"""A response model's verdict on an answer read from a form, put back on the form.

Each error names the field by its label and says what it expects (``wording``); the
validator's own words ride along as a detail, so a pattern or a type name never is the
message a person reads first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from . import wording
from .forms import FormField, Loc


@dataclass(frozen=True, slots=True)
class ModelError:
    loc: Loc
    message: str      # for people: names the field, says what it expects
    detail: str = ""  # the validator's own words (empty when the message says it all)


def _deepest(fields: Sequence[FormField], where: tuple[str, ...]) -> tuple[FormField | None, tuple[str, ...]]:
    """The deepest field ``where`` falls in, and the rest of ``where`` inside it."""
    by_path = {f.path: f for top in fields for f in top.walk()}
    for n in range(len(where), 0, -1):
        if where[:n] in by_path:
            return by_path[where[:n]], where[n:]
    return None, where


def errors_of(error: ValidationError, fields: Sequence[FormField] = (), prefix: Loc = ()) -> list[ModelError]:
    """A model's validation errors, each located (under ``prefix``) and in words that name
    the field of ``fields`` it falls in."""
    out = []
    for e in error.errors(include_url=False):
        loc: Loc = (*prefix, *e["loc"])
        field, inner = _deepest(fields, tuple(str(p) for p in loc))
        inside = wording.where(loc[len(loc) - len(inner):])
        if field is not None:
            name = f"{field.label} {inside}" if inside else field.label
        else:
            name = inside or "The answer"
        message, detail = wording.sentence(e, name)
        out.append(ModelError(loc, message, detail))
    return out


def beside_refused(fields: Sequence[FormField], errors: Sequence[ModelError]) -> list[ModelError]:
    """A model's errors about an answer read from a form that refused some fields: those
    fields are missing from it, so what the model says of them (and of the answer as a
    whole) adds nothing to the form's own message; what it says of the others stands."""
    refused = [f.path for top in fields for f in top.walk() if f.error]
    return [e for e in errors
            if e.loc and not any(tuple(str(p) for p in e.loc[:len(path)]) == path for path in refused)]


def attach_errors(fields: Sequence[FormField], errors: Sequence[ModelError]) -> list[str]:
    """Put each error on the deepest field its location falls in; returns those that
    belong to no field (a model-wide rule)."""
    loose = []
    for e in errors:
        target, _ = _deepest(fields, tuple(str(p) for p in e.loc))
        if target is None:
            loose.append(e.message)
            continue
        target.error = f"{target.error}; {e.message}" if target.error else e.message
        if e.detail:
            target.detail = f"{target.detail}; {e.detail}" if target.detail else e.detail
    return loose
