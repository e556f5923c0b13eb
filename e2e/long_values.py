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
async def join(s: Joined, ctx: Any) -> dict[str, Any]:
    summary = ",".join(s.parts) * 3
    # an effect whose name, request, result and key have no space to break at either
    await ctx.effect("notify.send_the_summary_to_every_subscriber_of_the_list",
                     lambda info: {"receipt": info.key * 3}, request={"summary": summary})
    return {"summary": summary}
