"""HTML pages: the runs list and the run page (graph, checkpoints, panels).

Each handler reads through ``services`` in a worker thread, then renders the page,
or only the block an htmx request targets (``HX-Target``: ``main``, ``runs``, …).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from litestar import Request, Response, get
from litestar.params import Parameter
from litestar.response import Redirect

from runtime import Runtime
from runtime.core.records import RunKind
from runtime.core.states import RunStatus
from runtime.graph.instances import base_node

from . import dag, services
from .render import render

LEGEND = ("pending", "running", "retrying", "interrupted", "succeeded", "failed", "skipped", "cancelled")


def runtime_of(request: Request[Any, Any, Any]) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


@get("/", include_in_schema=False)
async def home() -> Redirect:
    return Redirect("/runs")


@get("/runs", include_in_schema=False)
async def runs_list(request: Request[Any, Any, Any], status: str | None = None, graph: str | None = None,
                    kind: str | None = None, q: str | None = None, page: int = 1) -> Response[str]:
    data = await services.in_thread(services.runs_page, runtime_of(request), status=status, graph=graph,
                                    kind=kind, q=q, page=page)

    def page_url(n: int) -> str:
        return "/runs?" + urlencode({**data.filters, "page": n})

    return render(request, "runs.html", {"p": data, "statuses": list(RunStatus), "kinds": list(RunKind),
                                         "page_url": page_url}, block="table")


def _run_context(rt: Runtime, p: services.RunPage) -> dict[str, Any]:
    lay = dag.layout(p.run.graph_version, p.description)
    svg = lay.svg.replace("__RUN__", p.run.id)
    summary = dag.node_summary(p.node_states)
    multi = {n for n in summary if any(base_node(i) == n and i != n for i in p.node_states)}
    base = f"/runs/{p.run.id}"
    sel = p.selected.checkpoint.seq

    def cp_url(seq: int) -> str:
        return f"{base}?cp={seq}"

    def node_url(name: str) -> str:
        return f"{base}?{urlencode({'cp': sel, 'node': name})}"

    def events_url(n: int) -> str:
        query = {"cp": sel, "events": n, **({"eq": p.event_query} if p.event_query else {})}
        return f"{base}?{urlencode(query)}"

    return {
        "p": p, "svg": svg, "css": dag.status_css(lay, p.node_states, p.node), "legend": LEGEND,
        "summary": summary, "multi": multi, "cp_url": cp_url, "node_url": node_url, "events_url": events_url,
        "journal": services.journal_rows(p.journal, p.run),
        "instances": services.node_instances(p, p.node) if p.node else [],
        "source": services.node_source(rt, p.run, p.node) if p.node else "",
        "live": p.run.status in (RunStatus.RUNNING, RunStatus.QUEUED),
    }


@get("/runs/{run_id:str}", include_in_schema=False)
async def run_page(request: Request[Any, Any, Any], run_id: str, cp: int | None = None,
                   node: str | None = None, events: int = 1,
                   eq: str = Parameter(default="", max_length=200)) -> Response[str]:
    rt = runtime_of(request)

    def load() -> dict[str, Any]:
        p = services.run_page(rt, run_id, cp=cp, node=node, events_page=events, event_query=eq)
        return _run_context(rt, p)

    context = await services.in_thread(load)
    target = request.headers.get("hx-target") or "main"
    return render(request, "run.html", context, block=BLOCKS.get(target, "main"))


#: which block of the run page an htmx request gets, by the element it swaps
BLOCKS = {"main": "main", "events": "events", "events-body": "events"}


HANDLERS = [home, runs_list, run_page]
