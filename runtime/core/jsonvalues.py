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

from .errors import NodeError

__all__ = ["JSON", "non_finite", "problems", "to_json"]

#: a value that round-trips through JSON (dicts, lists, str, int, float, bool, None)
JSON: TypeAlias = Any


def to_json(value: Any, what: str) -> JSON:
    """``value`` as plain JSON data; ``NodeError`` naming ``what`` when it has no JSON form."""
    try:
        out = to_jsonable_python(value)
    except Exception as e:  # pydantic raises several types for unserialisable values
        raise NodeError(f"{what} is not JSON-serialisable: {e}") from e
    bad = non_finite(out)
    if bad is not None:
        raise NodeError(f"{what} holds {bad[1]} at {bad[0] or '(top)'}, which has no JSON form")
    return out


def non_finite(value: JSON, path: str = "") -> tuple[str, str] | None:
    """(path, repr) of the first NaN or infinite float inside ``value``, else None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, repr(value))
    if isinstance(value, Mapping):
        for k, v in value.items():
            found = non_finite(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = non_finite(v, f"{path}[{i}]")
            if found:
                return found
    return None


def problems(error: ValidationError, root: str = "value", *, as_field: bool = False) -> str:
    """Every validation failure as ``path: message`` (``field 'path': message`` with
    ``as_field``), joined with '; '."""
    out = []
    for err in error.errors():
        path = ".".join(map(str, err["loc"])) or root
        out.append(f"field {path!r}: {err['msg']}" if as_field else f"{path}: {err['msg']}")
    return "; ".join(out)
