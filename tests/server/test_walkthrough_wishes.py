"""What users asked of the debugger after a walkthrough, each pinned: a long wait drawn
short on the attempts waterfall, removed list items in index order, a fork's live effects
said on the thread page."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Seeded, app_over, review_graph
from local_client import TestClient

from runtime import Runtime, RunStatus, SqlStore
from runtime.core.records import NodeAttempt
from runtime.core.states import NodeStatus

Client = TestClient[Any]

#: how long the person took to answer in these tests: 2 h 14 min
ANSWERED_AFTER = 2 * 3600 + 14 * 60


class Later:
    """A clock a test moves on: hours pass between a question and its answer in no time."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def time(self) -> float:
        return time.time() + self.ahead


def test_a_long_wait_is_drawn_as_a_short_break_and_the_bars_keep_their_true_times(tmp_path: Path) -> None:
    clock = Later()
    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'h.db'}"), clock=clock)
    try:
        graph = review_graph()
        run = asyncio.run(rt.start(graph, {"doc": "notes"}))
        assert run.status == RunStatus.INTERRUPTED
        clock.ahead = ANSWERED_AFTER
        assert asyncio.run(rt.resume(run.id, {"approve": True})).status == RunStatus.SUCCEEDED
        with TestClient(app_over(rt)) as c:
            html = c.get(f"/runs/{run.id}/panels/attempts", headers={"HX-Request": "true"}).text
    finally:
        rt.close()
    assert re.search(r'<span class="gap-label[^"]*">⋯ 2 h 14 min waiting ⋯</span>', html)
    bars = {label: (float(left), float(width)) for label, left, width in re.findall(
        r'<span class="bar-label">(\w+ #\d)</span>.*?<span class="bar [^"]*" style="margin-left: ([\d.]+)%; '
        r'width: ([\d.]+)%"', html)}
    assert set(bars) == {"draft #1", "ask #1", "ask #2"}
    # the hours of waiting take a short break's width, not the whole axis
    asked_end = bars["ask #1"][0] + bars["ask #1"][1]
    assert 0 < bars["ask #2"][0] - asked_end <= 5
    assert bars["ask #2"][0] < 95
    # what the bars say is the real time
    assert "started 2 h 14 min after attempt 1 ended" in html


def test_the_waterfall_breaks_only_long_idle_stretches_and_marks_checkpoints_inside_them(shared: Seeded) -> None:
    from server.web.waterfall import axis, bars, mark

    run = shared.rt.store.get_run(shared.succeeded)
    t0 = run.created_at
    attempts = [NodeAttempt(run.id, "a", 1, NodeStatus.SUCCEEDED, t0 + 0.010, t0 + 0.020),
                NodeAttempt(run.id, "b", 1, NodeStatus.INTERRUPTED, t0 + 0.020, t0 + 0.030),
                NodeAttempt(run.id, "b", 2, NodeStatus.SUCCEEDED, t0 + 0.030 + ANSWERED_AFTER,
                            t0 + 0.040 + ANSWERED_AFTER)]
    shown = axis(attempts, run)
    [gap] = shown.breaks
    assert (gap.start, gap.end) == (t0 + 0.030, t0 + 0.030 + ANSWERED_AFTER)
    drawn = bars(attempts, run, shown)
    # the 40 ms that ran share the axis but the break: each 10 ms attempt a quarter of it
    assert [b["width"] for b in drawn] == [pytest.approx((100 - gap.width) / 4)] * 3
    assert drawn[2]["left"] == pytest.approx(drawn[1]["left"] + drawn[1]["width"] + gap.width)
    assert gap.left < (mark(shown, t0 + 3600) or 0) < gap.left + gap.width
    # a pause under a second, or short beside the time attempts ran, stays on scale
    for pause, ran in ((0.9, 0.01), (3.0, 10.0)):
        retried = [NodeAttempt(run.id, "b", 1, NodeStatus.FAILED, t0, t0 + ran),
                   NodeAttempt(run.id, "b", 2, NodeStatus.SUCCEEDED, t0 + ran + pause, t0 + 2 * ran + pause)]
        assert axis(retried, run).breaks == ()
