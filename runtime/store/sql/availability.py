"""Which errors of a SQL store mean "the database cannot be reached now", as opposed to a
refusal of what was asked (a constraint, a bad query, a missing database).

The store raises its driver's errors as they come (SQLAlchemy's wrappers on reads, the
driver's own on the write connection, ``EndNotRecorded`` around them when a run's end
could not be recorded); a long-lived caller such as a worker asks :func:`unavailable`
to tell an outage it should wait out from a failure it should report:

- PostgreSQL: an error the driver raised on its side (no SQLSTATE: the connection was
  refused, timed out or dropped; not a connection the server refused for good, its database
  or role missing or its password wrong), SQLSTATE class 08 (connection exception), 57P01-57P03
  (the server shutting down, or starting and not yet taking connections) and 53300 (no
  connection slot left);
- SQLite: the file busy or locked past the busy timeout, an I/O error, the disk full, or
  the file that cannot be opened (its folder gone or unmounted);
- and any error SQLAlchemy marks as having invalidated its connection.
"""

from __future__ import annotations

import sqlite3

from sqlalchemy.exc import DBAPIError

__all__ = ["outage_cause", "unavailable"]

_PG_STATES = {"57P01", "57P02", "57P03", "53300"}
#: what the server says, at connect time (the driver gives such errors no SQLSTATE), when it
#: refuses the connection for good: no such database or role, a wrong password, no hba entry
_PG_REFUSALS = ("does not exist", "password authentication failed", "no pg_hba.conf entry",
                "authentication failed", "permission denied")
#: SQLITE_BUSY, SQLITE_LOCKED, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN (primary codes)
_SQLITE_CODES = {5, 6, 10, 13, 14}

try:
    import psycopg
    _PG_ERRORS: tuple[type[BaseException], ...] = (psycopg.OperationalError, psycopg.InterfaceError)
except ModuleNotFoundError:   # SQLite only: no PostgreSQL error can occur
    _PG_ERRORS = ()


def unavailable(error: BaseException) -> bool:
    """Whether ``error``, or an error it was raised from, says the database is unreachable."""
    return outage_cause(error) is not None


def outage_cause(error: BaseException) -> BaseException | None:
    """The error in ``error``'s chain (itself, then what it was raised from) that says the
    database is unreachable; None if none does."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _says_unavailable(current):
            return current
        current = current.__cause__ or current.__context__
    return None


def _says_unavailable(error: BaseException) -> bool:
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return True
    if _PG_ERRORS and isinstance(error, _PG_ERRORS):
        state = getattr(error, "sqlstate", None)
        if state is None:
            return not any(refusal in str(error) for refusal in _PG_REFUSALS)
        return state.startswith("08") or state in _PG_STATES
    if isinstance(error, sqlite3.OperationalError):
        # the extended code's low byte is the primary one (SQLITE_IOERR_SHORT_READ is an IOERR)
        return (getattr(error, "sqlite_errorcode", 0) & 0xFF) in _SQLITE_CODES
    return False
