"""The debugger from the command line: ``serve`` (any store, your graphs) and ``demo``
(a fresh local store seeded with example threads)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from server.inputs import InputError

from . import exits
from .common import add_command, opened

DEFAULT_PORT = 8377


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--port must be a whole number, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"--port must be from 0 to 65535, got {port}")
    return port


def _listening(host: str, port: int) -> socket.socket:
    """A socket bound to ``port`` (0: any free port), handed to the server as it is: a port
    probed and let go could be taken before the server binds it again."""
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    # as the server's own sockets: a restart binds the port its last run's connections still
    # hold in TIME_WAIT (a port another process listens on is refused all the same)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
    except OSError as e:
        s.close()
        raise InputError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    return s


async def _serve(rt: Any, host: str, port: int, token: str | None, also_hosts: Iterable[str] = (),
                 workers: bool = False) -> None:
    import uvicorn

    from server.web import create_app

    app = create_app(rt, host=host, token=token, also_hosts=also_hosts, workers=workers)
    with _listening(host, port) as sock:
        port = int(sock.getsockname()[1])
        shown = f"[{host}]" if ":" in host else host
        print(f"Shadow Harness debugger: http://{shown}:{port}/runs", flush=True)
        if token:   # the secret itself is not printed: logs outlive terminals
            print(f"  it asks for the token: open http://{shown}:{port}/runs?token=SECRET once in a browser (a "
                  f"cookie keeps it), or send 'Authorization: Bearer SECRET'; SECRET is the part after NAME: "
                  f"of a NAME:SECRET token", flush=True)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
        await uvicorn.Server(config).serve(sockets=[sock])


async def cmd_serve(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get("HARNESS_TOKEN") or None
    with opened(args, *args.graphs) as rt:
        await _serve(rt, args.host, args.port, token, args.allow_host, args.workers)
    return exits.OK


async def cmd_demo(args: argparse.Namespace) -> int:
    from runtime import Runtime, SqlStore
    from server.demo import seed_demo

    folder = Path(args.dir or tempfile.mkdtemp(prefix="harness-demo-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "demo.db"
    if path.exists():
        raise InputError(f"{path} exists already; the demo starts from a fresh store (choose another --dir)")
    rt = Runtime(store=SqlStore(f"sqlite:///{path}"))
    try:
        started = time.monotonic()
        print(f"seeding example threads into {path} …", file=sys.stderr, flush=True)
        ids = await seed_demo(rt)
        print(f"seeded in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
        if args.write_ids:   # for tests that drive the demo: what was seeded, by role
            Path(args.write_ids).write_text(json.dumps(dataclasses.asdict(ids), indent=2), encoding="utf-8")
        await _serve(rt, "127.0.0.1", args.port, None)
    finally:
        rt.close()
    return exits.OK


def register(sub: Any) -> None:
    """Add these commands to the ``harness`` parser."""
    s = add_command(sub, "serve", "serve the time-travel debugger over a store")
    s.add_argument("graphs", nargs="*", metavar="MODULE:GRAPH", help="graphs to register (so runs can be resumed, "
                                                                     "forked and replayed with their code)")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; any other needs a token)")
    s.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free port)")
    s.add_argument("--token", help="required from every client (or $HARNESS_TOKEN); NAME:SECRET names who answers")
    s.add_argument("--workers", action="store_true",
                   help="runs are driven by harness worker processes: an answer, the resume of a failed run, "
                        "a fork or a replay leaves the run QUEUED for them instead of driving it in this server")
    s.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="on 127.0.0.1, also answer requests addressed to NAME (a local reverse proxy's); "
                        "others are refused, as a page on another site could make its name resolve here")
    s.set_defaults(fn=cmd_serve)

    d = add_command(sub, "demo", "seed example threads into a fresh local store and serve the debugger")
    d.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free port)")
    d.add_argument("--dir", help="folder for the demo's SQLite file (default: a new temporary folder)")
    d.add_argument("--write-ids", metavar="FILE", help="write the ids of the seeded runs to FILE (JSON)")
    d.set_defaults(fn=cmd_demo)
