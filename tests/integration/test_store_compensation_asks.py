"""Compensations left to workers, on every store: asked, listed oldest first (one run's
alone, when asked for), asked again (the later ask replaces the earlier and goes to the
back), and dropped only as the ask a worker took up — an ask made meanwhile stays."""

from __future__ import annotations

import pytest
from test_store_contract import add_run, store  # noqa: F401  (the fixture over every store)

from runtime.core.errors import NotFound
from runtime.core.records import CompensationAsk
from runtime.core.states import RunStatus
from runtime.store.base import CheckpointStore
from runtime.store.sql import SqlStore


def test_asks_are_listed_oldest_first_and_replaced_when_asked_again(store: CheckpointStore) -> None:  # noqa: F811
    for run_id in ("r1", "r2", "r3"):
        add_run(store, run_id, status=RunStatus.CANCELLED)
    assert store.compensation_asks() == []
    store.ask_compensation("r2", False, 10.0)
    store.ask_compensation("r1", True, 11.5)
    store.ask_compensation("r3", False, 12.0)
    assert store.compensation_asks() == [CompensationAsk("r2", False, 10.0), CompensationAsk("r1", True, 11.5),
                                         CompensationAsk("r3", False, 12.0)]
    assert store.compensation_asks(limit=2) == [CompensationAsk("r2", False, 10.0), CompensationAsk("r1", True, 11.5)]
    assert store.compensation_asks("r1") == [CompensationAsk("r1", True, 11.5)]
    assert store.compensation_asks("nope") == []
    store.ask_compensation("r2", True, 13.25)   # asked again: one ask, the later
    assert store.compensation_asks() == [CompensationAsk("r1", True, 11.5), CompensationAsk("r3", False, 12.0),
                                         CompensationAsk("r2", True, 13.25)]


def test_dropping_forgets_only_the_ask_taken_up(store: CheckpointStore) -> None:  # noqa: F811
    add_run(store, "r1", status=RunStatus.FAILED)
    add_run(store, "r2", status=RunStatus.FAILED)
    store.ask_compensation("r1", False, 20.0)
    store.ask_compensation("r2", False, 20.0)
    store.ask_compensation("r1", False, 21.0)   # asked again while a worker made the first
    store.drop_compensation_ask("r1", 20.0)
    assert store.compensation_asks("r1") == [CompensationAsk("r1", False, 21.0)]
    store.drop_compensation_ask("r1", 21.0)
    store.drop_compensation_ask("unknown", 21.0)   # nothing to forget: no error
    assert store.compensation_asks() == [CompensationAsk("r2", False, 20.0)]


def test_asking_for_an_unknown_run_is_refused(store: CheckpointStore) -> None:  # noqa: F811
    with pytest.raises(NotFound, match="nope"):
        store.ask_compensation("nope", False, 1.0)
    assert store.compensation_asks() == []


def test_an_ask_survives_reopening_the_database(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'asks.db'}"
    first = SqlStore(url)
    add_run(first, "r1", status=RunStatus.CANCELLED)
    first.ask_compensation("r1", True, 5.0)
    first.close()
    again = SqlStore(url)
    try:
        assert again.compensation_asks() == [CompensationAsk("r1", True, 5.0)]
    finally:
        again.close()
