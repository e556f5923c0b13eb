"""``harness worker``: drive the runs other processes queued (``Runtime.submit``) and
recover the runs whose process died, until stopped — or, with ``--once``, until none
is left to take.

Claiming is the runtime's: ``resume`` takes a run's lease with its fencing token, so
when several workers reach for one run, one drives it and the others move on.

Stopping a worker (SIGTERM, as a deploy does, or Ctrl-C) must not end the runs it drives:
they are durable, not its own. It takes no more runs and lets those it drives go on to
their end or pause. A second signal stops it at once, recording nothing more: as after a
crash, another worker recovers those runs once their leases expire.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from runtime import HarnessError, LeaseLost, Run, Runtime, RunStatus
from server.present import plain, run_line

from . import exits
from .common import add_command, opened, positive_seconds

#: the most queued runs one look at the store considers
BATCH = 1000


def due(rt: Runtime, seen: list[Run]) -> list[Run]:
    """The runs a worker may take now: queued ones oldest first, then orphaned ones."""
    queued = [r for r in reversed(seen) if r.status == RunStatus.QUEUED]
    return queued + [r for r in seen if r.status == RunStatus.RUNNING and rt.orphaned(r)]


async def drive(rt: Runtime, run: Run, args: argparse.Namespace) -> bool:
    """Claim (or recover) the run and drive it until it ends or pauses; False when it
    was left to someone else: taken by another worker, or refused here (said on stderr)."""
    try:
        done = await rt.resume(run.id)
    except LeaseLost:
        return True   # another worker is taking it, or took it while this one tried: that one drives it
    except HarnessError as e:
        now = await rt.get_run(run.id)
        if now.status != run.status or now.fence != run.fence:
            return True   # another worker took it first: that one drives it
        print(f"harness: worker: run {run.id} left as it is: {' '.join(str(e).splitlines())}",
              file=sys.stderr, flush=True)
        return False
    print(json.dumps(plain(done), default=str) if args.json else run_line(done), flush=True)
    return True


async def cmd_worker(args: argparse.Namespace) -> int:
    with opened(args, *args.graphs) as rt:
        # at most max_concurrency runs claimed at once: a run claimed here but waiting
        # for a slot would hold its lease while another worker could drive it
        limit = rt.max_concurrency
        driving: dict[str, asyncio.Task[bool]] = {}
        refused: set[str] = set()   # tried once, never again: the error would only repeat
        stopping = asyncio.Event()
        with StopSignals(lambda sig: _stop(stopping, len(driving), sig)):
            while True:
                if not stopping.is_set():
                    seen = (await rt.runs(status=RunStatus.QUEUED, limit=BATCH)
                            + await rt.runs(status=RunStatus.RUNNING, limit=BATCH))
                    for run in due(rt, seen):
                        if len(driving) >= limit:
                            break
                        if run.id not in driving and run.id not in refused:
                            driving[run.id] = asyncio.create_task(drive(rt, run, args))
                if not driving:
                    if args.once or stopping.is_set():
                        return exits.FAILED if refused else exits.OK
                    await _sleep_unless(stopping, args.poll)
                    continue
                finished, _ = await asyncio.wait(driving.values(), timeout=args.poll,
                                                 return_when=asyncio.FIRST_COMPLETED)
                for run_id, task in list(driving.items()):
                    if task in finished:
                        del driving[run_id]
                        if not task.result():
                            refused.add(run_id)


def _stop(stopping: asyncio.Event, driven: int, sig: signal.Signals) -> None:
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
    print(f"harness: worker: taking no more runs; waiting for the {driven} it drives to end or pause "
          "(signal again to stop at once)", file=sys.stderr, flush=True)


async def _sleep_unless(stopping: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stopping.wait(), seconds)
    except TimeoutError:
        pass


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
    w = add_command(sub, "worker", "drive queued runs and recover runs whose process died",
                    description="Claims queued runs (oldest first) and runs whose process is gone, and drives "
                                "each until it ends or pauses, at most 8 at a time; prints each as it stops. "
                                "Several workers may share one database: each run is driven by one of them. "
                                "SIGTERM or Ctrl-C stops it taking runs and waits for those it drives to end or "
                                "pause; a second one stops it at once (another worker recovers those runs once "
                                "their leases expire).")
    w.add_argument("graphs", nargs="*", metavar="MODULE:GRAPH",
                   help="graphs whose runs it drives (a run's graph is otherwise imported from where it was "
                        "started)")
    w.add_argument("--poll", type=positive_seconds, default=0.5,
                   help="seconds between looks for new runs (default: 0.5)")
    w.add_argument("--once", action="store_true",
                   help="exit once no run is left to take (1 if one was left as it is)")
    w.set_defaults(fn=cmd_worker)
