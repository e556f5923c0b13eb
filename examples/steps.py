"""Node functions that examples/pipeline.json names (a plan is data: it refers to code by name)."""

from __future__ import annotations

from typing import Any


def fetch(state: Any, source: str, count: int = 1) -> dict:
    return {"items": [f"{source}-{i}" for i in range(count)]}


def classify(state: Any) -> dict:
    return {"labels": {item: ("urgent" if item.endswith("0") else "normal") for item in state.items}}


async def summarize(state: Any) -> dict:
    return {"summary": f"{len(state.items)} items"}


def report(state: Any) -> dict:
    urgent = sorted(k for k, v in state.labels.items() if v == "urgent")
    return {"report": f"{state.summary}; urgent: {', '.join(urgent) or 'none'}"}
