"""A graph whose nodes write values with no space to break at (for ``test_layout``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from runtime import Graph


class Joined(BaseModel):
    parts: list[str] = []
    summary: str = ""


graph = Graph("long_values", Joined)


@graph.node()
def collect(s: Joined) -> dict[str, Any]:
    return {"parts": [f"IT{i}" for i in range(60)]}


@graph.node(after=["collect"])
def join(s: Joined) -> dict[str, Any]:
    return {"summary": ",".join(s.parts) * 3}
