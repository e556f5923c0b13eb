"""What the command modules share: the parser class and the options every command
takes, argument types that check numbers, JSON arguments, opening the runtime and
printing. Command modules import this, never each other.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from runtime import JSON, NotFound, Runtime
from runtime.core.records import thread_id_problem
from server.connect import DEFAULT_DB, database_url, open_runtime
from server.inputs import InputError, parse_json
from server.present import load_run_view, plain

from .exits import UsageError

GRAPH_HELP = "MODULE:GRAPH, when the run's graph cannot be imported from where it was started"
MOCK_HELP = "result of effect NAME when it has no recording (JSON; repeatable)"


class Parser(argparse.ArgumentParser):
    """An argument parser whose mistakes are one line (an exception ``main`` reports)
    instead of a usage block and ``sys.exit``."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see: {self.prog} --help)")


def add_global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """``--db``, ``--json`` and ``-v``: accepted before the command and after it. On the
    command they default to "not given", so they override the ones before it only
    when they are given there."""
    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    parser.add_argument("--db", default=default(None),
                        help=f"database URL or SQLite path (default: $HARNESS_DB or {DEFAULT_DB})")
    parser.add_argument("--json", action="store_true", default=default(False), help="machine-readable output")
    parser.add_argument("-v", "--verbose", action="store_true", default=default(False),
                        help="show the runtime's log records (INFO and up) and Python warnings on stderr")


def add_command(sub: Any, name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
    """A subcommand parser that takes the global options too."""
    common = argparse.ArgumentParser(add_help=False)
    add_global_options(common, top=False)
    parser: argparse.ArgumentParser = sub.add_parser(name, parents=[common], help=help, description=description)
    return parser


# ------------------------------------------------------------------ argument types

def _finite_above_zero(text: str, meaning: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be {meaning} above 0, got {text[:40]!r}")
    return value


def positive_seconds(text: str) -> float:
    """A duration in seconds: a finite number above 0 (not nan, inf or negative)."""
    return _finite_above_zero(text, "a number of seconds")


def positive_number(text: str) -> float:
    """An amount (a cost budget): a finite number above 0."""
    return _finite_above_zero(text, "a number")


def positive_int(text: str) -> int:
    """A count: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text[:40]!r}")
    return value


def add_limit_options(parser: argparse.ArgumentParser, whose: str = "") -> None:
    """``--deadline``, ``--max-steps``, ``--max-tokens`` and ``--max-cost`` of a run;
    ``whose`` says which run's limits they set, when that needs saying."""
    note = f"; {whose}" if whose else ""
    parser.add_argument("--deadline", type=positive_seconds, help=f"run deadline in seconds{note}")
    parser.add_argument("--max-steps", type=positive_int, help=f"stop after this many node attempts{note}")
    parser.add_argument("--max-tokens", type=positive_int,
                        help=f"token budget, as reported with ctx.usage / info.usage{note}")
    parser.add_argument("--max-cost", type=positive_number,
                        help=f"cost budget, as reported with ctx.usage / info.usage{note}")


def limit_args(args: argparse.Namespace) -> dict[str, Any]:
    """The limit options as keyword arguments of ``start``, ``resume`` and ``fork``."""
    return {"deadline": args.deadline, "max_steps": args.max_steps, "max_tokens": args.max_tokens,
            "max_cost": args.max_cost}


def json_arg(text: str | None, what: str) -> JSON:
    """An optional JSON argument (None when not given)."""
    return None if text is None else parse_json(text, what)


def mocks_arg(items: list[str] | None) -> dict[str, JSON] | None:
    """``--mock NAME=JSON`` options as {name: result} (split on the first '=')."""
    if not items:
        return None
    mocks: dict[str, JSON] = {}
    for item in items:
        name, eq, text = item.partition("=")
        if not eq or not name:
            raise InputError(f"--mock takes NAME=JSON (an effect name and its result), got {item[:80]!r}")
        if name in mocks:
            raise InputError(f"--mock {name} is given twice")
        mocks[name] = parse_json(text, f"--mock {name}")
    return mocks


# ------------------------------------------------------------------ runtime and output

def db_url(args: argparse.Namespace) -> str:
    return database_url(args.db)


@contextmanager
def opened(args: argparse.Namespace, *graph_refs: str | None, **options: Any) -> Iterator[Runtime]:
    """The runtime over this command's database, with these graphs registered; ``options``
    as ``open_runtime`` takes them."""
    with open_runtime(db_url(args), graph_refs, **options) as rt:
        yield rt


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """``data`` as indented JSON with ``--json``, else ``text``."""
    print(json.dumps(plain(data), indent=2, default=str) if args.json else text)


async def show_run(rt: Runtime, args: argparse.Namespace, run_id: str) -> None:
    """Print the run: status, checkpoints, state, pending interrupts, continuations."""
    view = await load_run_view(rt, run_id)
    emit(args, view.to_json(), "\n".join(view.lines()))


def thread_arg(text: str) -> str:
    """A thread id as the runtime takes it; refused by argparse, naming the option."""
    problem = thread_id_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def refuse_checkpoint_id(rt: Runtime, given: str) -> None:
    """When the id given for a run is a checkpoint's (an easy slip: checkpoints are what
    ``history`` lists), say whose it is; a run's id, or one nothing has, passes."""
    try:
        cp = rt.store.get_checkpoint(given)
    except NotFound:
        return   # neither: the store's own message says so
    raise InputError(f"no run with id {given!r}: that is checkpoint #{cp.seq} of run {cp.run_id} "
                     f"(harness history {cp.run_id}; harness fork {given} branches off there)")
