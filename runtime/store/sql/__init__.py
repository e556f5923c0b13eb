"""``SqlStore``: SQLite (embedded default) and PostgreSQL through SQLModel/SQLAlchemy."""

from .store import SqlStore

__all__ = ["SqlStore"]
