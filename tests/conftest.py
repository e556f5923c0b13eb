"""Shared fixtures: every runtime behaviour test runs on each store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime import MemoryStore, Runtime, SqlStore
from runtime.store.base import CheckpointStore

STORES = {
    "memory": lambda tmp: MemoryStore(),
    "sqlite": lambda tmp: SqlStore(f"sqlite:///{tmp / 'harness.db'}"),
}


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CheckpointStore]:
    s = STORES[request.param](tmp_path)
    yield s
    s.close()


@pytest.fixture
def rt(store: CheckpointStore) -> Iterator[Runtime]:
    runtime = Runtime(store=store, max_concurrency=4)
    yield runtime
    runtime.close()
