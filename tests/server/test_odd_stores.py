"""A store written by other code (an older import, a tool of the user's own) may hold times
no calendar shows — milliseconds given for seconds, a time before 1970. The pages that show
them still answer, saying which value is odd, instead of failing whole; and what no page
foresaw (a fault of the server's own) is an error page naming it, its traceback logged."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Seeded, app_over, make_seeded
from local_client import TestClient

from server.web import services


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



def test_a_fault_of_the_servers_own_is_an_error_page_and_logged(seeded: Seeded,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Not the framework's bare JSON body on a page: the page (or the API's JSON) says what
    kind of fault it was, and the log has its traceback."""
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug of the server's own")

    monkeypatch.setattr(services, "runs_page", broken)
    logged: list[logging.LogRecord] = []
    with TestClient(app_over(seeded.rt)) as c:
        # after the app has set logging up (which replaces the root's handlers)
        handler = logging.Handler()
        handler.emit = logged.append   # type: ignore[method-assign]
        logging.getLogger("server.web.app").addHandler(handler)
        page = c.get("/runs")
        assert page.status_code == 500 and page.headers["content-type"].startswith("text/html")
        assert "internal error (RuntimeError): the server&#39;s log has the details" in page.text
        api = c.get("/api/runs")
        assert api.status_code == 500
        assert api.json() == {"error": "internal error (RuntimeError): the server's log has the details",
                              "status": 500}
    logging.getLogger("server.web.app").removeHandler(handler)
    assert [r.getMessage() for r in logged] == ["GET /runs failed", "GET /api/runs failed"]
    assert all(r.exc_info and "a bug of the server's own" in str(r.exc_info[1]) for r in logged)
