"""The ``harness`` command.

User mistakes (unknown run, invalid graph, bad JSON, invalid answer) print one
line on stderr and exit 2; they never show a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from runtime import HarnessError, Runtime, SqlStore
from runtime.errors import GraphError
from runtime.graph.refs import resolve_ref
from runtime.records import Checkpoint, Interrupt, InterruptKind, Run

DEFAULT_DB = "sqlite:///harness.db"


class UserError(Exception):
    pass


def _db(args: argparse.Namespace) -> str:
    url = args.db or os.environ.get("HARNESS_DB") or DEFAULT_DB
    if "://" not in url:  # a bare path means a SQLite file
        url = f"sqlite:///{url}"
    return url


def _json_arg(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{what} is not valid JSON: {e.msg} at column {e.colno}") from None


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(_plain(data), indent=2, default=str) if args.json else text)


def _run_line(run: Run) -> str:
    err = f"  {run.error.get('class')}: {run.error.get('message')}" if run.error else ""
    parent = f"  (from {run.parent_run_id})" if run.parent_run_id else ""
    return f"{run.id}  {run.status.value:<11}  {run.kind.value:<12}  {run.graph_name}{parent}{err}"


def _checkpoint_line(cp: Checkpoint) -> str:
    counts: dict[str, int] = {}
    for s in cp.node_states.values():
        counts[s.value] = counts.get(s.value, 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    folded = ", ".join(cp.nodes) if cp.nodes else "-"
    return f"  #{cp.seq:<4} {cp.id}  folded: {folded:<28} [{summary}]"


async def _runtime(args: argparse.Namespace, graph_ref: str | None = None) -> Runtime:
    rt = Runtime(store=SqlStore(_db(args)))
    if graph_ref:
        rt.register(resolve_ref(graph_ref))
    return rt


async def cmd_run(args: argparse.Namespace) -> int:
    graph = resolve_ref(args.graph)
    data = _json_arg(args.input, "--input") or {}
    rt = Runtime(store=SqlStore(_db(args)))
    try:
        run = await rt.start(graph, data, deadline=args.deadline, max_steps=args.max_steps)
        await _show(rt, args, run.id)
    finally:
        rt.close()
    return 0 if run.status.value in ("succeeded", "interrupted") else 1


async def _show(rt: Runtime, args: argparse.Namespace, run_id: str) -> None:
    run = await rt.get_run(run_id)
    cps = await rt.history(run_id)
    pending = await rt.interrupts(run_id)
    state = (await rt.state_at(cps[-1].id)).model_dump(mode="json") if cps else {}
    lines = [_run_line(run), f"checkpoints ({len(cps)}):", *map(_checkpoint_line, cps),
             f"state: {json.dumps(state)}"]
    if rt.orphaned(run):
        lines.append(f"its process is gone: recover it with  harness resume {run.id}")
    lines += _waiting_lines(run.id, pending)
    children = rt.store.child_runs(run_id)
    for c in children:
        lines.append(f"continued by: {c.id} ({c.kind.value}, {c.status.value})")
    _emit(args, {"run": run, "checkpoints": cps, "state": state, "interrupts": pending,
                 "children": [c.id for c in children]}, "\n".join(lines))


#: the runtime's own questions about effects: (the usual answer, the other answers)
_EFFECT_ANSWERS = {
    InterruptKind.UNRECORDED: ('{"action": "mock", "result": <json>}',
                               """'{"action": "live"}' (run it for real) or '{"action": "abort"}' (fail the branch)"""),
    InterruptKind.IN_DOUBT: ('{"action": "result", "result": <json>}',
                             """'{"action": "retry"}' (call it again, same key) or '{"action": "abort"}'"""),
}


def _waiting_lines(run_id: str, pending: Sequence[Interrupt]) -> list[str]:
    """What each pending interrupt asks, and the command that answers it."""
    lines = []
    for i in pending:
        value = (i.payload or {}).get("value")
        answer, others = _EFFECT_ANSWERS.get(i.kind, ("<json>", ""))
        what = json.dumps(value)
        if others and isinstance(value, dict):
            recorded = value.get("recorded_request")
            what = (f"effect {value.get('effect')!r} #{value.get('occurrence')} "
                    + ("has no recorded result" if i.kind == InterruptKind.UNRECORDED
                       else "started but its outcome was never recorded")
                    + f" for request {json.dumps(value.get('request'))}"
                    + (f" (recorded: {json.dumps(recorded)})" if recorded is not None else ""))
        lines.append(f"waiting: interrupt {i.id} from node {i.node!r} ({i.kind.value}): {what}")
        given = f"--response '{answer}'" if len(pending) == 1 else f"""--answers '{{"{i.id}": {answer}}}'"""
        lines.append(f"  answer with: harness resume {run_id} {given}")
        if others:
            lines.append(f"           or: {others}")
    return lines


async def cmd_show(args: argparse.Namespace) -> int:
    rt = await _runtime(args, args.graph)
    try:
        await _show(rt, args, args.run)
    finally:
        rt.close()
    return 0


async def cmd_runs(args: argparse.Namespace) -> int:
    rt = await _runtime(args)
    try:
        runs = await rt.runs(status=args.status, limit=args.limit)
    finally:
        rt.close()
    _emit(args, runs, "\n".join(map(_run_line, runs)) or "no runs")
    return 0


async def cmd_resume(args: argparse.Namespace) -> int:
    rt = await _runtime(args, args.graph)
    try:
        answers = _json_arg(args.answers, "--answers")
        if args.response is not None:
            run = await rt.resume(args.run, _json_arg(args.response, "--response"))
        else:
            run = await rt.resume(args.run, answers=answers)
        await _show(rt, args, run.id)
    finally:
        rt.close()
    return 0 if run.status.value in ("succeeded", "interrupted") else 1


async def cmd_cancel(args: argparse.Namespace) -> int:
    rt = await _runtime(args, args.graph)
    try:
        run = await rt.cancel(args.run, args.reason)
    finally:
        rt.close()
    _emit(args, run, _run_line(run) if run.status.value == "cancelled"
          else f"cancel requested; {_run_line(run)}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness", description="Shadow Harness: durable runs you can step back through.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", help=f"database URL or SQLite path (default: $HARNESS_DB or {DEFAULT_DB})")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", parents=[common], help="run a graph until it ends or pauses")
    r.add_argument("graph", help="MODULE:GRAPH or a plan .json file")
    r.add_argument("--input", help="run input as a JSON object")
    r.add_argument("--deadline", type=float, help="run deadline in seconds")
    r.add_argument("--max-steps", type=int, help="stop after this many node attempts")
    r.set_defaults(fn=cmd_run)

    ls = sub.add_parser("runs", parents=[common], help="list runs, newest first")
    ls.add_argument("--status", choices=["queued", "running", "interrupted", "succeeded", "failed", "cancelled"])
    ls.add_argument("--limit", type=int, default=50)
    ls.set_defaults(fn=cmd_runs)

    for name, fn, text in (("show", cmd_show, "a run: status, checkpoints, state, pending interrupts"),
                           ("resume", cmd_resume, "answer a paused run, continue a failed one, recover a crashed one"),
                           ("cancel", cmd_cancel, "cancel a run")):
        c = sub.add_parser(name, parents=[common], help=text)
        c.add_argument("run", help="run id")
        c.add_argument("--graph", help="MODULE:GRAPH, when the run's graph cannot be imported from where it was started")
        c.set_defaults(fn=fn)
        if name == "resume":
            c.add_argument("--response", help="answer to the pending interrupt (JSON)")
            c.add_argument("--answers", help='answers by interrupt id: {"int_…": …} (JSON)')
        if name == "cancel":
            c.add_argument("--reason", default="cancelled from the command line")

    from server.cli_travel import register  # it imports this module's helpers

    register(sub, common)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    sys.path.insert(0, os.getcwd())  # graphs named MODULE:GRAPH may live in the working directory
    args = parser().parse_args(argv)
    try:
        code: int = asyncio.run(args.fn(args))
        return code
    except GraphError as e:
        print("harness: invalid graph: " + "; ".join(map(str, e.problems)), file=sys.stderr)
    except (HarnessError, UserError) as e:
        print(f"harness: {e}", file=sys.stderr)
    except SQLAlchemyError as e:
        print(f"harness: database error ({_db(args)}): {str(e.orig if hasattr(e, 'orig') else e).splitlines()[0]}",
              file=sys.stderr)
    except BrokenPipeError:  # the reader went away (| head): not an error worth a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
