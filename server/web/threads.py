"""The thread tree (a run with its forks and replays as branches from their base
checkpoints, each fork with the fields its patch edited; turns and continuations carry
their parent's line on at its depth) and comparing any two checkpoints of a thread."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from litestar import Request, Response, get
from litestar.params import FromPath, FromQuery

from runtime import Runtime
from runtime.core.errors import NotFound
from runtime.core.records import Checkpoint, EffectsMode, EffectStatus, Run, RunKind
from runtime.history import threads

from . import timeline
from .render import render
from .services import complete, in_thread

#: the most runs one thread page lists
THREAD_LIMIT = 2000


@dataclass(frozen=True, slots=True)
class Branch:
    run: Run
    depth: int                  # how many branches in from the thread's first run
    base_seq: int | None        # where it branched (checkpoint seq) …
    base_run: str | None        # … of which run (its parent's, as a rule)
    patched: tuple[str, ...]    # the fields a fork's patch edited
    turn: int | None = None     # a conversation's turns by number (the first run is turn 1)
    ran_live: int = 0           # a mocked branch's effects a person let run for real


def _follows(run: Run) -> bool:
    """A turn or continuation carries its parent's line on; a fork or replay branches off it."""
    return run.kind == RunKind.CONTINUATION or (run.kind == RunKind.MAIN and run.parent_run_id is not None)


def thread_tree(rt: Runtime, thread_id: FromPath[str]) -> list[Branch]:
    runs = rt.store.list_runs(None, thread_id, THREAD_LIMIT)
    if not runs:
        raise NotFound(f"no thread {thread_id!r}")
    by_id = {r.id: r for r in runs}
    children: dict[str | None, list[Run]] = {}
    for r in sorted(runs, key=lambda r: r.created_at):
        parent = r.parent_run_id if r.parent_run_id in by_id else None
        children.setdefault(parent, []).append(r)
    out: list[Branch] = []
    # a conversation's turns by the number the store gave each (as ``harness thread`` shows them):
    # the turn after a fork of turn N is N + 1, so counting runs would number a forked line wrongly
    mains = [r for r in runs if r.kind == RunKind.MAIN]
    turns = {r.id: int(r.options.get("turn") or 1) for r in mains} if len(mains) > 1 else {}
    live = _ran_live(rt, [r for r in runs if r.effects_mode == EffectsMode.MOCK])

    # a run's first follower stays at its depth, so 60 turns are one line, not a staircase;
    # its other children are branches one deeper, listed right under it before the line goes on
    todo: list[tuple[Run, int]] = [(r, 0) for r in reversed(children.get(None, []))]
    while todo:   # not recursive: a thread's line can be longer than Python's recursion limit
        r, depth = todo.pop()
        base_seq = base_run = None
        if r.base_checkpoint_id:
            try:
                base = rt.store.get_checkpoint(r.base_checkpoint_id)
                base_seq, base_run = base.seq, base.run_id
            except NotFound:
                pass
        out.append(Branch(r, depth, base_seq, base_run, _patched_fields(rt, r), turns.get(r.id), live.get(r.id, 0)))
        kids = children.get(r.id, [])
        line = next((k for k in kids if _follows(k)), None)
        if line is not None:
            todo.append((line, depth))
        todo.extend((k, depth + 1) for k in reversed(kids) if k is not line)
    return out


def _ran_live(rt: Runtime, mocked: list[Run]) -> dict[str, int]:
    """How many effects each mocked branch called for real, by run id: those a person
    answered ``live`` for (the run page's journal says LIVE of them). A served effect is
    journaled MOCKED only; one called is journaled STARTED first."""
    called: dict[str, set[tuple[str, str, int]]] = {}
    for e in rt.store.journal([r.id for r in mocked]) if mocked else ():
        if e.status == EffectStatus.STARTED:
            called.setdefault(e.run_id, set()).add((e.node, e.name, e.occurrence))
    return {rid: len(effects) for rid, effects in called.items()}


def _patched_fields(rt: Runtime, run: Run) -> tuple[str, ...]:
    return timeline.patched_fields(rt, run.id) if run.options.get("patched") else ()


