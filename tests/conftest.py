"""Shared fixtures: every runtime behaviour test runs on each store.

The PostgreSQL store runs on the server at ``HARNESS_TEST_PG_URL`` (``tests/pg.py``);
its params are skipped, saying why, when that server cannot be reached.
"""

from __future__ import annotations

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


#: runtime behaviour tests that cannot run on PostgreSQL as they are written, and why
NOT_ON_POSTGRES = {
    "test_import_is_all_or_nothing_and_checks_every_record":
        "opens its second, empty database by renaming the SQLite file in rt.store.url",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        reason = NOT_ON_POSTGRES.get(getattr(item, "originalname", item.name))
        if reason and callspec is not None and callspec.params.get("store") == "postgres":
            item.add_marker(pytest.mark.skip(reason=f"not on PostgreSQL: {reason}"))


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CheckpointStore]:
    s = STORES[request.param](request, tmp_path)
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
