"""Whether a run's lease still binds: who may drive a RUNNING run.

A run holds a lease (owner, expiry) renewed by its driver's heartbeat; every write
carries the lease's fencing token. A lease whose owner died need not be waited out
when the owner ran on this host (in the same PID namespace): its PID is checked.
"""

from __future__ import annotations

import functools
import logging
import os
import socket

from ..core.env import Environment
from ..core.records import Run
from ..core.states import RunStatus

log = logging.getLogger(__name__)


@functools.cache
def _host() -> str:
    """This host as far as PIDs go: its name, and its PID namespace where one is known.
    Containers may share a host name but not their PIDs: a PID one cannot see may be alive
    in the other."""
    try:
        space = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return socket.gethostname()
    return f"{socket.gethostname()}~{space}"


def make_owner(short_id: str) -> str:
    """A lease owner name: ``host:pid:short-id`` (the host with its PID namespace)."""
    return f"{_host()}:{os.getpid()}:{short_id}"


def lease_expired(run: Run, env: Environment, *, driven_here: bool) -> bool:
    if run.lease_expires_at is None or run.lease_expires_at <= env.now():
        return True
    if run.lease_owner == env.owner and not driven_here:
        return True  # ours, and nothing here drives it any more
    host, _, rest = (run.lease_owner or "").partition(":")
    pid = rest.partition(":")[0]
    if host == _host() and pid.isdigit() and int(pid) != os.getpid():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            log.info("run %s: its owner %s is gone from this host; its lease is void",
                     run.id, run.lease_owner)
            return True  # the owner died on this machine: no need to wait out its lease
        except PermissionError:
            return False
    return False


def orphaned(run: Run, env: Environment, *, driven_here: bool) -> bool:
    """A RUNNING run whose process is gone (lease expired or its PID dead here)."""
    return run.status == RunStatus.RUNNING and not driven_here and lease_expired(run, env, driven_here=False)