def is_lines(value: Any) -> bool:
    """A list of strings or of messages (objects with a ``content``): shown one per line."""
    return isinstance(value, list) and bool(value) and all(
        isinstance(v, str) or (isinstance(v, Mapping) and "content" in v) for v in value)


def thread_state(rt: Runtime, thread_id: str) -> tuple[Run | None, dict[str, Any]]:
    """The run the thread's next turn follows and its state now, as the JSON API gives it
    (no run and no state: the thread has none a turn would follow)."""
    head = threads.thread_head(rt.store, thread_id)
    if head is None:
        return None, {}
    state: dict[str, Any] = complete(rt.thread_state(thread_id)).model_dump(mode="json")
    return head, state


def thread_in_path(request: Request[Any, Any, Any], given: str) -> str:
    """The thread id a ``/threads/{thread_id:path}`` URL names: ids may hold '/' (slack/C1/123.4),
    and are read from the URL as sent, decoded once ('%' in an id is sent as %25)."""
    raw = request.scope.get("raw_path")
    if isinstance(raw, bytes) and b"/threads/" in raw:
        return unquote(raw.decode("ascii", "replace").split("/threads/", 1)[1])
    return given.removeprefix("/")


@get("/threads/{thread_id:path}", include_in_schema=False)
async def thread_page(request: Request[Any, Any, Any], thread_id: FromPath[str]) -> Response[str]:
    rt: Runtime = request.app.state.runtime
    thread_id = thread_in_path(request, thread_id)
    branches = await in_thread(thread_tree, rt, thread_id)
    head, state = await in_thread(thread_state, rt, thread_id)
    # the comparison starts at the thread's first checkpoint: its first run's, when it has no base
    first = None
    if branches:
        root = branches[0].run
        first = root.base_checkpoint_id or await in_thread(lambda: rt.store.checkpoints(root.id)[0].id)
    return render(request, "thread.html", {"thread_id": thread_id, "branches": branches, "first_checkpoint": first,
                                           "head": head, "state": state, "is_lines": is_lines})


#: the most runs whose checkpoints the diff page offers (the newest of the thread)
DIFF_RUNS = 50
#: rows of changes the diff page shows (the JSON API has every one)
DIFF_ROWS = 500


def _checkpoints_of_thread(rt: Runtime, thread_id: FromPath[str],
                           *compared: Checkpoint | None) -> list[tuple[Run, list[Checkpoint]]]:
    runs = rt.store.list_runs(None, thread_id, DIFF_RUNS)
    # the compared checkpoints' runs too, however old: otherwise the choices would select others
    listed = {r.id for r in runs}
    for cp in compared:
        if cp is not None and cp.run_id not in listed:
            listed.add(cp.run_id)
            runs.append(complete(rt.get_run(cp.run_id)))
    return [(r, complete(rt.history(r.id))) for r in runs]


@get("/diff", include_in_schema=False)
async def diff_page(request: Request[Any, Any, Any], a: FromQuery[str], b: FromQuery[str | None] = None) -> Response[str]:
    rt: Runtime = request.app.state.runtime

    def load() -> dict[str, Any]:
        cp_a = rt.store.get_checkpoint(a)
        run_a = complete(rt.get_run(cp_a.run_id))
        changes = complete(rt.diff(a, b)) if b else None
        cp_b = rt.store.get_checkpoint(b) if b else None
        options = _checkpoints_of_thread(rt, run_a.thread_id, cp_a, cp_b)
        # with nothing chosen yet, "To" offers the run's latest checkpoint (from its head: the one before)
        own = next((cps for r, cps in options if r.id == cp_a.run_id), [])
        later = [c for c in own if c.seq > cp_a.seq]
        suggest = later[-1].id if later else cp_a.parent_id
        # nothing compared yet: the page says so and links the suggestion (never an empty diff)
        suggested = next((c for _, cps in options for c in cps if c.id == suggest), None)
        labels = {c.id: timeline.words(rt, c) for _, cps in options for c in cps}
        return {"a": cp_a, "b": cp_b, "run_a": run_a, "options": options, "changes": changes, "rows": DIFF_ROWS,
                "suggest": suggest, "suggested": suggested, "labels": labels}

    return render(request, "diff.html", await in_thread(load))


HANDLERS = [thread_page, diff_page]
