"""Stepping back through runs: ``history``, ``diff``, ``fork``, ``replay`` and ``compensate``."""

from __future__ import annotations

import argparse
from typing import Any

from runtime import NotFound, RunKind, Runtime, resolve_ref
from server.inputs import InputError, parse_object
from server.present import (
    change_line,
    checkpoint_view_line,
    compensation_lines,
    load_waiting_lines,
    replay_report_lines,
    run_line,
)

from . import exits
from .common import (
    GRAPH_HELP,
    MOCK_HELP,
    add_command,
    add_limit_options,
    emit,
    limit_args,
    mocks_arg,
    opened,
    refuse_checkpoint_id,
    show_run,
)

PATCH_MEANING = 'a patch is an object of state fields, {"field": value}'


async def cmd_history(args: argparse.Namespace) -> int:
    with opened(args, args.graph) as rt:
        try:
            run = await rt.get_run(args.run)
        except NotFound:
            refuse_checkpoint_id(rt, args.run)
            raise
        views = [await rt.checkpoint(cp.id) for cp in await rt.history(args.run)]
    data = [v.to_json() for v in views]
    if args.no_state:
        for d in data:
            del d["state"]
    lines = [run_line(run), *map(checkpoint_view_line, views)]
    if any(v.ready is None for v in views):
        lines.append("next: ? — the graph's code is not loaded here, so what runs next cannot be decided; "
                     "give it with --graph MODULE:GRAPH")
    emit(args, data, "\n".join(lines))
    return exits.OK


async def cmd_diff(args: argparse.Namespace) -> int:
    with opened(args, args.graph) as rt:
        try:
            changes = await rt.diff(args.checkpoint_a, args.checkpoint_b)
        except NotFound:
            _refuse_run_ids(rt, args.checkpoint_a, args.checkpoint_b)
            raise
    emit(args, [c.to_json() for c in changes], "\n".join(map(change_line, changes)) or "no differences")
    return exits.OK


async def cmd_fork(args: argparse.Namespace) -> int:
    patch = parse_object(args.patch, "--patch", PATCH_MEANING) if args.patch is not None else None
    mocks = mocks_arg(args.mock)
    if mocks is not None and args.effects == "live":
        raise InputError("--mock serves effects of a mocked fork; with --effects live every effect runs for real")
    graph = resolve_ref(args.graph) if args.graph else None
    with opened(args) as rt:
        try:
            run = await rt.fork(args.checkpoint, patch, effects=args.effects, mocks=mocks, graph=graph,
                                queue=args.queue, **limit_args(args))
        except NotFound:
            _refuse_run_ids(rt, args.checkpoint)
            raise
        await show_run(rt, args, run.id)
    # left to a worker: it goes on there (``harness watch RUN`` follows it)
    return exits.OK if args.queue else exits.for_run(run)


def _refuse_run_ids(rt: Runtime, *checkpoint_ids: str) -> None:
    """When one of the ids given for checkpoints is no checkpoint but a run's id (an easy
    slip: runs are what ``runs`` lists), say which checkpoint was likely meant."""
    for given in checkpoint_ids:
        try:
            rt.store.get_checkpoint(given)
            continue
        except NotFound:
            pass
        try:
            run = rt.store.get_run(given)
        except NotFound:
            return   # neither: the store's own message says so
        latest = rt.store.find_checkpoint(run.id)
        which = f"its latest checkpoint is {latest.id}" if latest else "it has no checkpoint yet"
        raise InputError(f"no checkpoint with id {given!r}: that is a run's id; {which} "
                         f"(harness history {run.id} lists them all)")


async def cmd_replay(args: argparse.Namespace) -> int:
    mocks = mocks_arg(args.mock)
    if args.report and mocks is not None:
        raise InputError("--report shows an existing replay; it takes no --mock")
    if args.report and args.queue:
        raise InputError("--report shows an existing replay; --queue makes a new one")
    graph = resolve_ref(args.graph) if args.graph else None
    with opened(args) as rt:
        if args.queue:   # nothing has run yet, so no report: the run, and how to follow it
            run = await rt.submit_replay(args.run, graph, mocks=mocks)
            await show_run(rt, args, run.id)
            return exits.OK
        if args.report:
            if graph is not None:   # the replay's code, for it alone (its version keeps its own)
                rt.graphs.register(graph, current=False)
            run = await rt.get_run(args.run)
            if run.kind != RunKind.REPLAY:
                raise InputError(f"run {run.id} is a {run.kind.value} run, not a replay")
            report = await rt.replay_report(run.id)
        else:
            report = await rt.replay(args.run, graph, mocks=mocks)
        waiting = await load_waiting_lines(rt, report.run_id)
    emit(args, report.to_json(), "\n".join(replay_report_lines(report, waiting)))
    return exits.for_outcome(report.same)


