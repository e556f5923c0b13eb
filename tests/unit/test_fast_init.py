"""Records built by ``fast_init``'s constructor are the same values the dataclass's own
constructor builds, and stay frozen."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from runtime.core.frozen import fast_init, fast_replace
from runtime.core.records import Checkpoint, CheckpointSource, NodeAttempt, Run, RunKind, TraceEvent
from runtime.core.states import NodeStatus, RunStatus


@dataclass(frozen=True, slots=True)
class Plain:
    a: int
    b: str = "b"
    c: list[int] = field(default_factory=list)


@fast_init
@dataclass(frozen=True, slots=True)
class Fast:
    a: int
    b: str = "b"
    c: list[int] = field(default_factory=list)


@pytest.mark.parametrize("args, kwargs", [((1,), {}), ((1, "x"), {}), ((1,), {"c": [2]}), ((), {"a": 3, "b": "y"})])
def test_same_fields_and_defaults_as_the_dataclass(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    assert dataclasses.astuple(Fast(*args, **kwargs)) == dataclasses.astuple(Plain(*args, **kwargs))  # type: ignore[arg-type]


def test_a_default_factory_gives_each_record_its_own_value() -> None:
    one, two = Fast(1), Fast(2)
    assert one.c == [] and one.c is not two.c


def test_still_frozen_and_usable_as_a_dataclass() -> None:
    r = Fast(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.a = 2  # type: ignore[misc]
    assert dataclasses.replace(r, b="z") == Fast(1, "z")
    assert pickle.loads(pickle.dumps(r)) == r


def test_bad_calls_fail_as_the_dataclass_does() -> None:
    with pytest.raises(TypeError):
        Fast()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Fast(1, d=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Fast(1, "b", [], 4)  # type: ignore[call-arg]


def test_refuses_classes_it_cannot_build() -> None:
    @dataclass(frozen=True)
    class NoSlots:
        a: int

    with pytest.raises(TypeError, match="slotted dataclass"):
        fast_init(NoSlots)

    @dataclass(frozen=True, slots=True, kw_only=True)
    class KeywordOnly:
        a: int

    with pytest.raises(TypeError, match="positional"):
        fast_init(KeywordOnly)


def test_the_kernel_records() -> None:
    run = Run("run_1", "t", "g", "v", RunStatus.RUNNING, RunKind.MAIN, {}, 1.0, 1.0)
    assert run.limits == {} and run.limits is not Run("r", "t", "g", "v", RunStatus.RUNNING, RunKind.MAIN, {}, 1.0, 1.0).limits
    assert run.evolve(fence=3, lease_owner="w").fence == 3
    assert TraceEvent("run_1", 1, 2.0, "node.start").data == {}
    cp = Checkpoint(id="cp_1", run_id="run_1", seq=1, parent_id=None, nodes=(), node_states={"a": NodeStatus.PENDING},
                    event_seq=1, created_at=1.0, source=CheckpointSource.STEP)
    assert cp.snapshot is None and dataclasses.replace(cp, seq=2).seq == 2
    assert NodeAttempt("run_1", "a", 1, NodeStatus.SUCCEEDED, 1.0, 2.0).error is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        cp.seq = 5  # type: ignore[misc]


def test_fast_replace_is_dataclasses_replace() -> None:
    replace = fast_replace(Fast)
    r = Fast(1, "x", [2])
    for changes in ({}, {"a": 5}, {"b": "y", "c": [9]}, {"a": 0, "b": "", "c": []}):
        assert replace(r, dict(changes)) == dataclasses.replace(r, **changes)  # type: ignore[arg-type]
    assert replace(r, {}) is not r
    with pytest.raises(TypeError, match=r"no field\(s\) \['d'\]"):
        replace(r, {"d": 1})


def test_run_evolve_keeps_every_field_it_is_not_given() -> None:
    run = Run("r", "t", "g", "v", RunStatus.RUNNING, RunKind.MAIN, {"x": 1}, 1.0, 2.0,
              parent_run_id="p", limits={"max_steps": 3}, usage={"steps": 1}, fence=4, lease_owner="o")
    evolved = run.evolve(status=RunStatus.SUCCEEDED, usage={"steps": 2})
    assert evolved == dataclasses.replace(run, status=RunStatus.SUCCEEDED, usage={"steps": 2})
    with pytest.raises(TypeError):
        run.evolve(nope=1)
