"""What the pages and the JSON API read and do, in one place.

Reads are plain functions of a Runtime that touch only its store: ``complete`` runs
the Runtime's read coroutines (which never wait on anything) to the end in whatever
thread calls it, so handlers run them in worker threads and concurrent requests do
not queue behind each other. Actions that drive a run (fork, replay, resume, cancel)
start it on the server's event loop (``background.py``) and return as soon as the run
exists; the page follows it live.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any, TypeVar

from runtime import Runtime
from runtime.core.errors import InvalidRequest, NotFound
from runtime.core.jsonvalues import JSON
from runtime.core.records import (
    Checkpoint,
    CheckpointSummary,
    Interrupt,
    InterruptStatus,
    NodeAttempt,
    PendingWrite,
    Run,
    RunKind,
    TraceEvent,
)
from runtime.core.states import NodeStatus, RunStatus
from runtime.core.trace import states_after
from runtime.graph.instances import base_node, parse_instance
from runtime.engine.compensation import left_to_undo
from runtime.history.events import with_writes
from runtime.history.lineage import compensated, uncalled_mocks, unused_mocks
from runtime.history.state import state_json
from runtime.store.base import MAX_SEQ
from runtime.travel.diff import Change, diff
from runtime.travel.views import CheckpointView

from server.inputs import InputError, parse_json
from server.present import uncalled_mock_lines

from .journal import EffectRow as EffectRow, as_of, journal_rows as journal_rows
from .render import as_json

T = TypeVar("T")

PER_PAGE = 50
EVENTS_PER_PAGE = 100
#: trace events a search reads from the store at once
SEARCH_CHUNK = 1000
#: rows of a lazily loaded panel (attempts, nodes) per page
ROWS_PER_PAGE = 200
#: instances of a node shown at once in the node drawer (a map's items, a loop's iterations)
INSTANCES_PER_PAGE = 50
#: checkpoints shown around the selected one on the timeline
TIMELINE_WINDOW = 60
#: trace events read past a running run's head checkpoint for what started since (its nodes' starts
#: come first; recorded progress events after them need not all be read)
LIVE_EVENTS = 2000
#: the largest integer a store holds: a page number beyond it names nothing (and a
#: sequence number beyond ``MAX_SEQ`` none either)
MAX_INT = 2**63 - 1


class Conflict(InvalidRequest):
    """The request is well formed but the run is not in a state that allows it (HTTP 409)."""


def complete(coro: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that never suspends (the Runtime's store reads)."""
    try:
        coro.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coro.close()
    raise RuntimeError("a read suspended; it must run on the event loop")


async def in_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return await asyncio.to_thread(fn, *args, **kwargs)


# ------------------------------------------------------------------ runs list

@dataclass(frozen=True, slots=True)
class RunsPage:
    runs: Sequence[Run]
    page: int
    has_next: bool
    filters: Mapping[str, str]


