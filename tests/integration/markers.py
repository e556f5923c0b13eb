"""Marker files by which a crash worker tells its test where it is (a helper module, not a test module)."""

from __future__ import annotations

from pathlib import Path


def write_marker(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` in one step: the test polls for the file and reads it at once,
    so a plain write could be seen created but still empty."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
