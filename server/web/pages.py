"""HTML pages: the runs list and the run page (graph, checkpoints, panels).

Each handler reads through ``services`` in a worker thread, then renders the page,
or only the block an htmx request targets (``HX-Target``: ``main``, ``runs``, …).
"""

from __future__ import annotations

from collections.abc import Set
from typing import Annotated, Any
from urllib.parse import urlencode

from litestar import Request, Response, get
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.response import Redirect

from runtime import NodeStatus, Runtime
from runtime.core.errors import InvalidRequest, NotFound
from runtime.core.records import RunKind
from runtime.core.states import RunStatus
from runtime.graph.instances import base_node, parse_instance
from runtime.history.events import with_writes
from runtime.store.base import MAX_SEQ

from . import dag, journal, services, timeline, waterfall
from .live import MOVED_EVERY
from .render import is_htmx, reading_order, render

LEGEND = ("pending", "running", "retrying", "interrupted", "succeeded", "failed", "skipped", "cancelled")


def runtime_of(request: Request[Any, Any, Any]) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


@get("/", include_in_schema=False)
async def home() -> Redirect:
    return Redirect("/runs")


@get("/runs", include_in_schema=False)
async def runs_list(request: Request[Any, Any, Any], status: FromQuery[str | None] = None, graph: FromQuery[str | None] = None,
                    kind: FromQuery[str | None] = None, q: FromQuery[str | None] = None, page: FromQuery[int] = 1) -> Response[str]:
    data = await services.in_thread(services.runs_page, runtime_of(request), status=status, graph=graph,
                                    kind=kind, q=q, page=page)

    def page_url(n: int) -> str:
        return "/runs?" + urlencode({**data.filters, "page": n})

    # a filter swaps the form with the table; paging and the refresh, the table only
    block = "listing" if request.headers.get("hx-target") == "runs-page" else "table"
    return render(request, "runs.html", {"p": data, "statuses": list(RunStatus), "kinds": list(RunKind),
                                         "page_url": page_url}, block=block)


#: rows of the selected checkpoint's node table shown before "… more"
NODE_ROWS = 60
#: instances named in "ready next" (a map due at the checkpoint has one per item)
READY_SHOWN = 20
#: rows of the changes since the previous checkpoint (a map's items each add one)
CHANGE_ROWS = 200


