"""Keeping U+0000 on PostgreSQL, whose text values cannot hold it (nor could the JSONB
values of stores before schema 4; JSON values are escaped alike, so old rows read the same).

A node may write a string holding U+0000 (``"\\x00"``); SQLite and MemoryStore keep
it, while PostgreSQL refuses the whole batch ("unsupported Unicode escape sequence").
On PostgreSQL the SQL store therefore stores U+0000 as the two characters U+E000 "0",
and U+E000 itself (a private-use character) as U+E000 "1", in JSON values (strings
and keys) and in the free-text columns (error messages, cancel reasons). Everything
else is stored as it is and every string reads back exactly as it was written; only
values holding one of the two characters pay for the rewrite, which the cheap
substring tests below decide.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic_core import from_json, to_json

#: the escape character: followed by "0" it stands for U+0000, by "1" for itself
ESC = "\ue000"
_ESC_UTF8 = ESC.encode()
_ESCAPED = re.compile(ESC + "([01])")


def escape(text: str) -> str:
    """``text`` as PostgreSQL can store it."""
    if "\x00" not in text and ESC not in text:
        return text
    return text.replace(ESC, ESC + "1").replace("\x00", ESC + "0")


def unescape(text: str) -> str:
    """The string ``escape`` was given."""
    if ESC not in text:
        return text
    return _ESCAPED.sub(lambda m: "\x00" if m[1] == "0" else ESC, text)


def escape_json(text: str) -> str:
    """JSON text with every string in it passed through ``escape``."""
    # a NUL is always written "\u0000" in JSON text; a false alarm (an escaped
    # backslash followed by "u0000") only costs the rewrite, which changes nothing
    if "\\u0000" not in text and ESC not in text:
        return text
    return to_json(_map_strings(from_json(text), escape)).decode()


def loads(data: str | bytes) -> Any:
    """A JSON value read from PostgreSQL, with ``escape_json`` undone."""
    value = from_json(data)
    found = (_ESC_UTF8 in data) if isinstance(data, bytes) else (ESC in data)
    return _map_strings(value, unescape) if found else value


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {fn(k): _map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, fn) for v in value]
    return value
