"""Driving runs: ``run``, ``submit``, ``runs``, ``show``, ``resume``, ``cancel``, ``thread`` and ``watch``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from runtime import ExecutableGraph, InvalidAnswer, NotFound, Run, RunKind, RunStatus, Runtime, StreamEvent, resolve_ref
from runtime.engine.compensation import left_to_undo
from server.inputs import MAX_DEPTH, parse_json, parse_object
from server.present import dropped_line, event_line, load_waiting_lines, run_line

from . import exits
from .common import (
    GRAPH_HELP,
    add_command,
    add_limit_options,
    emit,
    limit_args,
    opened,
    positive_int,
    positive_seconds,
    refuse_checkpoint_id,
    show_run,
    thread_arg,
)

INPUT_MEANING = 'input must be an object of state fields, {"field": value}'
ANSWERS_MEANING = 'answers are an object of {"interrupt id": answer}'


def new_run(args: argparse.Namespace) -> tuple[ExecutableGraph, dict[str, Any]]:
    """The graph and input of a new run (``run``, ``submit``): both checked before the
    database is opened, so a mistake leaves nothing behind."""
    graph = resolve_ref(args.graph)
    data = parse_object(args.input, "--input", INPUT_MEANING) if args.input is not None else {}
    return graph, data


async def cmd_run(args: argparse.Namespace) -> int:
    graph, data = new_run(args)
    with opened(args) as rt:
        # streamed only to learn the run's id as it is created: a Ctrl-C then names the run
        # it cancelled, which otherwise had to be looked up among all the runs
        run_id: str | None = None
        stream = rt.stream(graph, data, thread_id=args.thread, **limit_args(args))
        try:
            async with stream as events:
                async for ev in events:
                    run_id = run_id or ev.run_id
        except asyncio.CancelledError:
            # a Ctrl-C before the first event was read: the run may exist all the same
            run_id = run_id or next(iter(stream.run_ids), None)
            if run_id is not None:
                print(f"harness: run {run_id} cancelled; continue it with: harness resume {run_id}",
                      file=sys.stderr, flush=True)
            raise
        assert run_id is not None   # a start that creates no run raises instead
        run = await rt.get_run(run_id)
        await show_run(rt, args, run.id)
    return exits.for_run(run)


async def cmd_submit(args: argparse.Namespace) -> int:
    graph, data = new_run(args)
    with opened(args) as rt:
        run = await rt.submit(graph, data, thread_id=args.thread, **limit_args(args))
    emit(args, run, run.id)
    return exits.OK


async def cmd_show(args: argparse.Namespace) -> int:
    with opened(args, args.graph) as rt:
        try:
            await show_run(rt, args, args.run)
        except NotFound:
            refuse_checkpoint_id(rt, args.run)
            raise
    return exits.OK


async def cmd_runs(args: argparse.Namespace) -> int:
    with opened(args) as rt:
        runs = await rt.runs(status=args.status, limit=args.limit, thread_id=args.thread)
    emit(args, runs, "\n".join(map(run_line, runs)) or "no runs")
    return exits.OK


async def cmd_resume(args: argparse.Namespace) -> int:
    # each answer may nest as deeply as a --response; the object around them adds a level
    answers = (parse_object(args.answers, "--answers", ANSWERS_MEANING, MAX_DEPTH + 1)
               if args.answers is not None else None)
    response = parse_json(args.response, "--response") if args.response is not None else None
    with opened(args, args.graph) as rt:
        refuse_checkpoint_id(rt, args.run)
        try:
            if args.response is not None:
                try:
                    run = await rt.resume(args.run, response, queue=args.queue, **limit_args(args))
                except InvalidAnswer as e:
                    if len(await rt.interrupts(args.run)) < 2:
                        raise
                    # several questions wait: say how to answer them from here, not from Python
                    raise InvalidAnswer(f"{e}; from the command line: --answers '{{\"ID\": ANSWER, ...}}'") from None
            else:
                try:
                    run = await rt.resume(args.run, answers=answers, queue=args.queue, **limit_args(args))
                except InvalidAnswer as e:
                    pending = await rt.interrupts(args.run) if answers is None else []
                    if not pending:
                        raise
                    # no answer given to a paused run: say how to give one from here
                    raise InvalidAnswer(f"{e}; answer with --answers '{{\"ID\": ANSWER, ...}}'" if len(pending) > 1 else
                                        f"{e}; answer with --response JSON (harness show {args.run} "
                                        f"shows the question)") from None
        except asyncio.CancelledError:
            # a Ctrl-C: a run driven here (or the continuation made for it) is cancelled as a
            # caller that stops waiting cancels it; one another process drives goes on there
            driven = _driven(rt, args.run)
            if rt.store.get_run(driven).status == RunStatus.CANCELLED:
                print(f"harness: run {driven} cancelled; continue it with: harness resume {driven} "
                      f"(--queue leaves it to a worker)", file=sys.stderr, flush=True)
            else:
                print(f"harness: stopped waiting; run {driven} goes on where it is driven "
                      f"(harness watch {driven} follows it)", file=sys.stderr, flush=True)
            raise
        await show_run(rt, args, run.id)
    # left to a worker: it goes on there (``harness watch RUN`` follows it)
    return exits.OK if args.queue and run.status in (RunStatus.QUEUED, RunStatus.RUNNING) else exits.for_run(run)


def _driven(rt: Runtime, run_id: str) -> str:
    """The run a ``resume`` of ``run_id`` drove: a failed or cancelled one's continuation, if it made one."""
    made = [c for c in rt.store.child_runs(run_id) if c.kind == RunKind.CONTINUATION]
    return made[-1].id if made else run_id


