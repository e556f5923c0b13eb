"""State models whose fields have aliases: refused unless they also validate by name.

A run keeps its state as JSON keyed by field name (what ``model_dump`` gives), and
validates it again wherever a node or a page reads it. A model with aliases that takes
only its aliases would drop every stored value as an unknown key and fill in defaults:
the run would succeed with its input and its writes silently lost. Nested models are
read back the same way, so they are checked too.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable

from pydantic import BaseModel

from ..core.errors import Problem


def alias_problems(state: type[BaseModel]) -> Iterable[Problem]:
    seen: set[type[BaseModel]] = set()
    for model, where in _models(state, f"state {state.__name__}", seen):
        config = model.model_config
        if config.get("validate_by_name") or config.get("populate_by_name"):
            continue
        aliased = [(name, info) for name, info in model.model_fields.items()
                   if (info.alias is not None and info.alias != name)
                   or (info.validation_alias is not None and info.validation_alias != name)]
        if aliased:
            name, info = aliased[0]
            alias = info.validation_alias if info.validation_alias is not None else info.alias
            more = f" (and {len(aliased) - 1} more)" if len(aliased) > 1 else ""
            yield Problem(where, f"field {name!r} of {model.__name__} has the alias {alias!r}{more}, and the "
                                 f"model takes only aliases: a run stores its state by field name, so every "
                                 f"value would be dropped; set model_config = ConfigDict(validate_by_name=True) "
                                 f"on {model.__name__}, or drop the aliases")


def _models(model: type[BaseModel], where: str, seen: set[type[BaseModel]]
            ) -> Iterable[tuple[type[BaseModel], str]]:
    if model in seen:
        return
    seen.add(model)
    yield model, where
    for name, info in model.model_fields.items():
        for inner in _inner_models(info.annotation):
            yield from _models(inner, f"{where}.{name}", seen)


def _inner_models(annotation: object) -> Iterable[type[BaseModel]]:
    """The model classes an annotation holds: itself, or inside list[...], X | None, dict[...]."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _inner_models(arg)
