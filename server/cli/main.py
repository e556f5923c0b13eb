"""The ``harness`` parser and entry point: parse, run one command, turn what went
wrong into an exit code (see :mod:`server.cli.exits`)."""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import metadata
from typing import TextIO

from server.inputs import InputError

from . import exits, runs, serve, transfer, travel, worker
from .common import Parser, add_global_options, db_url

#: the command modules, in the order ``--help`` lists their commands
COMMANDS = (runs, travel, transfer, serve, worker)
LOG_FORMAT = "harness: %(levelname)s %(name)s: %(message)s"


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="harness", description="Shadow Harness: durable runs you can step back through.",
               epilog="--db, --json and -v may come before the command or after it.")
    add_global_options(p, top=True)
    p.add_argument("--version", action="version", version=f"harness {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(sub)
    return p


def _version() -> str:
    """The installed package's version (a checkout run without installing it says so)."""
    try:
        return metadata.version("shadow-harness")
    except metadata.PackageNotFoundError:
        return "(not installed)"


@contextmanager
def log_output(verbose: bool) -> Iterator[None]:
    """Where log records and Python warnings go while a command runs.

    By default nowhere: stderr carries only the one-line error of a mistake, and
    output piped from stdout stays clean. With ``verbose`` the runtime's records
    (INFO and up), WARNING and up from anything else, and warnings go to stderr.
    Everything is put back afterwards, so ``main`` can be called more than once in
    one process."""
    root, runtime_log = logging.getLogger(), logging.getLogger("runtime")
    handler: logging.Handler = logging.StreamHandler(sys.stderr) if verbose else logging.NullHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    level = runtime_log.level
    root.addHandler(handler)   # a handler anywhere keeps logging's last-resort printer quiet
    logging.captureWarnings(True)   # warnings become "py.warnings" records, which go the same way
    if verbose:
        runtime_log.setLevel(min(level or logging.INFO, logging.INFO))
    try:
        yield
    finally:
        logging.captureWarnings(False)
        root.removeHandler(handler)
        runtime_log.setLevel(level)


class _LeavableOut(io.TextIOBase):
    """stdout that keeps working when its reader goes away (``| head``): the rest of the
    output is dropped and the command still finishes, so its exit code is the real one
    (a failed run piped into ``head`` still exits 1)."""

    def __init__(self, real: TextIO):
        self.real = real

    def write(self, text: str) -> int:
        try:
            return self.real.write(text)
        except BrokenPipeError:
            self._drop()
            return len(text)

    def flush(self) -> None:
        try:
            self.real.flush()
        except BrokenPipeError:
            self._drop()

    def _drop(self) -> None:
        os.dup2(os.open(os.devnull, os.O_WRONLY), self.real.fileno())
        self.real = open(os.devnull, "w")  # noqa: SIM115  # lives as long as the process


@contextmanager
def reader_may_leave() -> Iterator[None]:
    saved = sys.stdout
    sys.stdout = _LeavableOut(saved)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stdout = saved


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``harness`` command; the exit code (0 ok, 1 failed outcome, 2 mistake)."""
    if os.getcwd() not in sys.path:  # graphs named MODULE:GRAPH may live in the working directory
        sys.path.insert(0, os.getcwd())
    try:
        args = parser().parse_args(argv)
    except exits.UsageError as e:
        return exits.report(str(e))
    except SystemExit as e:  # --help and --version print, then exit
        return e.code if isinstance(e.code, int) else exits.OK
    try:   # said before anything runs: an empty --db or $HARNESS_DB, say (the demo makes its own store)
        db = db_url(args) if args.fn is not serve.cmd_demo else "(the demo's own)"
    except InputError as e:
        return exits.report(str(e))
    with log_output(args.verbose), reader_may_leave():
        try:
            code: int = asyncio.run(args.fn(args))
            return code
        except BrokenPipeError:  # the reader went away (| head) outside our writes
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return exits.OK
        except KeyboardInterrupt:
            print("harness: interrupted", file=sys.stderr)
            return exits.INTERRUPTED
        except Exception as e:
            message = exits.mistake(e, db)
            if message is None:
                raise
            return exits.report(message)
