"""Opening a runtime over a database: one way for every front end (the command line,
the web app), so each resolves the database URL and closes the runtime the same way."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from runtime import Runtime, SqlStore, resolve_ref
from runtime.history.creation import check_concurrency
from server.inputs import InputError

__all__ = ["DEFAULT_DB", "database_url", "open_runtime"]

DEFAULT_DB = "sqlite:///harness.db"


def database_url(given: str | None) -> str:
    """The URL to use: ``given``, else ``$HARNESS_DB``, else :data:`DEFAULT_DB`;
    a bare path (no ``://``) means a SQLite file. An empty one, given or in the environment,
    is refused: it is most often a variable that was not set (``--db "$DATABASE_URL"``),
    and falling back to a local file would leave workers polling an empty store."""
    if given is not None and not given.strip():
        raise InputError(f"--db is empty ({given!r}): give a database URL or a SQLite file path, or leave "
                         f"--db out to use $HARNESS_DB, else {DEFAULT_DB.removeprefix('sqlite:///')}")
    env = os.environ.get("HARNESS_DB")
    if given is None and env is not None and not env.strip():
        raise InputError(f"HARNESS_DB is set but empty ({env!r}): set it to a database URL or a SQLite file "
                         f"path, or unset it to use {DEFAULT_DB.removeprefix('sqlite:///')}")
    url = given or env or DEFAULT_DB
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
