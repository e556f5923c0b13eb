"""The time-travel commands of ``harness``: history, diff, fork, replay, compensate,
export and import. ``server.cli.parser`` registers them; they share its helpers, so
errors and ``--json`` behave exactly as in the other commands.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from runtime import Runtime
from runtime.travel.diff import Change
from runtime.graph.refs import resolve_ref
from runtime.records import Checkpoint, RunKind
from runtime.travel.report import NodeReport, ReplayReport, Verdict
from runtime.travel.views import CheckpointView
from server.cli import (
    UserError,
    _emit,
    _json_arg,
    _run_line,
    _runtime,
    _show,
    _waiting_lines,
)

_LONG = 160  # longest value shown in a table row (the --json output has them whole)


def _value(value: Any, limit: int | None = None) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if limit is None or len(text) <= limit else text[:limit - 1] + "…"


def change_line(c: Change, limit: int | None = None) -> str:
    """``~ x: 2 -> 5``, ``+ notes[3]: "…"``, ``- field: …``."""
    if c.op == "added":
        return f"+ {c.dotted()}: {_value(c.new, limit)}"
    if c.op == "removed":
        return f"- {c.dotted()}: {_value(c.old, limit)}"
    return f"~ {c.dotted()}: {_value(c.old, limit)} -> {_value(c.new, limit)}"


def _mocks(items: list[str] | None) -> dict[str, Any] | None:
    """``--mock NAME=JSON`` options as {name: result} (split on the first '=')."""
    if not items:
        return None
    mocks: dict[str, Any] = {}
    for item in items:
        name, eq, text = item.partition("=")
        if not eq or not name:
            raise UserError(f"--mock takes NAME=JSON (an effect name and its result), got {item!r}")
        if name in mocks:
            raise UserError(f"--mock {name} is given twice")
        mocks[name] = _json_arg(text, f"--mock {name}")
    return mocks


@asynccontextmanager
async def _opened(args: argparse.Namespace, graph_ref: str | None = None) -> AsyncIterator[Runtime]:
    rt = await _runtime(args, graph_ref)
    try:
        yield rt
    finally:
        rt.close()


def _exit(status: str) -> int:
    return 0 if status in ("succeeded", "interrupted") else 1


# ------------------------------------------------------------------ history / diff

def _history_line(v: CheckpointView) -> str:
    cp: Checkpoint = v.checkpoint
    origin = f" (from {cp.parent_id})" if cp.seq == 0 and cp.parent_id else ""
    folded = ", ".join(cp.nodes) or "-"
    ready = ", ".join(v.ready) or "-"
    waiting = f"  waiting: {', '.join(v.interrupted)}" if v.interrupted else ""
    return (f"  #{cp.seq:<4} {cp.id}  {cp.source:<12} folded: {folded:<20} next: {ready:<20} "
            f"pending writes: {len(v.pending_writes)}{waiting}{origin}")


async def cmd_history(args: argparse.Namespace) -> int:
    async with _opened(args, args.graph) as rt:
        run = await rt.get_run(args.run)
        views = [await rt.checkpoint(cp.id) for cp in await rt.history(args.run)]
    data = [v.to_json() for v in views]
    if args.no_state:
        for d in data:
            del d["state"]
    _emit(args, data, "\n".join([_run_line(run), *map(_history_line, views)]))
    return 0


async def cmd_diff(args: argparse.Namespace) -> int:
    async with _opened(args, args.graph) as rt:
        changes = await rt.diff(args.checkpoint_a, args.checkpoint_b)
    _emit(args, [c.to_json() for c in changes], "\n".join(map(change_line, changes)) or "no differences")
    return 0


# ------------------------------------------------------------------ fork / replay

async def cmd_fork(args: argparse.Namespace) -> int:
    patch = _json_arg(args.patch, "--patch")
    mocks = _mocks(args.mock)
    if mocks is not None and args.effects == "live":
        raise UserError("--mock serves effects of a mocked fork; with --effects live every effect runs for real")
    graph = resolve_ref(args.graph) if args.graph else None
    async with _opened(args) as rt:
        run = await rt.fork(args.checkpoint, patch, effects=args.effects, mocks=mocks, graph=graph)
        await _show(rt, args, run.id)
    return _exit(run.status.value)


def _node_lines(n: NodeReport, width: int) -> list[str]:
    head = f"  {n.node:<{width}}  {n.verdict}"
    if n.recorded_status != n.replay_status:
        head += f"  ({n.recorded_status or '-'} -> {n.replay_status or '-'})"
    lines = [head]
    pad = " " * (width + 6)
    if n.error:
        recorded = f" (recorded: {n.recorded_error})" if n.recorded_error else ""
        lines.append(f"{pad}error: {n.error}{recorded}")
    lines += [f"{pad}writes {change_line(c, _LONG)}" for c in n.write_changes]
    for e in n.effects:
        if e.verdict == Verdict.SAME:
            continue
        request = f": request {_value(e.request, _LONG)}" if e.verdict == "new" else ""
        lines.append(f"{pad}effect {e.name} #{e.occurrence}: {e.verdict}{request}")
        lines += [f"{pad}  request {change_line(c, _LONG)}" for c in e.changes]
    if n.reused_answers:
        lines.append(f"{pad}reused recorded answers: {', '.join(n.reused_answers)}")
    return lines


def _report_text(report: ReplayReport, waiting: list[str]) -> str:
    versions = (f"graph version {report.graph_version}" if report.graph_version == report.recorded_graph_version
                else f"graph version {report.recorded_graph_version} -> {report.graph_version}")
    width = max((len(n.node) for n in report.nodes), default=4)
    head = f"replay {report.run_id} of {report.source_run_id} from {report.base_checkpoint_id}"
    lines = [f"{head}: {report.status} ({versions})"]
    for n in report.nodes:
        lines += _node_lines(n, width)
    if waiting:
        lines += waiting
        lines.append(f"  then see the report again with: harness replay {report.run_id} --report")
    differ = len(report.differences())
    lines.append("replay matches the recording" if report.same else f"{differ} node(s) differ")
    return "\n".join(lines)


async def cmd_replay(args: argparse.Namespace) -> int:
    mocks = _mocks(args.mock)
    if args.report and mocks is not None:
        raise UserError("--report shows an existing replay; it takes no --mock")
    graph = resolve_ref(args.graph) if args.graph else None
    async with _opened(args) as rt:
        if args.report:
            if graph is not None:
                rt.register(graph)
            run = await rt.get_run(args.run)
            if run.kind != RunKind.REPLAY:
                raise UserError(f"run {run.id} is a {run.kind.value} run, not a replay")
            report = await rt.replay_report(run.id)
        else:
            report = await rt.replay(args.run, graph, mocks=mocks)
        waiting = _waiting_lines(report.run_id, await rt.interrupts(report.run_id))
    _emit(args, report.to_json(), _report_text(report, waiting))
    return 0 if report.same else 1


# ------------------------------------------------------------------ compensate

async def cmd_compensate(args: argparse.Namespace) -> int:
    async with _opened(args) as rt:
        report = await rt.compensate(args.run, retry_in_doubt=args.retry_in_doubt)
    lines = []
    for s in report.steps:
        error = s.error
        if s.status == "in_doubt":  # the runtime's message names the Python argument
            error = (f"its compensation started and its outcome was never recorded; check it, then run "
                     f"harness compensate {args.run} --retry-in-doubt")
        status = "already compensated" if s.status == "already" else s.status
        lines.append(f"  {s.node}  {s.name} #{s.occurrence}  {status}" + (f": {error}" if error else ""))
    if not report.steps:
        lines.append(f"nothing to compensate: run {args.run} has no live effect with a compensation")
    elif report.complete:
        lines.append("compensation complete")
    else:
        lines.append("compensation incomplete: older effects are left as they are until this one is settled")
    _emit(args, report.to_json(), "\n".join(lines))
    return 0 if report.complete else 1


# ------------------------------------------------------------------ export / import

async def cmd_export(args: argparse.Namespace) -> int:
    async with _opened(args) as rt:
        document = await rt.export_thread(args.run)
    text = json.dumps(document, indent=2)
    if not args.out:
        print(text)
        return 0
    try:
        Path(args.out).write_text(text + "\n")
    except OSError as e:
        raise UserError(f"cannot write {args.out}: {e.strerror}") from None
    runs = [r["run"]["id"] for r in document["runs"]]
    _emit(args, {"out": args.out, "thread_id": document["thread_id"], "runs": runs},
          f"exported thread {document['thread_id']} ({len(runs)} run(s)) to {args.out}")
    return 0


async def cmd_import(args: argparse.Namespace) -> int:
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    except OSError as e:
        raise UserError(f"cannot read {args.file}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"{args.file} is not a text file") from None
    document = _json_arg(text, "stdin" if args.file == "-" else args.file)
    async with _opened(args) as rt:
        runs = await rt.import_thread(document)
    _emit(args, runs, "\n".join([f"imported {len(runs)} run(s) of thread {runs[0].thread_id}:",
                                 *map(_run_line, runs)]))
    return 0


# ------------------------------------------------------------------ parser

GRAPH_HELP = "MODULE:GRAPH, when the run's graph cannot be imported from where it was started"


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the time-travel subcommands to the ``harness`` parser."""
    h = sub.add_parser("history", parents=[common], help="a run's checkpoints, oldest first")
    h.add_argument("run", help="run id")
    h.add_argument("--graph", help=GRAPH_HELP)
    h.add_argument("--no-state", action="store_true", help="leave each checkpoint's state out of --json")
    h.set_defaults(fn=cmd_history)

    d = sub.add_parser("diff", parents=[common], help="field-level changes between the states at two checkpoints")
    d.add_argument("checkpoint_a", metavar="CP_A", help="checkpoint id (before)")
    d.add_argument("checkpoint_b", metavar="CP_B", help="checkpoint id (after); any run of any thread")
    d.add_argument("--graph", help=GRAPH_HELP)
    d.set_defaults(fn=cmd_diff)

    mock_help = "result of effect NAME when it has no recording (JSON; repeatable)"
    f = sub.add_parser("fork", parents=[common], help="branch off at a checkpoint (optionally patching its state)",
                       description="Start a new run from the state at CHECKPOINT, with --patch applied; nodes "
                                   "finished there are not run again. Exit 0 when it succeeded or paused, else 1.")
    f.add_argument("checkpoint", help="checkpoint id")
    f.add_argument("--patch", help='state fields to replace: {"field": value} (JSON)')
    f.add_argument("--effects", choices=["mock", "live"], default="mock",
                   help="mock (default): serve effects from the recording and pause on any it lacks; "
                        "live: run them for real")
    f.add_argument("--mock", action="append", metavar="NAME=JSON", help=mock_help)
    f.add_argument("--graph", help="MODULE:GRAPH of the run's own graph version (a fork continues that code)")
    f.set_defaults(fn=cmd_fork)

    r = sub.add_parser("replay", parents=[common], help="re-execute a recorded run with effects mocked; compare",
                       description="Re-execute a run (or everything after a checkpoint) with every effect "
                                   "mocked, and report per node what differs from the recording. Like a test "
                                   "runner: exit 0 when the replay matches the recording, 1 when it differs.")
    r.add_argument("run", metavar="RUN", help="run id (replayed whole) or checkpoint id (replayed from there)")
    r.add_argument("--graph", help="MODULE:GRAPH of the new code to run against the recording "
                                   "(with --report: the replay's own graph, if it cannot be imported)")
    r.add_argument("--mock", action="append", metavar="NAME=JSON", help=mock_help)
    r.add_argument("--report", action="store_true",
                   help="show the report of an existing replay run RUN again (say, after resuming it)")
    r.set_defaults(fn=cmd_replay)

    c = sub.add_parser("compensate", parents=[common], help="undo a run's live effects, newest first, each once",
                       description="Undo the ended run's live, succeeded effects that registered a compensation. "
                                   "Exit 0 when every one is compensated (now or before), else 1.")
    c.add_argument("run", help="run id")
    c.add_argument("--retry-in-doubt", action="store_true",
                   help="run again a compensation whose outcome was never recorded (same key)")
    c.set_defaults(fn=cmd_compensate)

    e = sub.add_parser("export", parents=[common], help="write a run's whole thread as one JSON document")
    e.add_argument("run", help="run id (every run of its thread is exported)")
    e.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")
    e.set_defaults(fn=cmd_export)

    i = sub.add_parser("import", parents=[common], help="load an exported thread into this database")
    i.add_argument("file", metavar="FILE", help="the exported document, or - for stdin")
    i.set_defaults(fn=cmd_import)