async def cmd_cancel(args: argparse.Namespace) -> int:
    with opened(args, args.graph) as rt:
        refuse_checkpoint_id(rt, args.run)
        run = await rt.cancel(args.run, args.reason)
        # its policy undoes its effects when cancelled: an undo this process could not run is said
        left = left_to_undo(rt.store, run) if run.status.value in (run.options.get("compensate_on") or ()) else []
    emit(args, run, run_line(run) if run.status == RunStatus.CANCELLED else f"cancel requested; {run_line(run)}")
    if left:
        print(f"compensation incomplete: {len(left)} effect(s) not undone "
              f"({', '.join(f'{e.node} {e.name} #{e.occurrence}' for e in left)}); run `harness compensate "
              f"{run.id}` where their undo functions can be imported", file=sys.stderr)
        return exits.FAILED
    return exits.OK


async def cmd_thread(args: argparse.Namespace) -> int:
    """A conversation thread: its runs, oldest first, the state its next turn starts from, and
    what its latest run waits for when it paused."""
    with opened(args, args.graph) as rt:
        runs = list(reversed(await rt.runs(thread_id=args.thread, limit=args.limit)))
        if not runs:
            raise exits.UsageError(f"no thread {args.thread!r}")
        state = (await rt.thread_state(args.thread)).model_dump(mode="json")
        # its latest run paused: what it waits for and the command that answers it, as ``show`` says
        waiting = (await load_waiting_lines(rt, runs[-1].id)
                   if runs[-1].status == RunStatus.INTERRUPTED and not args.json else [])
    text = "\n".join([*map(turn_line, runs), "state: " + json.dumps(state), *waiting])
    emit(args, {"thread_id": args.thread, "runs": runs, "state": state}, text)
    return exits.OK


def turn_line(run: Run) -> str:
    """A thread's run: a turn with its number (the first run is turn 1); a continuation,
    fork or replay says which run it came from (``run_line``)."""
    turn = f"turn {int(run.options.get('turn') or 1)}" if run.kind == RunKind.MAIN else ""
    dropped = dropped_line(run)
    return f"{turn:<10}{run_line(run)}" + (f"\n{'':<10}{dropped}" if dropped else "")


#: the type of the line ``watch --json`` prints for a run that no process drives (not a trace event)
ORPHANED = "watch.orphaned"


async def cmd_watch(args: argparse.Namespace) -> int:
    """Follow a run from the store until it ends or pauses: one line (or JSON object) per event,
    and a notice when no process drives it any more."""
    with opened(args, args.graph) as rt:
        refuse_checkpoint_id(rt, args.run)
        shown = 0
        notices = asyncio.create_task(_notice_orphaned(rt, args, lambda: shown))
        try:
            async for ev in rt.follow(args.run, poll=args.poll):
                print(json.dumps(ev.to_json()) if args.json else event_line(ev), flush=True)
                shown = ev.seq
        finally:
            notices.cancel()
            await asyncio.gather(notices, return_exceptions=True)
        run = await rt.get_run(args.run)
        # a paused run: what it waits for and the command that answers it, as ``show`` says
        # (not with --json: its lines are the run's events and nothing else)
        waiting = await load_waiting_lines(rt, run.id) if not args.json else []
    if not args.json:
        print("\n".join([run_line(run), *waiting]))
    return exits.for_run(run)


