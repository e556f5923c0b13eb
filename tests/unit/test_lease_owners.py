"""A lease whose owner ran on this host and is gone is void before it expires (its PID is
checked) — but only when that PID is one this process can see: containers sharing a host
name but not a PID namespace would otherwise take each other's live runs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import Any

from runtime.core.records import Run, RunKind
from runtime.core.states import RunStatus
from runtime.engine.leases import lease_expired, make_owner


class Here:
    """What ``lease_expired`` reads of this process's environment."""

    owner = make_owner("here")

    def now(self) -> float:
        return time.time()


def a_dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    return int(done.stdout)


def held_by(owner: str, env: Any) -> Run:
    now = env.now()
    return Run(id="run_1", thread_id="t", graph_name="g", graph_version="v", status=RunStatus.RUNNING,
               kind=RunKind.MAIN, input={}, created_at=now, updated_at=now, lease_owner=owner,
               lease_expires_at=now + 60)


def test_a_dead_owner_in_this_pid_namespace_voids_its_lease_and_one_elsewhere_does_not() -> None:
    env: Any = Here()
    dead = a_dead_pid()
    host = make_owner("x").rsplit(":", 2)[0]
    assert host.startswith(socket.gethostname())
    assert lease_expired(held_by(f"{host}:{dead}:other", env), env, driven_here=False)
    # the same host name, another PID namespace (a container): its PID says nothing here
    assert not lease_expired(held_by(f"{socket.gethostname()}~1:{dead}:other", env), env, driven_here=False)
    # an owner named as before namespaces were part of it: its lease is waited out
    assert not lease_expired(held_by(f"{socket.gethostname()}:{dead}:other", env), env, driven_here=False)
    assert not lease_expired(held_by(f"{host}:{os.getpid()}:other", env), env, driven_here=False)
