"""Moving threads between databases: ``export`` and ``import``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from server.inputs import MAX_DEPTH, InputError, parse_json
from server.present import run_line

from . import exits
from .common import add_command, emit, opened, refuse_checkpoint_id

#: an exported thread holds values of up to MAX_DEPTH levels inside an envelope of its
#: own, six levels at the deepest (runs[i].run.options.mocks.NAME, runs[i].checkpoints[j]
#: .snapshot.FIELD), so a thread made through harness always imports again
DOCUMENT_DEPTH = MAX_DEPTH + 10


async def cmd_export(args: argparse.Namespace) -> int:
    with opened(args) as rt:
        refuse_checkpoint_id(rt, args.run)
        document = await rt.export_thread(args.run)
    text = json.dumps(document, indent=2)
    if not args.out:
        print(text)
        return exits.OK
    try:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot write {args.out}: {e.strerror}") from None
    runs = [r["run"]["id"] for r in document["runs"]]
    emit(args, {"out": args.out, "thread_id": document["thread_id"], "runs": runs},
         f"exported thread {document['thread_id']} ({len(runs)} run(s)) to {args.out}")
    return exits.OK


def read_document(file: str) -> Any:
    """The JSON document in ``file`` (``-``: stdin), which must be UTF-8 text."""
    name = "stdin" if file == "-" else file
    try:
        data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as e:
        raise InputError(f"cannot read {file}: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{name} is not UTF-8 text (byte {e.start} cannot be decoded)") from None
    return parse_json(text, name, DOCUMENT_DEPTH)


async def cmd_import(args: argparse.Namespace) -> int:
    document = read_document(args.file)
    with opened(args) as rt:
        runs = await rt.import_thread(document, effects=args.effects)
    how = "effects mocked" if args.effects == "mock" else "effects live"
    emit(args, runs, "\n".join([f"imported {len(runs)} run(s) of thread {runs[0].thread_id} ({how}):",
                                *map(run_line, runs)]))
    return exits.OK


def register(sub: Any) -> None:
    """Add these commands to the ``harness`` parser."""
    e = add_command(sub, "export", "write a run's whole thread as one JSON document")
    e.add_argument("run", help="run id (every run of its thread is exported)")
    e.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")
    e.set_defaults(fn=cmd_export)

    i = add_command(sub, "import", "load an exported thread into this database")
    i.add_argument("file", metavar="FILE", help="the exported document, or - for stdin")
    i.add_argument("--effects", choices=["mock", "live"], default="mock",
                   help="mock (default): resuming or continuing the imported runs here serves the effects "
                        "they recorded and asks before any other; live: they may call the outside world again")
    i.set_defaults(fn=cmd_import)