async def _notice_orphaned(rt: Runtime, args: argparse.Namespace, shown: Callable[[], int]) -> None:
    """Say once that the run is RUNNING but its process is gone (the rule ``show`` and the
    debugger use), when every event it recorded has been shown: otherwise a silent watch
    looks the same for a slow run and for one that waits forever to be recovered. Said
    again only if a process takes the run over (its fence moves on) and dies too."""
    said_for: int | None = None
    while True:
        await asyncio.sleep(args.poll)
        run = await rt.get_run(args.run)
        # caught up first: orphaned() may log each time it finds the owner's PID dead
        if run.fence != said_for and shown() >= run.event_seq and rt.orphaned(run):
            said_for = run.fence
            _print_orphaned(args, run, shown(), rt.clock.time())


def _print_orphaned(args: argparse.Namespace, run: Run, seq: int, now: float) -> None:
    owner, expires = run.lease_owner or "unknown", run.lease_expires_at
    if expires is None:
        why = "it holds no lease"
    elif expires <= now:
        why = f"its owner {owner} stopped renewing its lease, which expired at {_utc(expires)}"
    else:   # the owner ran on this host and its PID is gone
        why = f"its owner {owner} has exited (its lease would have run until {_utc(expires)})"
    resume = f"harness resume {run.id}"
    message = (f"run {run.id} is running but no process is driving it: {why}. Still watching; "
               f"continue it with: {resume}")
    if args.json:
        # shaped like the events around it; ephemeral: it is not in the run's trace
        data = {"message": message, "resume": resume, "lease_owner": run.lease_owner, "lease_expires_at": expires}
        print(json.dumps(StreamEvent(run.id, seq, ORPHANED, data=data, at=now, ephemeral=True).to_json()), flush=True)
    else:
        print("harness: " + message, file=sys.stderr, flush=True)


def _utc(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def register(sub: Any) -> None:
    """Add these commands to the ``harness`` parser."""
    for name, fn, text, description in (
            ("run", cmd_run, "run a graph until it ends or pauses", None),
            ("submit", cmd_submit, "queue a run for a worker (harness worker) to drive; prints its id",
             "Creates the run QUEUED and returns at once: a `harness worker` that can import the graph "
             "drives it (oldest queued first). With --json, prints the run.")):
        r = add_command(sub, name, text, description)
        r.add_argument("graph", help="MODULE:GRAPH or a plan .json file")
        r.add_argument("--input", help="run input as a JSON object")
        add_limit_options(r)
        r.add_argument("--thread", type=thread_arg, help="thread id: a new turn of that conversation when it has runs already")
        r.set_defaults(fn=fn)

    ls = add_command(sub, "runs", "list runs, newest first")
    ls.add_argument("--status", choices=[s.value for s in RunStatus])
    ls.add_argument("--limit", type=positive_int, default=50, help="at most this many (default: 50)")
    ls.add_argument("--thread", type=thread_arg, help="only the runs of this thread")
    ls.set_defaults(fn=cmd_runs)

    for name, fn, text in (("show", cmd_show, "a run: status, checkpoints, state, pending interrupts"),
                           ("resume", cmd_resume, "answer a paused run, continue a failed one, recover a crashed one"),
                           ("cancel", cmd_cancel, "cancel a run")):
        c = add_command(sub, name, text)
        c.add_argument("run", help="run id")
        c.add_argument("--graph", help=GRAPH_HELP)
        c.set_defaults(fn=fn)
        if name == "resume":
            # one or the other: given both, one of the answers would be dropped unsaid
            answer = c.add_mutually_exclusive_group()
            answer.add_argument("--response", help="answer to the pending interrupt (JSON)")
            answer.add_argument("--answers", help='answers by interrupt id: {"int_…": …} (JSON)')
            add_limit_options(c, "replaces the run's from now on, or those a continuation inherits")
            c.add_argument("--queue", action="store_true",
                           help="leave what goes on to a worker (harness worker) and return at once: the "
                                "answered run, or a failed run's continuation, waits QUEUED for one")
        if name == "cancel":
            c.add_argument("--reason", default="cancelled from the command line")

    t = add_command(sub, "thread", "a conversation thread: its runs, oldest first, and its state")
    t.add_argument("thread", type=thread_arg, help="thread id")
    t.add_argument("--graph", help=GRAPH_HELP)
    t.add_argument("--limit", type=positive_int, default=1000, help="at most this many runs (default: 1000)")
    t.set_defaults(fn=cmd_thread)

    w = add_command(sub, "watch", "follow a run's events as they are recorded, until it ends or pauses "
                                    "(and say so if no process drives it any more)")
    w.add_argument("run", help="run id")
    w.add_argument("--graph", help=GRAPH_HELP)
    w.add_argument("--poll", type=positive_seconds, default=0.2, help="seconds between reads (default: 0.2)")
    w.set_defaults(fn=cmd_watch)
