"""Committing the batch that ends or pauses a run: the commit its caller waits for.

A store's refusal there is usually passing (SQLite locked past its timeout, a dropped
connection), so the same batch is tried again a few times, briefly. Nothing is written
twice: a refused commit is one rolled-back transaction, and a commit reported refused
that the store did apply (a connection lost while committing) shows in the run's row,
which then holds the batch's last event; the run's fence guarantees no one else wrote it.

When the refusal lasts, the run stays RUNNING in the store with what it committed
before. Its lease is then released in a commit of its own, so that any process can
resume it at once instead of after the lease's time, and the caller gets
``EndNotRecorded`` saying so. ``LeaseLost`` (and any other refusal the library makes
on purpose) is never retried: another process owns the run, or trying again cannot help.
"""

from __future__ import annotations

import asyncio
import logging

from ..core.errors import EndNotRecorded, HarnessError
from ..core.records import Batch, Run
from ..core.states import RunStatus
from .recorder import Recorder, holds

log = logging.getLogger(__name__)

#: the pauses between tries: three tries within about half a second
RETRY_DELAYS = (0.1, 0.4)


async def commit_end(rec: Recorder) -> None:
    """Commit the current batch, which ends or pauses the run, forced to disk."""
    delays = iter(RETRY_DELAYS)
    while True:
        try:
            rec.flush(durable=True)
            rec.outage.over(rec.now())
            return
        except HarnessError:
            raise
        except Exception as e:
            refused = e
        stored = rec.stored_run()
        if holds(stored, rec.run):
            log.info("run %s: its end was recorded though the store reported %r", rec.run.id, refused)
            rec.flushed(rec.batch)
            return
        delay = next(delays, None)
        if delay is None and rec.outage.since is not None:
            # the store was away before the end came: giving up now would lose what the run
            # kept meanwhile (an effect's outcome), so the end waits for it as the steps did
            retry_at = rec.outage.refused(refused, rec.now(), rec.env.lease_ttl, len(rec.batch.events))
            delay = None if retry_at is None else max(0.0, retry_at - rec.now())
        if delay is None:
            break
        log.warning("run %s: the store refused to record its end (%r); trying again in %.1fs",
                    rec.run.id, refused, delay)
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            # the caller left while the end waited to be tried again: the run may be resumed at once
            if stored is not None:
                _release(rec, stored)
            raise
    released = stored is not None and _release(rec, stored)
    error = EndNotRecorded(rec.run.id, refused, released)
    log.error("%s", error)
    raise error from refused


def _release(rec: Recorder, stored: Run) -> bool:
    """Give up the lease of a run still RUNNING under this driver's fence: its row as
    stored, without a lease, so nothing it did not commit is written."""
    if stored.status != RunStatus.RUNNING or stored.fence != rec.run.fence:
        return False
    run = stored.evolve(lease_owner=None, lease_expires_at=None, updated_at=rec.now())
    try:
        rec.store.commit(Batch(run_id=run.id, fence=run.fence, run=run, durable=True))
    except Exception:
        log.exception("run %s: could not release its lease either", run.id)
        return False
    rec.committed = run
    return True
