"""The pure kernel imports no SQL, HTTP, event loop or wall clock."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
PURE = ["states.py", "scheduler.py", "reducers.py", "graph.py", "validate.py", "trace.py", "records.py",
        "errors.py", "diff.py", "report.py"]
FORBIDDEN = {"sqlalchemy", "sqlmodel", "sqlite3", "psycopg", "http", "httpx", "litestar", "time",
             "datetime", "socket", "threading"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("module", PURE)
def test_pure_module_has_no_io_imports(module: str):
    assert imported_modules(RUNTIME / module) & FORBIDDEN == set()


def test_only_the_store_package_imports_sql():
    for path in RUNTIME.rglob("*.py"):
        if "store" in path.parts:
            continue
        assert imported_modules(path) & {"sqlalchemy", "sqlmodel"} == set(), path
