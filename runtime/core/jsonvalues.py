"""JSON values as the kernel stores them: one type alias, one converter, one way to
name what failed validation.

Stored values are strict JSON: NaN and infinities have no JSON form (serialisers
would silently turn them into ``null``), so they are refused with the path of the
offending value instead of being lost.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeAlias

from pydantic import ValidationError
from pydantic_core import to_jsonable_python

from .errors import InvalidInputError

__all__ = ["JSON", "MAX_DEPTH", "problems", "to_json", "unstorable"]

#: a value that round-trips through JSON (dicts, lists, str, int, float, bool, None)
JSON: TypeAlias = Any


#: deepest nesting of lists and objects a stored value may have: the store reads JSON
#: back with a parser that stops at about 200 levels, and keeps values a few levels
#: inside its columns, so this leaves room to spare
MAX_DEPTH = 120


def to_json(value: Any, what: str) -> JSON:
    """``value`` as plain JSON data; ``InvalidInputError`` (a ``NodeError`` of class
    ``invalid_input``: the value a node gave, not the runtime, is at fault) naming ``what``
    when it has no JSON form (an unserialisable object, NaN or infinity, nesting past
    ``MAX_DEPTH``)."""
    try:
        out = to_jsonable_python(value)
    except Exception as e:  # pydantic raises several types for unserialisable values
        raise InvalidInputError(f"{what} is not JSON-serialisable: {e}") from e
    problem = unstorable(out)
    if problem is not None:
        raise InvalidInputError(f"{what} {problem}")
    return out


def unstorable(value: JSON, max_depth: int = MAX_DEPTH) -> str | None:
    """Why a JSON value cannot be stored faithfully (NaN or infinity, which have no JSON
    form; nesting deeper than ``MAX_DEPTH``), or None. Iterative: a deep value cannot
    exhaust the stack here."""
    stack: list[tuple[JSON, str, int]] = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return f"holds {item!r} at {path or '(top)'}, which has no JSON form"
        if isinstance(item, Mapping):
            children = [(v, f"{path}.{k}" if path else str(k)) for k, v in item.items()]
        elif isinstance(item, (list, tuple)):
            children = [(v, f"{path}[{i}]") for i, v in enumerate(item)]
        else:
            continue
        if depth + 1 > max_depth:
            where = path if len(path) <= 60 else path[:60] + "…"
            return f"is nested more than {max_depth} levels deep (at {where})"
        stack.extend((v, p, depth + 1) for v, p in reversed(children))
    return None


def problems(error: ValidationError, root: str = "value", *, as_field: bool = False) -> str:
    """Every validation failure as ``path: message`` (``field 'path': message`` with
    ``as_field``), joined with '; '."""
    out = []
    for err in error.errors():
        path = ".".join(map(str, err["loc"])) or root
        out.append(f"field {path!r}: {err['msg']}" if as_field else f"{path}: {err['msg']}")
    return "; ".join(out)


def json_equal(x: Any, y: Any) -> bool:
    """JSON equality: ``==``, except that a bool never equals a number, at any depth.

    This runs on every item of a diffed list, hence one function with flat loops.
    """
    if x is y:
        return True
    try:
        if x != y:  # C-speed; JSON-equal values are always ``==``
            return False
    except RecursionError:
        return False  # too deep for the C comparison: the caller walks it level by level
    # ``==`` matched the structure; what is left is a bool where the other side has a number.
    if type(x) is not type(y):
        return type(x) is not bool and type(y) is not bool
    stack = [(x, y)]
    while stack:
        x, y = stack.pop()
        if type(x) is dict:
            pairs: Any = ((v, y[k]) for k, v in x.items())
        elif type(x) is list:
            pairs = zip(x, y)
        else:
            continue
        for v, w in pairs:
            tv = type(v)
            if tv is type(w):
                if (tv is dict or tv is list) and v is not w:
                    stack.append((v, w))
            elif tv is bool or type(w) is bool:
                return False
    return True
