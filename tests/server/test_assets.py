"""The vendored browser libraries are the pinned, unmodified files (their checksums),
each with its licence, and the pages load exactly those."""

from __future__ import annotations

import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT / "static" / "vendor"


def test_vendored_files_match_their_pinned_checksums() -> None:
    lines = (VENDOR / "SHA256SUMS").read_text().splitlines()
    pinned = {name: digest for digest, name in (line.split() for line in lines if line.strip())}
    assert set(pinned) == {"htmx-2.0.11.min.js", "htmx-ext-sse-2.2.4.min.js"}
    for name, digest in pinned.items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name
    assert (VENDOR / "LICENSE-htmx").read_text().startswith("Zero-Clause BSD")
    assert "BSD Zero Clause" in (VENDOR / "LICENSE-htmx-ext-sse").read_text()


def test_the_base_page_loads_the_pinned_files() -> None:
    base = (ROOT / "templates" / "base.html").read_text()
    for name in ("htmx-2.0.11.min.js", "htmx-ext-sse-2.2.4.min.js"):
        assert f'src="/static/vendor/{name}"' in base
