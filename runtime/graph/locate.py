"""Find Python objects by reference: ``package.module:attribute``.

Plans name their functions and state models this way, and stored runs name their
graphs this way; this module only imports, it knows nothing of graphs or plans.
"""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import BaseModel

from ..core.errors import InvalidRequest


def import_ref(ref: str) -> Any:
    """The object ``ref`` names; ``InvalidRequest`` (one line) when it cannot be found."""
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise InvalidRequest(f"{ref!r} is not a reference of the form package.module:attribute")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise InvalidRequest(f"cannot import {module_name!r} (from {ref!r}): {e}") from None
    except Exception as e:  # the module itself is broken: say where, in one line
        raise InvalidRequest(f"importing {module_name!r} failed: {type(e).__name__}: {e}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise InvalidRequest(f"{module_name!r} has no attribute {attr!r} (from {ref!r})") from None
    return obj


def resolve_model(ref: str) -> type[BaseModel] | None:
    """The pydantic model ``ref`` names, or None when it names nothing or something else."""
    try:
        obj = import_ref(ref)
    except InvalidRequest:
        return None
    return obj if isinstance(obj, type) and issubclass(obj, BaseModel) else None


def resolve_callable(ref: str) -> Any:
    """The object ``ref`` names (callers check that it is callable)."""
    return import_ref(ref)