def _run_context(rt: Runtime, p: services.RunPage, page: int = 1, pinned: bool = True,
                 status: NodeStatus | None = None) -> dict[str, Any]:
    lay = dag.layout(p.run.graph_version, p.description)
    svg = lay.svg.replace("__RUN__", p.run.id)
    summary = dag.instance_summary(p.node_states)
    multi = {base_node(i) for i in p.node_states if base_node(i) != i}
    base = f"/runs/{p.run.id}"
    sel = p.selected.checkpoint.seq

    # a page that picked no checkpoint follows the head of a run going on: opening or closing
    # the node drawer there must not pin the checkpoint shown at that moment
    at = sel if pinned else None

    def cp_url(seq: int | None, keep_node: bool = True) -> str:
        # stepping keeps the node drawer open on the node (or instance) it shows, and its filter
        query = {**({"cp": seq} if seq is not None else {}), **({"node": p.node} if p.node and keep_node else {}),
                 **({"status": status.value} if p.node and keep_node and status else {})}
        return f"{base}?{urlencode(query)}" if query else base

    def node_url(name: FromPath[str], page: int = 1, only: NodeStatus | None = None) -> str:
        query = {**({"cp": at} if at is not None else {}), "node": name,
                 **({"status": only.value} if only else {}), **({"page": page} if page > 1 else {})}
        return f"{base}?{urlencode(query)}"

    def panel_url(name: FromPath[str], **more: Any) -> str:
        # a page following the head has its panels follow it too (their pages as well)
        query = urlencode({**({"cp": at} if at is not None else {}), **more})
        return f"{base}/panels/{name}" + (f"?{query}" if query else "")

    # a loop drawn once: how many iterations each member has run; a map: its items by status
    loops = p.description.get("loops")
    loop_members = {str(m) for ms in loops.values() for m in ms} if isinstance(loops, dict) else set()
    counted: dict[tuple[str, str], dict[str, int]] = {}
    for inst, st in p.node_states.items():
        name = parse_instance(inst)
        what = "item" if name.item is not None else "iteration" if name.node in loop_members else None
        if what is not None:
            counts = counted.setdefault((name.node, what), {})
            counts[st.value] = counts.get(st.value, 0) + 1
    # one line per node (a map inside a loop counts both); a loop none of whose iterations
    # has begun has run no iteration yet: nothing to count
    repeated: dict[str, list[tuple[str, dict[str, int]]]] = {}
    for (node, what), counts in counted.items():
        if what == "item" or set(counts) != {NodeStatus.PENDING.value}:
            repeated.setdefault(node, []).append((what, counts))
    group: list[tuple[str, str]] = []
    if p.node is not None:   # a folded fan-out: its members, each with its status here
        gid = lay.ids.get(base_node(p.node), "")
        full = dag.node_summary(p.node_states)
        group = [(m, dag.headline(full.get(m, {}))) for m in lay.groups.get(gid, ())]
    page = max(1, min(page, services.MAX_INT // services.INSTANCES_PER_PAGE))
    live = p.run.status in (RunStatus.RUNNING, RunStatus.QUEUED)
    # a paused run's page asks now and then whether it moved on (answered or cancelled elsewhere)
    waiting = p.run.status == RunStatus.INTERRUPTED
    # a map's drawer lists and counts its items; its group record is the map itself, said apart
    maps = dag.map_nodes(p.description)
    records = dag.map_records(p.node_states, maps) if p.node else frozenset()
    is_map = p.node is not None and p.node in maps
    skip = records if is_map else frozenset()
    instances, more = services.node_instances(rt, p, p.node, page, status=status, skip=skip) if p.node else ([], False)
    return {
        "p": p, "svg": svg, "css": dag.status_css(lay, p.node_states, p.node), "legend": LEGEND, "group": group,
        "repeated": repeated,
        "summary": dict(list(summary.items())[:NODE_ROWS]), "more_nodes": max(0, len(summary) - NODE_ROWS),
        "ready": (p.selected.ready or [])[:READY_SHOWN], "more_ready": max(0, len(p.selected.ready or []) - READY_SHOWN),
        "ready_unknown": p.selected.ready is None,
        # a checkpoint that folded no node says what changed at it instead (failed, skipped, asked)
        "happened": timeline.happened(rt, p.run.id, p.checkpoints),
        "changes": reading_order(p.changes)[:CHANGE_ROWS], "more_changes": max(0, len(p.changes) - CHANGE_ROWS),
        "multi": multi, "cp_url": cp_url, "node_url": node_url, "panel_url": panel_url, "at": at,
        "instances": instances, "instance_page": page, "more_instances": more,
        "instance_status": status, "instance_counts": _instance_counts(p, status, skip),
        "records": records, "is_map": is_map,
        "map_itself": sorted(((r, p.node_states[r].value) for r in records if base_node(r) == p.node),
                             key=lambda rs: services.instance_order(rs[0])) if is_map else [],
        "source": services.node_source(rt, p.run, p.node) if p.node else "",
        "live": live, "waiting": waiting, "moved_every": MOVED_EVERY,
        "panel_keys": _panel_keys(rt, p, at) if live else {},
        # a run's updated_at moves with its status only: while it goes on, its time so far runs to now
        "took": max(0.0, (rt.clock.time() if live else p.run.updated_at) - p.run.created_at),
    }


def _panel_keys(rt: Runtime, p: services.RunPage, at: int | None) -> dict[str, str]:
    """What a running run's journal and attempts panels show, as a key each: the page keeps
    an opened one through its refreshes (hx-preserve, by an id holding the key) until what
    it shows could have changed. Their rows only grow; their labels depend on the run's
    status, and at a past checkpoint on its time."""
    where = "head" if at is None else f"cp{at}" + ("-past" if p.as_of is not None else "")
    now = f"{where}-{p.run.status.value}"
    journal = len(rt.store.journal([p.run.id]))
    return {"journal": f"{now}-{journal}-{len(p.interrupts)}",
            "attempts": f"{now}-{len(rt.store.node_attempts(p.run.id))}"}


def _instance_counts(p: services.RunPage, status: NodeStatus | None, skip: Set[str] = frozenset()
                     ) -> dict[NodeStatus, int]:
    """How many of the drawer node's instances (not in ``skip``: a map's own records) are in
    each status (the filter's choices, the chosen one even when none is); empty for a node
    with one instance."""
    if p.node is None or base_node(p.node) != p.node:
        return {}
    counts = {st: 0 for st in NodeStatus}
    for inst, st in p.node_states.items():
        if base_node(inst) == p.node and inst not in skip:
            counts[st] += 1
    if sum(counts.values()) < 2:
        return {}
    return {st: n for st, n in counts.items() if n or st == status}


@get("/runs/{run_id:str}", include_in_schema=False)
async def run_page(request: Request[Any, Any, Any], run_id: FromPath[str], cp: FromQuery[int | None] = None,
                   node: FromQuery[str | None] = None, page: FromQuery[int] = 1,
                   status: FromQuery[str | None] = None) -> Response[str]:
    """The run at a checkpoint; ``node`` opens its drawer, ``status`` shows only its instances in it."""
    rt = runtime_of(request)
    if status and status not in set(NodeStatus):
        raise InvalidRequest(f"unknown status {status!r}; one of: {', '.join(NodeStatus)}")
    only = NodeStatus(status) if status else None

    def load() -> dict[str, Any]:
        return _run_context(rt, services.run_page(rt, run_id, cp=cp, node=node), page, pinned=cp is not None,
                            status=only)

    context = await services.in_thread(load)
    # a swap of #main also brings the action bar (out of band): its fork link follows the selected
    # checkpoint, and what it offers follows the run's status
    context["fragment"] = is_htmx(request)
    return render(request, "run.html", context, block="main")


PANELS = ("journal", "attempts", "events", "nodes")


@get("/runs/{run_id:str}/panels/{name:str}", include_in_schema=False)
async def run_panel(request: Request[Any, Any, Any], run_id: FromPath[str], name: FromPath[str], cp: FromQuery[int | None] = None,
                    page: FromQuery[int] = 1, eq: Annotated[str, QueryParameter(max_length=200)] = "") -> Response[str]:
    """One panel of the run page, loaded when it is opened (big runs never ship whole)."""
    if name not in PANELS:
        raise NotFound(f"no panel {name!r}; panels are: {', '.join(PANELS)}")
    rt = runtime_of(request)

    def load() -> dict[str, Any]:
        run = services.complete(rt.get_run(run_id))
        chosen = services.selected_checkpoint(rt, run_id, cp)
        # at a past checkpoint, what came after it is marked as such (never left out: pages stay the same)
        until = journal.as_of(run, chosen)
        ctx: dict[str, Any] = {"run": run, "name": name, "cp": chosen, "page": max(1, page), "eq": eq,
                               "until": until}
        base = f"/runs/{run_id}/panels/{name}"
        # the journal and attempts of a page following the head are kept through its refreshes:
        # asked at no checkpoint, their pages follow the head too (app.js asks the trace at the one shown)
        at = {} if cp is None and name in ("journal", "attempts") else {"cp": chosen.seq}
        ctx["page_url"] = lambda n: f"{base}?{urlencode({**at, 'page': n, **({'eq': eq} if eq else {})})}"
        if name == "journal":
            rows = journal.journal_rows(rt.store.journal([run_id]), run, until, rt.store.interrupts(run_id))
            start = (ctx["page"] - 1) * services.ROWS_PER_PAGE
            ctx["rows"] = rows[start:start + services.ROWS_PER_PAGE]
            ctx["has_next"] = len(rows) > start + services.ROWS_PER_PAGE
        elif name == "attempts":
            attempts = rt.store.node_attempts(run_id)
            start = (ctx["page"] - 1) * services.ROWS_PER_PAGE
            ctx["rows"] = attempts[start:start + services.ROWS_PER_PAGE]
            ctx["axis"] = waterfall.axis(attempts, run)
            ctx["bars"] = waterfall.bars(attempts, run, ctx["axis"])[start:start + services.ROWS_PER_PAGE]
            ctx["mark"] = waterfall.mark(ctx["axis"], until)
            ctx["has_next"] = len(attempts) > start + services.ROWS_PER_PAGE
        elif name == "events":
            ctx["rows"], ctx["has_next"] = services.events_window(rt, run_id, ctx["page"], eq)
        else:
            summary = list(dag.instance_summary(chosen.node_states).items())
            start = (ctx["page"] - 1) * services.ROWS_PER_PAGE
            ctx["rows"] = summary[start:start + services.ROWS_PER_PAGE]
            ctx["has_next"] = len(summary) > start + services.ROWS_PER_PAGE
        return ctx

    return render(request, "panel.html", await services.in_thread(load), block="panel")


HANDLERS = [home, runs_list, run_page, run_panel]


@get("/runs/{run_id:str}/events/{seq:int}", include_in_schema=False)
async def event_page(request: Request[Any, Any, Any], run_id: FromPath[str], seq: FromPath[int]) -> Response[str]:
    """One trace event at its own URL, with the events around it."""
    rt = runtime_of(request)

    def load() -> dict[str, Any]:
        run = services.complete(rt.get_run(run_id))
        around = rt.store.events(run_id, max(0, seq - 6), 11) if seq <= MAX_SEQ else []
        event = next((e for e in around if e.seq == seq), None)
        if event is None:
            raise NotFound(f"run {run_id} has no event #{seq}")
        # the first checkpoint that reflects this event: where to look at its effect on the state
        cps = rt.store.checkpoint_summaries(run_id, 0, run.head_seq)
        reflected = next((c for c in cps if c.event_seq >= seq), None)
        event = with_writes(rt.store, run_id, [event])[0]   # a node's writes with its succeed event
        return {"run": run, "event": event, "around": around, "checkpoint": reflected}

    return render(request, "event.html", await services.in_thread(load))


HANDLERS.append(event_page)


@get("/checkpoints/{checkpoint_id:str}", include_in_schema=False)
async def checkpoint_page(request: Request[Any, Any, Any], checkpoint_id: FromPath[str]) -> Redirect:
    """A checkpoint by id (as a fork's header names its base): its run's page, at it."""
    cp = await services.in_thread(runtime_of(request).store.get_checkpoint, checkpoint_id)
    return Redirect(f"/runs/{cp.run_id}?{urlencode({'cp': cp.seq})}", status_code=303)


HANDLERS.append(checkpoint_page)