def runs_page(rt: Runtime, *, status: str | None = None, graph: str | None = None, kind: str | None = None,
              q: str | None = None, page: int = 1, per_page: int = PER_PAGE) -> RunsPage:
    if status and status not in set(RunStatus):
        raise InvalidRequest(f"unknown status {status!r}; one of: {', '.join(RunStatus)}")
    if kind and kind not in set(RunKind):
        raise InvalidRequest(f"unknown kind {kind!r}; one of: {', '.join(RunKind)}")
    page = max(1, min(page, MAX_INT // per_page))
    # an id pasted with the spaces around it still finds its run
    graph, q = (graph or "").strip() or None, (q or "").strip() or None
    rows = rt.store.list_runs(RunStatus(status) if status else None, None, per_page + 1,
                              graph_name=graph or None, kind=RunKind(kind) if kind else None,
                              search=q or None, offset=(page - 1) * per_page)
    filters = {k: v for k, v in (("status", status), ("graph", graph), ("kind", kind), ("q", q)) if v}
    return RunsPage(rows[:per_page], page, len(rows) > per_page, filters)


# ------------------------------------------------------------------ one run

@dataclass(frozen=True, slots=True)
class RunPage:
    run: Run
    description: Mapping[str, Any]
    checkpoints: Sequence[CheckpointSummary]   # the timeline window
    total_checkpoints: int
    selected: CheckpointView
    previous: Checkpoint | None
    changes: Sequence[Change]
    node: str | None
    node_absent: bool   # ``node`` is an instance created after the selected checkpoint
    node_states: Mapping[str, NodeStatus]
    interrupts: Sequence[Interrupt]
    children: Sequence[Run]
    orphaned: bool
    unused_mocks: Sequence[str] = ()   # the branch's ``mocks`` no effect called
    #: paused on an unrecorded effect: each mock no effect has called yet, and what it likely meant
    mock_hints: Sequence[str] = ()
    #: an ended run whose effects were undone (or may have been): it is forked, never continued
    compensated: bool = False
    #: an ended run with live effects of its own line that an undo is registered for and not done
    undoable: bool = False
    #: when a compensation of the run was left to a worker that none has taken up yet
    compensation_asked: float | None = None
    #: when the selected checkpoint was taken, if it is a past one: what the store recorded
    #: later is shown as later (None at the latest checkpoint, which shows the run as it is)
    as_of: float | None = None


def graph_description(rt: Runtime, run: Run) -> Mapping[str, Any]:
    desc = rt.store.graph_description(run.graph_version)
    if desc is None:
        try:
            desc = rt.graphs.graph_for(run).describe()
        except Exception:   # the graph's code is not importable here: draw nothing
            desc = {"name": run.graph_name, "version": run.graph_version, "nodes": []}
    return desc


def selected_checkpoint(rt: Runtime, run_id: str, seq: int | None) -> Checkpoint:
    cp = rt.store.find_checkpoint(run_id, seq) if seq is None or seq <= MAX_SEQ else None
    if cp is None or (seq is not None and cp.seq != seq):
        raise NotFound(f"run {run_id} has no checkpoint #{seq}")
    return cp


def run_page(rt: Runtime, run_id: str, *, cp: int | None = None, node: str | None = None) -> RunPage:
    """What the run page shows at one checkpoint. Reads stay proportional to what is
    shown: a window of the timeline, one checkpoint's states, its writes and diff."""
    run = complete(rt.get_run(run_id))
    chosen = selected_checkpoint(rt, run_id, cp)
    view = complete(rt.checkpoint(chosen))
    previous = rt.store.find_checkpoint(run_id, chosen.seq - 1) if chosen.seq > 0 else None
    changes = diff(state_json(rt.store, rt.graphs, previous), view.state) if previous is not None else []
    last = max(run.head_seq, chosen.seq)
    lo = max(0, min(chosen.seq - TIMELINE_WINDOW // 2, last + 1 - TIMELINE_WINDOW))
    window = rt.store.checkpoint_summaries(run_id, lo, lo + TIMELINE_WINDOW - 1)
    states = chosen.node_states
    if run.status == RunStatus.RUNNING and chosen.seq >= run.head_seq:
        # the head of a run going on: a checkpoint is taken when a node settles, so the nodes
        # that started since are in its trace only (shown pending, a running node would mislead)
        since = rt.store.events(run_id, after_seq=chosen.event_seq, limit=LIVE_EVENTS)
        states = states_after(states, since, chosen.event_seq)
    absent = node is not None and not _has_node(states, node)
    if absent:
        # an instance a later iteration or item creates: the drawer stays open on it while stepping
        head = rt.store.find_checkpoint(run_id) if chosen.seq < run.head_seq else None
        if head is None or not _has_node(head.node_states, node or ""):
            raise NotFound(f"run {run_id} has no node {node!r} at checkpoint #{chosen.seq}")
    asked = complete(rt.interrupts(run_id, pending=False))
    pending = [i for i in asked if i.status == InterruptStatus.PENDING]
    return RunPage(
        run=run, description=graph_description(rt, run), checkpoints=window, total_checkpoints=last + 1,
        selected=view, previous=previous, changes=changes, node=node, node_absent=absent, node_states=states,
        interrupts=asked, children=rt.store.child_runs(run_id),
        orphaned=rt.orphaned(run), unused_mocks=unused_mocks(rt.store, run),
        mock_hints=uncalled_mock_lines(uncalled_mocks(rt.store, run), pending) if pending else (),
        compensated=run.status in (RunStatus.FAILED, RunStatus.CANCELLED) and compensated(rt.store, run),
        undoable=(run.status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)
                  and not run.effects_elsewhere and bool(left_to_undo(rt.store, run))),
        compensation_asked=next((a.at for a in rt.store.compensation_asks(run_id, limit=1)), None),
        as_of=as_of(run, chosen))


def _has_node(states: Mapping[str, NodeStatus], node: str) -> bool:
    """A graph node with any instance in ``states``, or an instance in them."""
    return node in states or (node == base_node(node) and any(base_node(n) == node for n in states))


def events_window(rt: Runtime, run_id: str, page: int, query: str = "",
                  per_page: int = EVENTS_PER_PAGE) -> tuple[list[TraceEvent], bool]:
    """One page of the run's trace (searchable by type, node or data), never all of it."""
    page = max(1, min(page, MAX_INT // per_page))
    if not query:   # sequence numbers are gapless from 1: a page is a range of them
        if (page - 1) * per_page >= MAX_SEQ:   # past any seq a store keeps
            return [], False
        found = rt.store.events(run_id, (page - 1) * per_page, per_page + 1)
        return with_writes(rt.store, run_id, found[:per_page]), len(found) > per_page
    q, skip, after = query.lower(), (page - 1) * per_page, 0
    shown: list[TraceEvent] = []
    # read a chunk at a time and stop once the page and one match more are found: memory
    # stays a chunk and a page, and an early page does not read the rest of the trace
    while True:
        read = rt.store.events(run_id, after, SEARCH_CHUNK)
        # the data as the trace shows it (JSON, a node's writes in it), so text copied from the page is found
        for e in with_writes(rt.store, run_id, read):
            if q in e.type.lower() or q in (e.node or "").lower() or q in as_json(e.data).lower():
                if skip:
                    skip -= 1
                elif len(shown) == per_page:
                    return shown, True
                else:
                    shown.append(e)
        if len(read) < SEARCH_CHUNK:
            return shown, False
        after = read[-1].seq


def node_instances(rt: Runtime, page: RunPage, node: str, number: int = 1, per_page: int = INSTANCES_PER_PAGE,
                   status: NodeStatus | None = None, skip: Set[str] = frozenset()) -> tuple[list[dict[str, Any]], bool]:
    """One page of the instances of a graph node at the selected checkpoint (or the one
    instance asked for, ``model#12``, ``work[250]``), only those in ``status`` when given and
    not in ``skip``, in canonical order, with the attempts, writes and effects each had by
    then; and whether a later page has more."""
    base = base_node(node)
    one = node if node != base else None
    mine = sorted((n for n in page.node_states if (n == one if one else base_node(n) == base and n not in skip)
                   and (status is None or page.node_states[n] == status)), key=instance_order)
    start = (max(1, number) - 1) * per_page
    shown = mine[start:start + per_page]
    # grouped by instance once: a map of thousands of items is not scanned once per item
    wanted = set(shown)
    until = page.selected.checkpoint.created_at
    attempts: dict[str, list[NodeAttempt]] = {}
    for a in rt.store.node_attempts(page.run.id):
        if a.node in wanted and a.started_at <= until:
            attempts.setdefault(a.node, []).append(a)
    effects: dict[str, list[EffectRow]] = {}
    # labelled as they stood at the checkpoint (one still going is not in doubt), without those begun after it
    for e in journal_rows([e for e in rt.store.journal([page.run.id]) if e.node in wanted], page.run,
                          page.as_of, page.interrupts):
        if not e.after:
            effects.setdefault(e.node, []).append(e)
    writes: dict[str, list[PendingWrite]] = {}
    for w in rt.store.pending_writes(page.run.id, nodes=sorted(wanted)):   # by the (run, node) index
        if w.checkpoint_seq < page.selected.checkpoint.seq + 1:
            writes.setdefault(w.node, []).append(w)
    # ``until``: what ended or was written after the checkpoint is said to be later, not shown as its
    out = [{"name": inst, "status": page.node_states[inst].value, "attempts": attempts.get(inst, []),
            "effects": effects.get(inst, []), "writes": writes.get(inst, []), "until": until} for inst in shown]
    return out, len(mine) > start + per_page


def instance_order(name: str) -> tuple[tuple[int, ...], int, int]:
    """Iteration (of the loops around an inner loop first), then item (a map's group record
    first): the order instances fold in."""
    _, it, item, outer = parse_instance(name)
    return outer, it, -1 if item is None else item


def node_source(rt: Runtime, run: Run, node: str) -> str:
    """The node function's source, when its code is importable here."""
    import inspect

    try:
        spec = rt.graphs.graph_for(run).nodes[base_node(node)]
        return inspect.getsource(spec.fn)
    except Exception:
        return ""


# ------------------------------------------------------------------ actions

def require_status(run: Run, allowed: Sequence[RunStatus], action: str) -> None:
    if run.status not in allowed:
        raise Conflict(f"cannot {action} run {run.id}: it is {run.status.value}")


def parse_json_field(text: str, what: str) -> JSON:
    """JSON typed into a form, read as the JSON API reads a body (depth, NaN, huge numbers)."""
    if not text.strip():
        return None
    try:
        return parse_json(text, what, lines=True)
    except InputError as e:
        raise InvalidRequest(str(e)) from None


def parse_json_object(text: str, what: str, shape: str) -> dict[str, JSON] | None:
    """An optional JSON object typed into a form: None when the box is left empty; anything
    but an object (a typed ``null`` too, which is not the same as leaving it empty) is refused."""
    if not text.strip():
        return None
    value = parse_json_field(text, what)
    if not isinstance(value, dict):
        got = "null" if value is None else type(value).__name__
        raise InvalidRequest(f"{what} must be a JSON object of {shape}, got {got}")
    return value
