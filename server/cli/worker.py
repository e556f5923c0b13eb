"""``harness worker``: drive the runs other processes queued (``Runtime.submit``) and
recover the runs whose process died, until stopped — or, with ``--once``, until none
is left to take. Compensations other processes left to workers (``compensate(queue=True)``,
``worker_undo``) are made too, before queued runs.

Claiming is the runtime's: ``resume`` takes a run's lease with its fencing token, so
when several workers reach for one run, one drives it and the others move on. A worker
that loses a run's lease while driving it (it was frozen, or cut off from the database,
past its lease, and another worker recovered the run) says so and leaves the run to
that one.

Stopping a worker (SIGTERM, as a deploy does, or Ctrl-C) must not end the runs it drives:
they are durable, not its own. It takes no more runs and lets those it drives go on to
their end or pause. A second signal stops it at once, recording nothing more: as after a
crash, another worker recovers those runs once their leases expire.

A database that cannot be reached for a while (a restart, a failover, a network cut)
does not stop it either: it says so once, looks again at growing intervals (up to
``MAX_BACKOFF`` seconds), and says so again when the database is back. A run it was
driving when the database went away is recovered once its lease expires, as after a
crash; a queued run it could not claim is still queued.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Collection
from typing import Any

from runtime import EndNotRecorded, HarnessError, LeaseLost, Run, Runtime, RunStatus
from runtime.core.left import ANY, QUEUED
from runtime.core.records import CompensationAsk
from runtime.store.sql.availability import outage_cause, unavailable
from runtime.store.sql.urls import without_passwords
from server.present import plain, run_line

from . import exits
from .common import add_command, db_url, opened, positive_int, positive_seconds
from .worker_outcome import Outcome
from .worker_undo import key, undo

#: the most runs of one status one look at the store considers
BATCH = 1000
#: the longest wait between two looks at a database that cannot be reached (or the poll, if longer)
MAX_BACKOFF = 5.0
#: the shortest time between two looks the store's notifications ask for (runs queued in a burst)
TOLD_GAP = 0.05


def lease_seconds(text: str) -> float:
    """A lease's length: at least a second (it is renewed once half of it has passed, checked
    at least every heartbeat, and each renewal is a write)."""
    value = positive_seconds(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 second, got {text[:40]!r}")
    return value


def due(rt: Runtime, skip: Collection[str] = ()) -> list[Run]:
    """The runs a worker may take now: queued ones oldest first, whatever the backlog, then
    orphaned ones (oldest first too); none of ``skip`` (runs it refused, or leaves to another
    process), which are read past, so that they never hide the runs behind them.

    Orphans are those whose lease expired, found by the store among any number of running
    runs, and among the oldest running ones also those whose process is gone from this
    host (seen before their lease expires)."""
    limit = BATCH + len(skip)
    queued = rt.store.list_runs(RunStatus.QUEUED, limit=limit, oldest_first=True)
    running = rt.store.list_runs(RunStatus.RUNNING, limit=limit, oldest_first=True)
    expired = rt.store.list_runs(RunStatus.RUNNING, limit=limit, oldest_first=True, lease_expired_by=rt.env.now())
    # oldest first still: an expired run missing from ``running`` is newer than all of it
    orphans = {r.id: r for r in (*running, *expired) if r.id not in skip and rt.orphaned(r)}
    return [r for r in queued if r.id not in skip] + list(orphans.values())


class Outage:
    """Whether the database could be reached at the worker's last look; each change is said
    once on stderr. While it cannot be reached, the worker looks again after a backoff that
    doubles with each look in vain, counted in time: runs that fail meanwhile do not make it
    look sooner, nor later."""

    def __init__(self, poll: float, url: str):
        self.poll, self.url = poll, url
        self.cap = max(MAX_BACKOFF, poll)
        self.since: float | None = None
        self.backoff = poll
        self.next_look = 0.0

    @property
    def down(self) -> bool:
        return self.since is not None

    def lost(self, error: BaseException, looking: bool = False) -> None:
        """The database could not be reached: by a look for runs (``looking``) or by a run."""
        now = time.monotonic()
        if self.since is None:
            self.since, self.backoff, self.next_look = now, self.poll, now + self.poll
            cause_error = outage_cause(error) or error
            cause = " ".join(str(getattr(cause_error, "orig", None) or cause_error).split())
            print(f"harness: worker: the database is unreachable ({without_passwords(cause, self.url)[:300]}); "
                  f"retrying until it is back", file=sys.stderr, flush=True)
        elif looking:
            self.backoff = min(self.backoff * 2, self.cap)
            self.next_look = now + self.backoff

    def back(self) -> None:
        if self.since is not None:
            print(f"harness: worker: the database is reachable again after {time.monotonic() - self.since:.1f} s; "
                  f"going on", file=sys.stderr, flush=True)
            self.since = None

    def wait(self) -> float:
        """Seconds until the next look: the poll, or while the database is down, what is
        left of the backoff (0: look now)."""
        return self.poll if self.since is None else max(0.0, self.next_look - time.monotonic())

    def may_look(self) -> bool:
        return self.since is None or time.monotonic() >= self.next_look


async def drive(rt: Runtime, run: Run, args: argparse.Namespace, outage: Outage) -> Outcome:
    """Claim (or recover) the run and drive it until it ends or pauses; not DONE when it
    cannot be driven here (said on stderr) or the database went away."""
    try:
        try:
            done = await rt.resume(run.id)
        except LeaseLost:
            now = rt.store.get_run(run.id)
            # its fence moved on twice since it was listed: taken here, then by another worker
            if now.fence > run.fence + 1:
                print(f"harness: worker: run {run.id}: lost its lease to {now.lease_owner or 'another worker'} "
                      f"while driving it (this worker was held up past its lease); that worker drives it now",
                      file=sys.stderr, flush=True)
            # otherwise another worker took it first: that one drives it, or is still taking it
            # (its claim not yet recorded): not tried again at once, which would spin
            return Outcome.TAKEN if now.status == run.status else Outcome.DONE
        except HarnessError as e:
            if isinstance(e, EndNotRecorded) and unavailable(e):
                raise
            now = rt.store.get_run(run.id)
            if now.status != run.status or now.fence != run.fence:
                return Outcome.DONE   # another worker took it first: that one drives it
            print(f"harness: worker: run {run.id} left as it is: {' '.join(str(e).splitlines())}",
                  file=sys.stderr, flush=True)
            return Outcome.REFUSED
    except Exception as e:
        if not unavailable(e):
            raise
        outage.lost(e)
        return Outcome.UNAVAILABLE
    print(json.dumps(plain(done), default=str) if args.json else run_line(done), flush=True)
    return Outcome.DONE


async def cmd_worker(args: argparse.Namespace) -> int:
    driving: dict[str, asyncio.Task[Outcome]] = {}
    stopping = asyncio.Event()
    outage = Outage(args.poll, db_url(args))
    with StopSignals(lambda sig: _stop(stopping, driving, sig)), contextlib.ExitStack() as stack:
        rt = await _open_once_reachable(args, outage, stopping, stack)
        if rt is None:
            return exits.OK   # stopped before the database could be reached: nothing was taken
        told = listen(rt, stack)
        # at most max_concurrency runs claimed at once: a run claimed here but waiting
        # for a slot would hold its lease while another worker could drive it
        limit = rt.max_concurrency
        refused: set[str] = set()   # tried once, never again: the error would only repeat
        later: dict[str, float] = {}   # being taken by another process: not before then
        looked_at = 0.0
        while True:
            if told.is_set():   # told of new work: a burst of it is looked at together
                await asyncio.sleep(max(0.0, looked_at + TOLD_GAP - time.monotonic()))
            # while the database is down, only once the backoff has passed
            if not stopping.is_set() and outage.may_look():
                told.clear()   # what is told from now on is looked at next
                looked_at = time.monotonic()
                try:
                    later = {r: t for r, t in later.items() if t > looked_at}
                    # compensations other processes left to workers first: a backlog of runs
                    # would otherwise keep them waiting (they are short, and nothing else undoes)
                    for ask in rt.store.compensation_asks(limit=BATCH + len(refused)):
                        if len(driving) >= limit:
                            break
                        if (k := key(ask)) not in driving and k not in refused and k not in later:
                            driving[k] = asyncio.create_task(_undo(rt, ask, args, outage))
                    for run in due(rt, refused | later.keys()):
                        if len(driving) >= limit:
                            break
                        if run.id not in driving and run.id not in refused and run.id not in later:
                            driving[run.id] = asyncio.create_task(drive(rt, run, args, outage))
                    outage.back()
                except Exception as e:
                    if not unavailable(e):
                        raise
                    outage.lost(e, looking=True)
            # new work is heard only while the worker may look for it and take some: else it would
            # wake for nothing (what it was told stays told: looked at once a run it drives ends)
            heed = told if not stopping.is_set() and not outage.down and len(driving) < limit else None
            if not driving:
                # --once: only once a look found nothing left, not while the database is away
                if (args.once and not outage.down) or stopping.is_set():
                    return exits.FAILED if refused else exits.OK
                await _sleep_unless(stopping, outage.wait(), heed)
                continue
            hearing = [asyncio.create_task(heed.wait())] if heed is not None else []
            finished, _ = await asyncio.wait([*driving.values(), *hearing], timeout=outage.wait(),
                                             return_when=asyncio.FIRST_COMPLETED)
            for h in hearing:
                h.cancel()
            for run_id, task in list(driving.items()):
                if task in finished:
                    del driving[run_id]
                    if task.result() == Outcome.REFUSED:
                        refused.add(run_id)
                    elif task.result() == Outcome.TAKEN:
                        later[run_id] = time.monotonic() + args.poll


async def _undo(rt: Runtime, ask: CompensationAsk, args: argparse.Namespace, outage: Outage) -> Outcome:
    """A compensation left to workers, made here; its outcome as a run's would be."""
    try:
        return await undo(rt, ask, args)
    except Exception as e:
        if not unavailable(e):
            raise
        outage.lost(e)
        return Outcome.UNAVAILABLE


