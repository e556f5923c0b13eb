"""A process that follows a run from a SQLite file and prints its stream.

    python follow_worker.py DB_URL RUN_ID MARKER_PATH

Prints one JSON line per stream event; creates MARKER_PATH once it has seen the
run's first custom event, so the run can wait until it is being followed live.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from runtime import Runtime, SqlStore


async def main(db_url: str, run_id: str, marker: str) -> int:
    rt = Runtime(store=SqlStore(db_url))
    try:
        async for ev in rt.follow(run_id, poll=0.02):
            print(json.dumps(ev.to_json()), flush=True)
            if ev.type == "custom":
                Path(marker).touch()
    finally:
        rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:])))
