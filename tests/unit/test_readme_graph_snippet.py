"""The README's first example runs as written: a new user pastes it into a file and runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readmes_graph_example_runs_as_written(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## A graph"):]
    snippet = section.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "refund.py").write_text(snippet, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "refund.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "succeeded"
    assert (tmp_path / "harness.db").exists()