async def _open_once_reachable(args: argparse.Namespace, outage: Outage, stopping: asyncio.Event,
                               stack: contextlib.ExitStack) -> Runtime | None:
    """The runtime over the worker's database, opened once it can be reached: a worker may
    start while its database server restarts (or before it has started), and waits for it as
    it would for an outage later on. A refusal (no such database or role, a wrong password)
    is raised, and so is a SQLite file that cannot be opened. None if the worker was stopped
    first."""
    while not stopping.is_set():
        try:
            rt = stack.enter_context(opened(args, *args.graphs, max_concurrency=args.max_concurrency,
                                            lease_ttl=args.lease_ttl))
        except Exception as e:
            # a SQLite file that cannot be opened is a wrong path far more often than an outage
            if not unavailable(e) or db_url(args).startswith("sqlite"):
                raise
            outage.lost(e, looking=True)
            await _sleep_unless(stopping, outage.wait())
            continue
        outage.back()
        return rt
    return None


def _stop(stopping: asyncio.Event, driving: Collection[str], sig: signal.Signals) -> None:
    """A stop signal: the first lets the runs driven here go on to their end; a second
    leaves them at once, their leases to expire, as a crash would."""
    if stopping.is_set():
        print("harness: worker: stopped at once; the runs it drove are recovered once their leases "
              "expire", file=sys.stderr, flush=True)
        sys.stdout.flush()
        # dies of the signal itself, as without a handler: no cleanup, whose cancel of the
        # runs in flight would end them
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    stopping.set()
    print(f"harness: worker: taking no more runs; {_left(driving)}", file=sys.stderr, flush=True)


