"""The run and node state machines: every (status, event) pair, and terminal monotonicity."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.core.records import EffectStatus, EventType
from runtime.core.states import (
    ACTIVE_NODE,
    FINISHED_NODE,
    NODE_TRANSITIONS,
    RESUME_PATHS,
    RUN_TRANSITIONS,
    STOP_NODE_EVENT,
    STOP_PRIORITY,
    TERMINAL_NODE,
    TERMINAL_RUN,
    NodeEvent,
    NodeStatus,
    ResumePath,
    RunEvent,
    RunStatus,
    StopKind,
    next_node_status,
    next_run_status,
    supersedes,
)
from runtime.errors import IllegalTransition

RUN_PAIRS = list(itertools.product(RunStatus, RunEvent))
NODE_PAIRS = list(itertools.product(NodeStatus, NodeEvent))


def test_tables_cover_every_status_and_target_only_known_statuses():
    assert set(RUN_TRANSITIONS) == set(RunStatus)
    assert set(NODE_TRANSITIONS) == set(NodeStatus)
    for out in RUN_TRANSITIONS.values():
        assert set(out) <= set(RunEvent) and set(out.values()) <= set(RunStatus)
    for out in NODE_TRANSITIONS.values():
        assert set(out) <= set(NodeEvent) and set(out.values()) <= set(NodeStatus)


def test_terminal_sets_are_exactly_the_ends_named_by_the_design():
    assert TERMINAL_RUN == {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED}
    assert TERMINAL_NODE == {NodeStatus.SUCCEEDED, NodeStatus.FAILED, NodeStatus.SKIPPED,
                             NodeStatus.CANCELLED}
    # INTERRUPTED is a pause, not an end
    assert RunStatus.INTERRUPTED not in TERMINAL_RUN
    assert NodeStatus.INTERRUPTED not in TERMINAL_NODE
    # "finished" for the dependency rule means terminal; active nodes are never finished
    assert FINISHED_NODE == TERMINAL_NODE
    assert not ACTIVE_NODE & FINISHED_NODE


@pytest.mark.parametrize(("status", "event"), RUN_PAIRS, ids=[f"{s}-{e}" for s, e in RUN_PAIRS])
def test_run_transition_gives_table_target_or_raises_illegal(status, event):
    table = RUN_TRANSITIONS[status]
    if event in table:
        assert next_run_status(status, event) == table[event]
    else:
        with pytest.raises(IllegalTransition) as exc:
            next_run_status(status, event)
        assert (exc.value.machine, exc.value.status, exc.value.event) == ("run", status, event)
        assert repr(str(event)) in str(exc.value) and repr(str(status)) in str(exc.value)


@pytest.mark.parametrize(("status", "event"), NODE_PAIRS, ids=[f"{s}-{e}" for s, e in NODE_PAIRS])
def test_node_transition_gives_table_target_or_raises_illegal(status, event):
    table = NODE_TRANSITIONS[status]
    if event in table:
        assert next_node_status(status, event) == table[event]
    else:
        with pytest.raises(IllegalTransition) as exc:
            next_node_status(status, event)
        assert (exc.value.machine, exc.value.status, exc.value.event) == ("node", status, event)


def _walk(start, events, table, step, terminal):
    """Apply events one by one; check each against the table; return the visited statuses."""
    status, was_terminal = start, start in terminal
    for event in events:
        before = status
        if event in table[status]:
            assert not was_terminal, f"terminal {before} accepted {event}"
            status = step(status, event)
            assert status == table[before][event]
        else:
            with pytest.raises(IllegalTransition):
                step(status, event)
            assert status == before
        if was_terminal:
            assert status == before
        was_terminal = was_terminal or status in terminal
    return status


@settings(max_examples=60, deadline=None)
@given(start=st.sampled_from(list(RunStatus)),
       events=st.lists(st.sampled_from(list(RunEvent)), max_size=40))
def test_terminal_run_status_never_changes_under_any_event_sequence(start, events):
    _walk(start, events, RUN_TRANSITIONS, next_run_status, TERMINAL_RUN)


@settings(max_examples=60, deadline=None)
@given(start=st.sampled_from(list(NodeStatus)),
       events=st.lists(st.sampled_from(list(NodeEvent)), max_size=40))
def test_terminal_node_status_never_changes_under_any_event_sequence(start, events):
    _walk(start, events, NODE_TRANSITIONS, next_node_status, TERMINAL_NODE)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_legal_run_walks_reach_terminal_then_every_event_raises(data):
    """Follow only legal events until a terminal status; from there every event is illegal."""
    status = RunStatus.QUEUED
    for _ in range(30):
        legal = sorted(RUN_TRANSITIONS[status])
        if not legal:
            break
        status = next_run_status(status, data.draw(st.sampled_from(legal)))
    if status in TERMINAL_RUN:
        for event in RunEvent:
            with pytest.raises(IllegalTransition):
                next_run_status(status, event)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_legal_node_walks_reach_terminal_then_every_event_raises(data):
    status = NodeStatus.PENDING
    for _ in range(30):
        legal = sorted(NODE_TRANSITIONS[status])
        if not legal:
            break
        status = next_node_status(status, data.draw(st.sampled_from(legal)))
    if status in TERMINAL_NODE:
        for event in NodeEvent:
            with pytest.raises(IllegalTransition):
                next_node_status(status, event)


# --------------------------------------------------------------------------- stop reasons

@given(st.sampled_from(list(StopKind)))
def test_any_stop_reason_replaces_no_reason(kind):
    assert supersedes(kind, None)


@given(st.sampled_from(list(StopKind)))
def test_a_stop_reason_never_replaces_itself(kind):
    """The first failure is the one reported; a second cancel keeps the first reason."""
    assert not supersedes(kind, kind)


@given(st.sampled_from(list(StopKind)), st.sampled_from(list(StopKind)))
def test_stop_priority_is_a_strict_order(a, b):
    assert not (supersedes(a, b) and supersedes(b, a))
    assert a == b or supersedes(a, b) or supersedes(b, a)


def test_cancel_wins_over_failure_and_failure_over_a_pause():
    assert supersedes(StopKind.CANCEL, StopKind.FAIL) and supersedes(StopKind.FAIL, StopKind.INTERRUPT)
    assert not supersedes(StopKind.INTERRUPT, StopKind.FAIL) and not supersedes(StopKind.FAIL, StopKind.CANCEL)
    assert set(STOP_PRIORITY) == set(StopKind)


@pytest.mark.parametrize("kind", list(StopKind))
def test_stopping_moves_waiting_nodes_only_by_legal_transitions_to_an_end(kind):
    for status, event in STOP_NODE_EVENT[kind].items():
        assert NODE_TRANSITIONS[status][event] in TERMINAL_NODE


def test_a_pause_leaves_waiting_nodes_as_they_are():
    assert STOP_NODE_EVENT[StopKind.INTERRUPT] == {}


# --------------------------------------------------------------------------- resume paths

def test_resume_has_a_path_for_every_run_status():
    assert set(RESUME_PATHS) == set(RunStatus)


@pytest.mark.parametrize("status", sorted(TERMINAL_RUN))
def test_resume_never_reopens_a_terminal_run(status):
    """Terminal states are monotonic: continuing is a new run, or refused."""
    assert RESUME_PATHS[status] in (ResumePath.CONTINUE, ResumePath.REFUSE)


def test_only_a_paused_run_takes_answers():
    assert [s for s, p in RESUME_PATHS.items() if p == ResumePath.ANSWER] == [RunStatus.INTERRUPTED]


# --------------------------------------------------------------------------- event types

@pytest.mark.parametrize("event", list(NodeEvent))
def test_every_node_transition_has_an_event_type_that_names_it(event):
    assert EventType.of_node(event).node_event == event


@pytest.mark.parametrize("event", list(RunEvent))
def test_every_run_transition_has_an_event_type(event):
    assert EventType.of_run(event).value == f"run.{event.value}"


@pytest.mark.parametrize("status", list(EffectStatus))
def test_every_journal_status_has_an_event_type(status):
    assert EventType.of_effect(status).value == f"effect.{status.value}"
