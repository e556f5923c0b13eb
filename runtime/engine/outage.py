"""A store that cannot be reached for a while: a database restarting, a network blip.

A run's step commits (pure outcomes, an effect's outcome, a heartbeat) that fail with an
error the store calls unreachable (``CheckpointStore.unreachable``) are then kept
in memory and tried again, at growing intervals, while the run goes on: nothing in
them has left the process, and failing the run for a database's few seconds away
would end work a person or a model call has paid for. Only what must be on disk
first still needs the store at once: an effect does not start until its start is
recorded, and a run's end or pause is tried again by ``ending.commit_end``.

The wait is bounded by the lease: once the store has been unreachable for as long as
the run's lease lasts, another process may have taken the run over, so the refusal
is raised and the run ends as on any unexpected error (if the store lets it).
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

#: the waits between tries while the store cannot be reached, the last one repeated
BACKOFF = (0.1, 0.25, 0.5, 1.0, 2.0)


class Outage:
    """Since when one run's step commits have not reached the store, and when to try next."""

    __slots__ = ("run_id", "since", "tries", "next_at")

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.since: float | None = None
        self.tries = 0
        self.next_at = 0.0   # no try is held back before this

    def refused(self, error: Exception, now: float, limit: float, held: int) -> float | None:
        """A commit of ``held`` events failed again: when to try it next; None once the store
        has been unreachable for ``limit`` seconds (the caller gives up)."""
        if self.since is None:
            self.since = now
            log.warning("run %s: the store cannot be reached (%s: %s); it goes on, keeping what it "
                        "records until the store is back", self.run_id, type(error).__name__, error)
        elif now - self.since >= limit:
            log.error("run %s: the store has been unreachable for %.0fs, as long as the run's lease "
                      "lasts; giving up with %d events not recorded", self.run_id, now - self.since, held)
            return None
        self.next_at = now + BACKOFF[min(self.tries, len(BACKOFF) - 1)]
        self.tries += 1
        return self.next_at

    def over(self, now: float) -> None:
        """A commit went in: the store is back."""
        if self.since is not None:
            log.warning("run %s: the store is back after %.1fs; what the run kept meanwhile is recorded",
                        self.run_id, now - self.since)
            self.since, self.tries, self.next_at = None, 0, 0.0
