"""Opening a runtime over a database: one way for every front end (the command line,
the web app), so each resolves the database URL and closes the runtime the same way."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from runtime import Runtime, SqlStore, resolve_ref
from runtime.history.creation import check_concurrency

__all__ = ["DEFAULT_DB", "database_url", "open_runtime"]

DEFAULT_DB = "sqlite:///harness.db"


def database_url(given: str | None) -> str:
    """The URL to use: ``given``, else ``$HARNESS_DB``, else :data:`DEFAULT_DB`;
    a bare path (no ``://``) means a SQLite file."""
    url = given or os.environ.get("HARNESS_DB") or DEFAULT_DB
    return url if "://" in url else f"sqlite:///{url}"


@contextmanager
def open_runtime(db_url: str, graph_refs: Iterable[str | None] = (), *, max_concurrency: int | None = None,
                 lease_ttl: float | None = None) -> Iterator[Runtime]:
    """A runtime over ``db_url`` with the graphs ``graph_refs`` (``MODULE:GRAPH`` or plan
    files; ``None`` is skipped) registered; closed when the block ends. ``max_concurrency``
    and ``lease_ttl`` are the Runtime's (None: its defaults).

    The graphs are resolved, and the options checked, before the database is opened, so
    a mistake leaves no database file and no open connection behind."""
    graphs = [resolve_ref(ref) for ref in graph_refs if ref]
    if max_concurrency is not None:
        check_concurrency(max_concurrency)
    options: dict[str, Any] = {"max_concurrency": max_concurrency, "lease_ttl": lease_ttl}
    rt = Runtime(store=SqlStore(db_url), **{k: v for k, v in options.items() if v is not None})
    try:
        for graph in graphs:
            rt.register(graph)
        yield rt
    finally:
        rt.close()
