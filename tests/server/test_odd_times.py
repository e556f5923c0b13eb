"""A store written by other code (an older import, a tool of the user's own) may hold times
no calendar shows — milliseconds given for seconds, a time before 1970. The pages that show
them still answer, saying which value is odd, instead of failing whole."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Seeded, app_over, make_seeded
from local_client import TestClient


@pytest.fixture(params=[1796526108815.0, -62135596801.0, 1e300])
def odd(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[tuple[Seeded, float]]:
    s = make_seeded(tmp_path / "h.db")
    value = float(request.param)
    db = sqlite3.connect(s.path)
    with db:
        pk = db.execute("SELECT pk FROM runs WHERE id = ?", [s.succeeded]).fetchone()[0]
        db.execute("UPDATE runs SET created_at = ? WHERE pk = ?", [value, pk])
        db.execute("UPDATE trace_events SET at = ? WHERE run_pk = ? AND seq = 2", [value, pk])
        db.execute("UPDATE checkpoints SET created_at = ? WHERE run_pk = ? AND seq = 1", [value, pk])
        db.execute("UPDATE node_attempts SET started_at = ?, ended_at = ? WHERE run_pk = ?", [value, value, pk])
    db.close()
    yield s, value
    s.rt.close()


def test_pages_showing_a_time_no_calendar_shows_still_answer(odd: tuple[Seeded, float]) -> None:
    s, value = odd
    run = s.succeeded
    with TestClient(app_over(s.rt)) as c:
        for url in ["/runs", f"/runs/{run}", f"/runs/{run}?cp=1", f"/runs/{run}/panels/attempts",
                    f"/runs/{run}/events/2", f"/threads/{run}", f"/api/runs/{run}"]:
            r = c.get(url)
            assert r.status_code == 200, (url, r.status_code, r.text[:300])
        assert f"{value!r} (not a time)" in c.get("/runs").text
