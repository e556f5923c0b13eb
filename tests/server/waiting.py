"""Waiting for runs the app drives in the background, and a clock past every lease
(shared by the server tests)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from runtime import Run, Runtime, RunStatus

#: statuses a run driven by an action comes to rest in
ENDED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.INTERRUPTED)


def wait_for(rt: Runtime, run_id: str, statuses: Iterable[RunStatus] = ENDED, timeout: float = 10.0) -> Run:
    """Poll the store until the run (driven by the app in the background) reaches one of ``statuses``."""
    wanted = set(statuses)
    deadline = time.monotonic() + timeout
    while True:
        run = rt.store.get_run(run_id)
        if run.status in wanted:
            return run
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} is still {run.status.value} after {timeout} s")
        time.sleep(0.005)


class AnHourLater:
    """A clock an hour ahead: to it the lease of every running run has expired."""

    def time(self) -> float:
        return time.time() + 3600