def _left(driving: Collection[str]) -> str:
    """What a stopping worker waits for, by the keys of what it drives: runs, and the
    compensations it makes (their keys hold a space, ``worker_undo.key``)."""
    undos = sum(" " in k for k in driving)
    runs = len(driving) - undos
    if not driving:
        return "it drives none, so it exits now"
    waits = [f"the {f'{runs} runs' if runs > 1 else 'run'} it drives to end or pause"] if runs else []
    waits += [f"the {f'{undos} compensations' if undos > 1 else 'compensation'} it makes to end"] if undos else []
    return f"waiting for {' and for '.join(waits)} (signal again to stop at once)"


async def _sleep_unless(stopping: asyncio.Event, seconds: float, told: asyncio.Event | None = None) -> None:
    """Sleep ``seconds``, or until stopped (or told of new work)."""
    waits = [asyncio.create_task(e.wait()) for e in (stopping, told) if e is not None]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def listen(rt: Runtime, stack: contextlib.ExitStack) -> asyncio.Event:
    """Set when the store tells of a run queued or a compensation asked (PostgreSQL's can):
    the worker looks at once rather than at its next poll. Never set by a store that cannot."""
    told, aio = asyncio.Event(), asyncio.get_running_loop()
    subscribe = getattr(rt.store, "subscribe", None)

    def heard(kind: str, run_id: str) -> None:
        if kind in (QUEUED, ANY):
            try:
                aio.call_soon_threadsafe(told.set)
            except RuntimeError:
                pass   # the worker has stopped: nothing to tell
    if subscribe is not None:
        stack.callback(subscribe(heard))
    return told


