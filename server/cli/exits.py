"""What ``harness`` exits with, and how a user mistake is reported.

Like a test runner: 0 when the command did what was asked (a run succeeded or
paused for an answer, a replay matches its recording, a compensation completed),
1 when it ran but the outcome is a failure (a run failed, a replay differs, a
compensation is incomplete), 2 for a user mistake — an unknown run, an invalid
graph, bad JSON, a wrong option — reported as one line on stderr, never a
traceback.
"""

from __future__ import annotations

import sys

from sqlalchemy.exc import SQLAlchemyError

from runtime import GraphError, GraphNotRegistered, HarnessError, Run, RunStatus
from runtime.store.sql.urls import without_passwords
from server.inputs import InputError

__all__ = ["FAILED", "INTERRUPTED", "MISTAKE", "OK", "UsageError", "for_outcome", "for_run", "mistake", "report"]

OK, FAILED, MISTAKE = 0, 1, 2
INTERRUPTED = 130   # Ctrl-C, as shells report it


class UsageError(InputError):
    """The command line itself is wrong (an unknown option, a bad number)."""


def for_run(run: Run) -> int:
    """0 when the run succeeded or waits for an answer, else 1."""
    return OK if run.status in (RunStatus.SUCCEEDED, RunStatus.INTERRUPTED) else FAILED


def for_outcome(ok: bool) -> int:
    """0 when the check passed (a replay matches, a compensation completed), else 1."""
    return OK if ok else FAILED


def mistake(error: BaseException, db_url: str) -> str | None:
    """The one-line message for an error that is the user's to fix, or None when
    ``error`` is a bug (let it show its traceback). The database URL's password is
    never in it."""
    message = _mistake(error, db_url)
    return None if message is None else without_passwords(message, db_url)


def _mistake(error: BaseException, db_url: str) -> str | None:
    if isinstance(error, GraphError):
        return "invalid graph: " + "; ".join(map(str, error.problems))
    if isinstance(error, GraphNotRegistered):   # the runtime's advice is for Python callers
        return f"{error.missing}; give its code with --graph MODULE:GRAPH"
    if isinstance(error, (HarnessError, InputError)):
        return str(error)
    if isinstance(error, SQLAlchemyError):
        cause = getattr(error, "orig", None) or error
        return f"database error ({db_url}): {(str(cause).splitlines() or [''])[0]}"
    return None


def report(message: str) -> int:
    """Print ``message`` as one line on stderr; the exit code of a user mistake."""
    print("harness: " + " ".join(message.splitlines()), file=sys.stderr)
    return MISTAKE
