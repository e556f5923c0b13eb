"""Read a plan ``.json`` file into plain data, with one-line errors for every way a
file can be unusable (unreadable, not UTF-8, not JSON, nested or numbered beyond what
Python can parse)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..core.errors import GraphError, InvalidRequest, Problem
from .validate import MAX_NESTING


def load_plan_file(path: str) -> Any:
    """The JSON document in the file at ``path``; ``InvalidRequest`` when it cannot be read
    as text, ``GraphError`` (located at the file) when the text is not a usable plan."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise InvalidRequest(f"cannot read plan {path}: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidRequest(f"cannot read plan {path}: not UTF-8 text "
                             f"(byte 0x{raw[e.start]:02x} at offset {e.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise GraphError([Problem(f"{path}:{e.lineno}:{e.colno}", f"not valid JSON: {e.msg}")]) from None
    except RecursionError:  # the parser recurses once per level: fail before the stack does
        raise GraphError([Problem(path, f"JSON nested too deeply (a plan may nest at most "
                                        f"{MAX_NESTING} levels)")]) from None
    except ValueError:  # the only other ValueError: an integer beyond Python's digit limit
        raise GraphError([Problem(path, f"JSON holds an integer longer than "
                                        f"{sys.get_int_max_str_digits()} digits")]) from None
