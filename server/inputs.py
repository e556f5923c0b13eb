"""JSON that people type: a command-line argument, a form field, an uploaded file.

``json.loads`` alone lets through values the runtime cannot hold, or fails on them
with a traceback instead of a sentence:

- documents nested so deep that parsing exhausts the stack, or that the store could
  not read back once written: refused past ``MAX_DEPTH`` levels;
- integers longer than Python converts from text (4,300 digits by default);
- ``NaN``, ``Infinity`` and numbers like ``1e400`` that only a float overflow turns
  into infinity: JSON has no such values, and stored state would silently get ``null``;
- a key given twice in one object (``{"tier": "a", "tier": "b"}``): the parser would
  keep the last one without a word.

Each is refused with an :class:`InputError` whose one-line message names the value
(``what``: the option, field or file it came from).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from runtime import JSON
from runtime.core.jsonvalues import MAX_DEPTH as STORABLE_DEPTH

__all__ = ["MAX_DEPTH", "InputError", "kind_of", "nesting_depth", "parse_json", "parse_object"]

#: deepest nesting accepted from people: below what the runtime stores
#: (``STORABLE_DEPTH``), since a typed value is wrapped a few levels deeper (a mock
#: inside the run's mocks, a field inside the state) before it is stored
MAX_DEPTH = 100
assert MAX_DEPTH + 10 <= STORABLE_DEPTH


class InputError(Exception):
    """A value the user gave cannot be used; the message names it, in one line."""


class _Refused(Exception):
    """Raised from inside the parser's hooks; becomes an InputError naming the value."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))   # type: ignore[func-returns-value]
        raise _Refused(f"key {twice!r} appears twice in one object")
    return out


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON value")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {text[:40]} is too large")
    return value


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    limit = sys.get_int_max_str_digits()
    if limit and digits > limit:
        raise _Refused(f"an integer has {digits} digits (at most {limit} are accepted)")
    return int(text)


def nesting_depth(value: Any, stop: int = MAX_DEPTH) -> int:
    """How deeply lists and objects nest in ``value`` (a scalar is 0); stops counting
    past ``stop``. Iterative, so a deep value cannot exhaust the stack here."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > stop:
            break
        stack.extend((child, depth + 1) for child in children)
    return deepest


def parse_json(text: str, what: str, max_depth: int = MAX_DEPTH, *, lines: bool = False) -> JSON:
    """``text`` as a JSON value; ``InputError`` naming ``what`` when it is not one we accept
    (``max_depth``: for documents that wrap such values in an envelope of their own;
    ``lines``: where a syntax error is says its line too, for text typed into a box)."""
    try:
        value = json.loads(text, parse_constant=_constant, parse_float=_float, parse_int=_int,
                           object_pairs_hook=_object)
    except json.JSONDecodeError as e:
        where = f"(line {e.lineno}, column {e.colno})" if lines else f"at column {e.colno}"
        raise InputError(f"{what} is not valid JSON: {e.msg} {where}") from None
    except _Refused as e:
        raise InputError(f"{what} is not accepted: {e}") from None
    except RecursionError:  # the parser's own stack ran out: far deeper than max_depth
        raise InputError(f"{what} nests deeper than {max_depth} levels") from None
    if nesting_depth(value, max_depth) > max_depth:
        raise InputError(f"{what} nests deeper than {max_depth} levels")
    return value


def kind_of(value: JSON) -> str:
    """The JSON kind of ``value`` in words: "an array", "null", …"""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def parse_object(text: str, what: str, meaning: str, max_depth: int = MAX_DEPTH) -> dict[str, JSON]:
    """``text`` as a JSON object; anything else (``null`` and ``[]`` too) is an
    ``InputError`` that says what ``what`` must be (``meaning``)."""
    value = parse_json(text, what, max_depth)
    if not isinstance(value, dict):
        raise InputError(f"{what}: {meaning}, not {kind_of(value)}")
    return value
