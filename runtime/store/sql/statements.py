"""The INSERT statements of the write side (``write.Writer``) and the values they take.

JSON columns take text (``dumps``; ``pg_dumps`` on PostgreSQL, whose text cannot hold
U+0000); on SQLite the hot path binds plain values only (``NO_TEXT``) and inserts a
batch's rows a chunk at a time (``Statements.insert_rows``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import chain
from typing import Any

from pydantic_core import to_json
from sqlalchemy import JSON, Dialect, Table

from . import nul


def dumps(value: Any) -> str | None:
    """The text stored in a JSON column (None stays SQL NULL)."""
    return None if value is None else to_json(value).decode()


def pg_dumps(value: Any) -> str | None:
    """``dumps`` for PostgreSQL, whose text cannot hold U+0000 (see ``nul``)."""
    return None if value is None else nul.escape_json(to_json(value).decode())


def pg_text(value: str | None) -> str | None:
    """A free-text column's value for PostgreSQL, which cannot hold U+0000 (see ``nul``)."""
    return None if value is None else nul.escape(value)


def same(value: str | None) -> str | None:
    return value


class Statements:
    """The INSERT statement of a table, in the driver's parameter style."""

    def __init__(self, table: Table, dialect: Dialect, dumps: Callable[[Any], str | None], *,
                 stand_ins: bool = False):  # stand_ins: SQLite's nullable columns take ``NO_TEXT``/``NO_INT``
        self.dumps = dumps
        cols = [c for c in table.columns if not (c.primary_key and c.name == "pk")]  # pk: assigned by the database
        self.columns = tuple(c.name for c in cols)
        #: the column names as the dialect needs them written (PostgreSQL reserves ``full``)
        self.quoted = ", ".join(dialect.identifier_preparer.quote(c) for c in self.columns)
        self.json = [isinstance(c.type, JSON) for c in cols]
        if dialect.name == "sqlite":
            values = ", ".join(f"NULLIF(?, {_NO_INT_SQL if c.type.python_type is int else _NO_TEXT_SQL})"
                               if stand_ins and c.nullable else "?" for c in cols)
        else:
            values = ", ".join("CAST(%s AS JSON)" if j else "%s" for j in self.json)
        self.insert = f"INSERT INTO {table.name} ({self.quoted}) VALUES ({values})"
        #: on SQLite, the INSERT of k rows at once for each k of ``CHUNKS``; None elsewhere
        self.inserts = ({k: self.insert + f", ({values})" * (k - 1) for k in CHUNKS}
                        if dialect.name == "sqlite" else None)

    def insert_rows(self, cur: Any, rows: list[tuple[Any, ...]]) -> None:
        """Insert ``rows``, in order. On SQLite a multi-row INSERT per chunk: ``executemany``
        steps the statement once per row, and each step costs about a fifth of the row."""
        if self.inserts is None:
            cur.executemany(self.insert, rows)
            return
        i, n = 0, len(rows)
        for k in CHUNKS:
            while n - i >= k:
                cur.execute(self.inserts[k], rows[i] if k == 1 else list(chain.from_iterable(rows[i:i + k])))
                i += k

    def row(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        dumps = self.dumps
        return tuple(dumps(values.get(c)) if j else values.get(c) for c, j in zip(self.columns, self.json))


#: What the hot path binds on SQLite for None (``NULLIF`` in the statement makes it NULL):
#: an integer in a text or JSON column, '' in an integer one, values they never hold. The
#: driver looks up an adapter for any value not exactly an int, float or str (None, bool,
#: StrEnum), which costs more than the rest of its insert: so enum members go as ``str()``
#: and booleans as 0/1 (what the driver would store for them).
NO_TEXT, NO_INT = 0, ""
_NO_TEXT_SQL, _NO_INT_SQL = "0", "''"

#: rows per INSERT on SQLite, largest first: a few statements per table, which stay in the driver's cache;
#: no more than 16, which costs about what 64 does per row once prepared, and a fifth to prepare
CHUNKS = (16, 4, 1)