class StopSignals:
    """SIGINT and SIGTERM call ``handler(signal)`` while inside (only where signals can be handled:
    the main thread of a loop that takes them; elsewhere they do what they did)."""

    def __init__(self, handler: Callable[[signal.Signals], None]):
        self._handler = handler
        self._installed: list[signal.Signals] = []

    def __enter__(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._handler, sig)
            except (RuntimeError, ValueError, NotImplementedError):
                return
            self._installed.append(sig)

    def __exit__(self, *_: object) -> None:
        loop = asyncio.get_running_loop()
        for sig in self._installed:
            loop.remove_signal_handler(sig)


def register(sub: Any) -> None:
    """Add this command to the ``harness`` parser."""
    w = add_command(sub, "worker", "drive queued runs, recover runs whose process died, make asked compensations",
                    description="Claims queued runs (oldest first) and runs whose process is gone, and drives "
                                "each until it ends or pauses, at most --max-concurrency at a time; prints each as "
                                "it stops. Several workers may share one database: each run is driven by one of "
                                "them. It also makes the compensations left to workers (harness compensate --queue), "
                                "before any queued run. A run whose worker died is taken over by another about --lease-ttl plus "
                                "--poll seconds later (at the next poll on the same host, where a dead process is "
                                "seen at once). While the database cannot be reached it says so and keeps trying. "
                                "SIGTERM or Ctrl-C stops it taking runs and waits for those it drives to end or "
                                "pause; a second one stops it at once (another worker recovers those runs once "
                                "their leases expire).")
    w.add_argument("graphs", nargs="*", metavar="MODULE:GRAPH",
                   help="graphs whose runs it drives (a run's graph is otherwise imported from where it was "
                        "started)")
    w.add_argument("--poll", type=positive_seconds, default=0.5,
                   help="seconds between looks for new runs and compensations (default: 0.5)")
    w.add_argument("--max-concurrency", type=positive_int, default=8,
                   help="node attempts in flight at once across its runs, and the most runs it claims at once "
                        "(default: 8)")
    w.add_argument("--lease-ttl", type=lease_seconds, default=None,
                   help="seconds a run's lease lasts unless renewed (it is renewed once half of it has passed, "
                        "while the worker is alive): how long a run whose worker was cut off waits before another takes it "
                        "over (default: 30)")
    w.add_argument("--once", action="store_true",
                   help="exit once no run is left to take (1 if one was left as it is)")
    w.set_defaults(fn=cmd_worker)
