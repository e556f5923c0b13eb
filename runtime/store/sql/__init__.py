"""``SqlStore``: SQLite (embedded default) and PostgreSQL through SQLModel/SQLAlchemy.

``schema`` holds the tables, ``migrations`` the ordered upgrades applied on
opening, ``write`` the connection that commits batches, ``read`` the queries
that give records back, and ``store`` the ``SqlStore`` composing them.
"""

from .store import SqlStore

__all__ = ["SqlStore"]
