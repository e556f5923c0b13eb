"""A cheaper constructor for frozen, slotted dataclasses.

A frozen dataclass's own ``__init__`` sets each field with ``object.__setattr__``,
the generic attribute path, which made building a record cost about four times as
much as a plain class's; the run loop builds several records per node. ``fast_init``
gives the class an ``__init__`` that sets each field through its slot's descriptor:
the same fields, defaults and checks by callers' code, still frozen afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, TypeVar

T = TypeVar("T")


def fast_init(cls: type[T]) -> type[T]:
    """Replace ``cls.__init__`` (a frozen dataclass with slots, every field in ``__init__``,
    no ``__post_init__``) with one that sets the slots directly."""
    if not is_dataclass(cls) or "__slots__" not in cls.__dict__ or hasattr(cls, "__post_init__"):
        raise TypeError(f"fast_init needs a slotted dataclass without __post_init__, not {cls.__name__}")
    names: dict[str, Any] = {"_MISSING": MISSING}
    params: list[str] = []
    body: list[str] = []
    for f in fields(cls):
        if not f.init or f.kw_only:
            raise TypeError(f"fast_init: field {f.name!r} of {cls.__name__} is not a positional init field")
        setter = f"_set_{f.name}"
        names[setter] = getattr(cls, f.name).__set__
        if f.default is not MISSING:
            names[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
            body.append(f"    {setter}(self, {f.name})")
        elif f.default_factory is not MISSING:
            names[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_MISSING")
            body.append(f"    {setter}(self, _factory_{f.name}() if {f.name} is _MISSING else {f.name})")
        else:
            params.append(f.name)
            body.append(f"    {setter}(self, {f.name})")
    source = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body or ["    pass"]) + "\n"
    exec(source, names)  # noqa: S102 - built from the class's own field names only
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    setattr(cls, "__init__", init)
    return cls


def fast_replace(cls: type[T]) -> Callable[[T, dict[str, Any]], T]:
    """``dataclasses.replace`` for ``cls`` (a ``fast_init`` class): the same record, built
    by one generated call instead of a loop over the fields (a run's row is replaced at
    every commit, and it has twenty fields). Unknown names raise ``TypeError``, as there."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    known = frozenset(names)
    args = ", ".join(f"c[{n!r}] if {n!r} in c else self.{n}" for n in names)
    scope: dict[str, Any] = {"_cls": cls, "_known": known}
    source = ("def replace(self, c):\n"
              "    if not c.keys() <= _known:\n"
              "        raise TypeError(f'{_cls.__name__} has no field(s) {sorted(c.keys() - _known)}')\n"
              f"    return _cls({args})\n")
    exec(source, scope)  # noqa: S102 - built from the class's own field names only
    replace: Callable[[T, dict[str, Any]], T] = scope["replace"]
    return replace
