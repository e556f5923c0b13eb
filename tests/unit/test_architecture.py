"""The architecture holds: layers point down, nothing imports in a circle, the pure
kernel does no I/O, and no module grows into a god module."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("runtime", "server")

#: runtime's layers, lowest first: a module may import only its own layer and those below
LAYERS = {"core": 0, "graph": 1, "store": 2, "history": 3, "engine": 4, "travel": 5}
FACADE = 6   # runtime/runtime.py, runtime/__init__.py and the old import paths
#: the kernel's deterministic parts: no SQL, HTTP, threads or wall clock
PURE = ["core/states.py", "core/records.py", "core/frozen.py", "core/errors.py", "core/trace.py", "core/jsonvalues.py",
        "graph/spec.py", "graph/builder.py", "graph/validate.py", "graph/reducers.py", "graph/loops.py", "graph/exits.py",
        "graph/instances.py", "engine/instances.py", "engine/instance_growth.py", "engine/placement.py", "engine/scheduler.py", "engine/decisions.py", "engine/folding.py",
        "engine/lookahead.py",
        "travel/diff.py", "travel/report.py"]
FORBIDDEN = {"sqlalchemy", "sqlmodel", "sqlite3", "psycopg", "http", "httpx", "litestar", "time",
             "datetime", "socket", "threading", "os"}
MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imports_of(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every project module ``name`` imports, anywhere in the file (also inside
    functions and ``TYPE_CHECKING`` blocks: a deferred import is still a dependency)."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from pkg import submodule` depends on the submodule itself
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                yield t


def import_graph() -> dict[str, set[str]]:
    known = all_modules()
    return {name: set(imports_of(name, path, known)) for name, path in known.items()}


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "runtime":
        return None
    if len(parts) > 1 and parts[1] in LAYERS:
        return LAYERS[parts[1]]
    return FACADE


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of module imports, or None (package ``__init__`` re-exports count too)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for dep in sorted(graph.get(m, ())):
            # a package importing its own submodules to re-export them is not a circle
            if m.startswith(dep + ".") or (dep.startswith(m + ".") and all_modules()[m].name == "__init__.py"):
                continue
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_no_import_cycle_anywhere():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " → ".join(cycle or [])


def test_the_cycle_check_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_layers_only_import_downwards():
    upward = []
    for module, deps in import_graph().items():
        mine = layer_of(module)
        if mine is None:
            continue
        for dep in deps:
            theirs = layer_of(dep)
            if theirs is None:
                upward.append(f"{module} imports {dep} (outside the runtime)")
            elif theirs > mine:
                upward.append(f"{module} (layer {mine}) imports {dep} (layer {theirs})")
    assert upward == []


def test_nothing_in_the_runtime_imports_the_facade():
    users = [m for m, deps in import_graph().items()
             if "runtime.runtime" in deps and m != "runtime"]
    assert users == []


def test_no_module_reads_another_modules_private_members():
    """`obj._name` across modules is how layers leak; only `self._x` and `cls._x` are fine."""
    leaks = []
    for name, path in all_modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                leaks.append(f"{name}:{node.lineno} .{node.attr}")
            if isinstance(node, ast.ImportFrom):
                leaks += [f"{name}:{node.lineno} imports {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert leaks == []


@pytest.mark.parametrize("module", PURE)
def test_pure_module_has_no_io_imports(module: str):
    path = ROOT / "runtime" / module
    top = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            top.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            top.add(node.module.split(".")[0])
    assert top & FORBIDDEN == set()


def test_only_the_store_package_imports_sql():
    for name, path in all_modules().items():
        if not name.startswith("runtime") or name.startswith("runtime.store"):
            continue
        text = path.read_text()
        assert "import sqlalchemy" not in text and "from sqlalchemy" not in text, name
        assert "import sqlmodel" not in text and "from sqlmodel" not in text, name


def test_no_module_is_a_god_module():
    big = {name: n for name, path in all_modules().items()
           if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert big == {}