async def cmd_compensate(args: argparse.Namespace) -> int:
    with opened(args) as rt:
        refuse_checkpoint_id(rt, args.run)
        report = await rt.compensate(args.run, retry_in_doubt=args.retry_in_doubt, queue=args.queue)
    emit(args, report.to_json(), "\n".join(compensation_lines(report)))
    return exits.for_outcome(report.complete or report.queued)


def register(sub: Any) -> None:
    """Add these commands to the ``harness`` parser."""
    h = add_command(sub, "history", "a run's checkpoints, oldest first")
    h.add_argument("run", help="run id")
    h.add_argument("--graph", help=GRAPH_HELP)
    h.add_argument("--no-state", action="store_true", help="leave each checkpoint's state out of --json")
    h.set_defaults(fn=cmd_history)

    d = add_command(sub, "diff", "field-level changes between the states at two checkpoints")
    d.add_argument("checkpoint_a", metavar="CP_A", help="checkpoint id (before)")
    d.add_argument("checkpoint_b", metavar="CP_B", help="checkpoint id (after); any run of any thread")
    d.add_argument("--graph", help=GRAPH_HELP)
    d.set_defaults(fn=cmd_diff)

    f = add_command(sub, "fork", "branch off at a checkpoint (optionally patching its state)",
                    "Start a new run from the state at CHECKPOINT, with --patch applied; nodes "
                    "finished there are not run again. Exit 0 when it succeeded or paused (or, with "
                    "--queue, once it is queued), else 1.")
    f.add_argument("checkpoint", help="checkpoint id")
    f.add_argument("--patch", help='state fields to replace: {"field": value} (a JSON object)')
    f.add_argument("--effects", choices=["mock", "live"], default="mock",
                   help="mock (default): serve effects from the recording and pause on any it lacks; "
                        "live: run them for real")
    f.add_argument("--mock", action="append", metavar="NAME=JSON", help=MOCK_HELP)
    f.add_argument("--graph", help="MODULE:GRAPH of the run's own graph version (a fork continues that code)")
    add_limit_options(f, "the fork's (by default the source run's)")
    f.add_argument("--queue", action="store_true",
                   help="leave the fork to a worker (harness worker) and return at once: it waits QUEUED for one")
    f.set_defaults(fn=cmd_fork)

    r = add_command(sub, "replay", "re-execute a recorded run with effects mocked; compare",
                    "Re-execute a run (or everything after a checkpoint) with every effect "
                    "mocked, and report per node what differs from the recording. Like a test "
                    "runner: exit 0 when the replay matches the recording, 1 when it differs (with "
                    "--queue: 0 once it is queued).")
    r.add_argument("run", metavar="RUN", help="run id (replayed whole) or checkpoint id (replayed from there)")
    r.add_argument("--graph", help="MODULE:GRAPH of the new code to run against the recording "
                                   "(with --report: the replay's own graph, if it cannot be imported)")
    r.add_argument("--mock", action="append", metavar="NAME=JSON", help=MOCK_HELP)
    r.add_argument("--report", action="store_true",
                   help="show the report of an existing replay run RUN again (say, after resuming it)")
    r.add_argument("--queue", action="store_true",
                   help="leave the replay to a worker (harness worker) and return at once with its run id; "
                        "its report, once it has ended: harness replay REPLAY_RUN --report")
    r.set_defaults(fn=cmd_replay)

    c = add_command(sub, "compensate", "undo a run's live effects, newest first, each once",
                    "Undo the ended run's live, succeeded effects that registered a compensation. "
                    "Exit 0 when every one is compensated (now or before; with --queue, once it is "
                    "asked), else 1.")
    c.add_argument("run", help="run id")
    c.add_argument("--retry-in-doubt", action="store_true",
                   help="run again a compensation whose outcome was never recorded (same key)")
    c.add_argument("--queue", action="store_true",
                   help="leave it to a worker (harness worker), which imports the undo functions, and "
                        "return at once; the worker prints what it made")
    c.set_defaults(fn=cmd_compensate)
