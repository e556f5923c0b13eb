"""What a worker does with a compensation another process left to it
(``compensate(queue=True)``, a ``harness serve --workers`` debugger): it runs the undo
functions, which it can import where that process could not.

An ask is forgotten once a worker has made the compensation, whatever each undo came to
(the journal keeps that; one that failed or is in doubt waits for a person to ask again).
An undo function this worker cannot import, or an error of the runtime's, leaves the ask
for another worker; this one does not try it again.
"""

from __future__ import annotations

import argparse
import json
import sys

from runtime import HarnessError, InvalidRequest, LeaseLost, Runtime
from runtime.core.records import CompensationAsk
from runtime.engine.compensation import CompensationBusy, StepStatus
from runtime.store.sql.availability import unavailable
from server.present import compensation_lines

from .worker_outcome import Outcome


def key(ask: CompensationAsk) -> str:
    """The ask among the runs a worker drives (never a run id: those have no space)."""
    return f"compensate {ask.run_id}"


async def undo(rt: Runtime, ask: CompensationAsk, args: argparse.Namespace) -> Outcome:
    """Make the compensation asked; the store's errors (it went away) go to the caller."""
    try:
        report = await rt.compensate_asked(ask)
    except (CompensationBusy, LeaseLost):   # another caller compensates the run now
        return Outcome.TAKEN
    except InvalidRequest as e:   # it may no longer be compensated (continued since, say)
        print(f"harness: worker: run {ask.run_id}: its compensation is not made: "
              f"{' '.join(str(e).splitlines())}", file=sys.stderr, flush=True)
        rt.store.drop_compensation_ask(ask.run_id, ask.at)
        return Outcome.DONE
    except HarnessError as e:
        if unavailable(e):
            raise
        # kept for another worker, never tried here again: this one would fail it the same way
        print(f"harness: worker: run {ask.run_id}: its compensation is left as it is: "
              f"{' '.join(str(e).splitlines())}", file=sys.stderr, flush=True)
        return Outcome.REFUSED
    if report is None:   # another worker made it first
        return Outcome.DONE
    if any(s.status == StepStatus.NOT_RUNNABLE for s in report.steps):
        print(f"harness: worker: run {ask.run_id}: its compensation is left to a worker that can import its "
              f"undo functions: {'; '.join(s.error or '' for s in report.not_done)}", file=sys.stderr, flush=True)
        return Outcome.REFUSED
    if args.json:
        print(json.dumps(report.to_json()), flush=True)
    else:
        print("\n".join([f"compensated {ask.run_id}:", *compensation_lines(report)]), flush=True)
    return Outcome.DONE
