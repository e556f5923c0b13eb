"""Shared fixtures: every runtime behaviour test runs on each store.

The PostgreSQL store runs on the server at ``HARNESS_TEST_PG_URL`` (``tests/pg.py``);
its params are skipped, saying why, when that server cannot be reached (outside CI:
under ``CI`` an unreachable server fails them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pg import Server, SharedDatabase, Unreachable

from runtime import MemoryStore, Runtime, SqlStore
from runtime.store.base import CheckpointStore

#: store name (the test id) -> factory(request, tmp_path)
STORES: dict[str, Callable[[pytest.FixtureRequest, Path], CheckpointStore]] = {
    "memory": lambda request, tmp: MemoryStore(),
    "sqlite": lambda request, tmp: SqlStore(f"sqlite:///{tmp / 'harness.db'}"),
    "postgres": lambda request, tmp: SqlStore(request.getfixturevalue("pg_empty_url")),
}

#: a second, empty store of the same kind (an import target, another deployment)
OTHER_STORES: dict[str, Callable[[pytest.FixtureRequest, Path], CheckpointStore]] = {
    "memory": lambda request, tmp: MemoryStore(),
    "sqlite": lambda request, tmp: SqlStore(f"sqlite:///{tmp / 'other.db'}"),
    "postgres": lambda request, tmp: SqlStore(request.getfixturevalue("pg_url")),
}


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CheckpointStore]:
    s = STORES[request.param](request, tmp_path)
    yield s
    s.close()


@pytest.fixture
def other_store(request: pytest.FixtureRequest, store: CheckpointStore, tmp_path: Path) -> Iterator[CheckpointStore]:
    """An empty store of the same kind as ``store``."""
    kind = request.node.callspec.params["store"]
    s = OTHER_STORES[kind](request, tmp_path)
    yield s
    s.close()


@pytest.fixture
def rt(store: CheckpointStore) -> Iterator[Runtime]:
    runtime = Runtime(store=store, max_concurrency=4)
    yield runtime
    runtime.close()


# --------------------------------------------------------------------------- PostgreSQL


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Server]:
    """The PostgreSQL server, asked once per session; every test using it skips without it."""
    try:
        server = Server()
    except Unreachable as e:
        if os.environ.get("CI"):   # CI promises the PostgreSQL tests ran: fail, never skip
            pytest.fail(f"CI needs PostgreSQL: {e}")
        pytest.skip(str(e))
    yield server
    server.close()


@pytest.fixture
def pg_url(pg_server: Server) -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database of this test's own, dropped after it."""
    with pg_server.fresh_database() as url:
        yield url


@pytest.fixture(scope="session")
def pg_shared(pg_server: Server) -> Iterator[SharedDatabase]:
    shared = SharedDatabase(pg_server)
    yield shared
    shared.close()


@pytest.fixture
def pg_empty_url(pg_shared: SharedDatabase) -> str:
    """The URL of the session's PostgreSQL database, emptied for this test (cheaper than a new one)."""
    return pg_shared.empty()
