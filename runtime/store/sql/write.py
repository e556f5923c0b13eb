"""The write path of SqlStore: one DBAPI connection, fixed SQL, ``executemany``.

Writes are the hot path (every run step commits a batch), so they skip the
SQLAlchemy execution layer and send statements built once from the table
definitions in ``schema.py``; reads keep using SQLAlchemy Core.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pydantic_core import to_json
from sqlalchemy import JSON, Engine, Table


def dumps(value: Any) -> str | None:
    return None if value is None else to_json(value).decode()


class Statements:
    """INSERT statements for a table, in the driver's parameter style."""

    def __init__(self, table: Table, dialect: str):
        cols = [c for c in table.columns if not (c.primary_key and c.name == "pk")]  # pk: assigned by the database
        self.columns = [c.name for c in cols]
        self.json = [isinstance(c.type, JSON) for c in cols]
        mark = "?" if dialect == "sqlite" else "%s"
        values = ", ".join(f"CAST({mark} AS JSONB)" if j and dialect == "postgresql" else mark
                           for j in self.json)
        self.insert = f"INSERT INTO {table.name} ({', '.join(self.columns)}) VALUES ({values})"

    def row(self, values: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(dumps(values.get(c)) if j else values.get(c) for c, j in zip(self.columns, self.json))


class Writer:
    def __init__(self, engine: Engine, tables: Sequence[Table]):
        self.dialect = engine.dialect.name
        self.mark = "?" if self.dialect == "sqlite" else "%s"
        self._conn: Any = engine.raw_connection()
        self.stmts = {t.name: Statements(t, self.dialect) for t in tables}

    def sql(self, text: str) -> str:
        """Write statements with ``?``; this gives them the driver's parameter style."""
        return text if self.mark == "?" else text.replace("?", self.mark)

    @contextmanager
    def transaction(self, durable: bool) -> Iterator[Any]:
        conn = self._conn
        sqlite = self.dialect == "sqlite"
        if sqlite and durable:
            conn.execute("PRAGMA synchronous=FULL")  # force this commit to disk (output-commit rule)
        cur = conn.cursor()
        try:
            if sqlite:
                cur.execute("BEGIN IMMEDIATE")  # take the write lock now, not on first write
            yield cur
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            cur.close()
            if sqlite and durable:
                conn.execute("PRAGMA synchronous=NORMAL")

    def insert(self, cur: Any, table: str, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            st = self.stmts[table]
            cur.executemany(st.insert, [st.row(r) for r in rows])

    def insert_tuples(self, cur: Any, table: str, columns: tuple[str, ...], rows: Sequence[tuple[Any, ...]]) -> None:
        """Hot-path insert of rows already in column order (JSON columns as text)."""
        if rows:
            st = self.stmts[table]
            if tuple(st.columns) != columns:
                raise AssertionError(f"{table}: columns {st.columns} != {columns}")
            cur.executemany(st.insert, rows)

    def insert_returning_pk(self, cur: Any, table: str, values: dict[str, Any]) -> int:
        st = self.stmts[table]
        cur.execute(st.insert + " RETURNING pk", st.row(values))
        return int(cur.fetchone()[0])

    def close(self) -> None:
        self._conn.close()
