"""Bad input at the graph's edge (plans, plan files, decorator options) is refused with
located problems before anything runs or is written."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from runtime import ErrorClass, Graph, GraphError, RetryPolicy, compile_plan
from runtime.errors import InvalidRequest
from runtime.graph.refs import resolve_ref
from server.cli import main

NOTHING = None  # a module attribute a plan can name that is not a function
DEEP = 100_000


def noop(state: Any) -> None:
    return None


def plan_with(**node: Any) -> dict[str, Any]:
    return {"name": "p", "nodes": [{"id": "a", "fn": f"{__name__}:noop", **node}]}


def problems_of(plan: dict[str, Any]) -> list[str]:
    with pytest.raises(GraphError) as e:
        compile_plan(plan)
    return [str(p) for p in e.value.problems]


def compile_problems(g: Graph) -> list[str]:
    with pytest.raises(GraphError) as e:
        g.compile()
    return [str(p) for p in e.value.problems]


def nested(depth: int) -> list[Any]:
    """A list nested ``depth`` levels deep, built without recursion."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


# --- fn / when that name something that is not callable ---------------------------------

def test_plan_fn_naming_a_non_callable_is_located_at_the_fn_field():
    found = problems_of({"name": "p", "nodes": [{"id": "a", "fn": "os:sep"}]})
    assert len(found) == 1
    assert found[0].startswith("nodes[0] ('a').fn: 'os:sep' is a str, not a function")


def test_plan_fn_naming_none_is_rejected():
    found = problems_of({"name": "p", "nodes": [{"id": "a", "fn": f"{__name__}:NOTHING"}]})
    assert len(found) == 1 and found[0].startswith("nodes[0] ('a').fn:") and "not a function" in found[0]


def test_plan_when_naming_a_non_callable_is_located_at_the_when_field():
    found = problems_of(plan_with(when="os:sep"))
    assert len(found) == 1 and found[0].startswith("nodes[0] ('a').when: 'os:sep' is a str, not a predicate")


def test_plan_state_naming_none_is_rejected():
    found = problems_of({"name": "p", "state": f"{__name__}:NOTHING", "nodes": [{"id": "a", "fn": f"{__name__}:noop"}]})
    assert found == [f"state: '{__name__}:NOTHING' is not a pydantic model"]


def test_cli_run_of_a_plan_with_a_non_callable_fn_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"name": "p", "nodes": [{"id": "a", "fn": "os:sep"}]}))
    db = tmp_path / "runs.db"
    assert main(["run", str(plan), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "nodes[0] ('a').fn: 'os:sep' is a str, not a function" in err
    assert not db.exists()  # refused before a store was even opened


# --- timeouts ------------------------------------------------------------------------------

@pytest.mark.parametrize("timeout", [math.nan, math.inf, -math.inf, -1, 0, True, False])
def test_plan_timeout_that_is_not_a_positive_finite_number_is_located(timeout: Any):
    found = problems_of(plan_with(timeout=timeout))
    assert len(found) == 1 and found[0].startswith("nodes[0] ('a').timeout: ")


def test_plan_timeout_nan_from_json_text_is_rejected():
    text = '{"name": "p", "nodes": [{"id": "a", "fn": "%s:noop", "timeout": NaN}]}' % __name__
    found = problems_of(json.loads(text))
    assert found == ["nodes[0] ('a').timeout: Input should be a finite number"]


def test_plan_with_a_bad_timeout_still_reports_its_unknown_function():
    found = problems_of({"name": "p", "nodes": [{"id": "a", "fn": "no_such", "timeout": math.nan}]})
    assert [p.split(":")[0] for p in found] == ["nodes[0] ('a').timeout", "nodes[0] ('a').fn"]


@pytest.mark.parametrize("timeout", [math.nan, math.inf, True, 10 ** 400],
                         ids=["nan", "inf", "bool", "int-beyond-float"])
def test_decorator_timeout_that_is_not_a_positive_finite_number_is_located(timeout: Any):
    g = Graph("g")
    g.node(timeout=timeout)(noop)
    found = compile_problems(g)
    assert len(found) == 1
    assert found[0].startswith("node 'noop' (") and " timeout: timeout must be a positive number" in found[0]


def test_decorator_accepts_a_positive_int_or_float_timeout():
    g = Graph("g")
    g.add_node("a", noop, timeout=5)
    g.add_node("b", noop, timeout=0.5)
    compiled = g.compile()
    assert compiled.nodes["a"].timeout == 5 and compiled.nodes["b"].timeout == 0.5


# --- retry policies ------------------------------------------------------------------------

def test_every_bad_retry_field_of_a_decorator_node_is_reported_at_once():
    g = Graph("g")
    g.add_node("a", noop, retry=RetryPolicy(max_attempts=True, initial_interval=math.nan,
                                            backoff=math.inf, max_interval=-1.0))
    found = compile_problems(g)
    fields = [p.split(": ")[0].rsplit(" ", 1)[1] for p in found]
    assert fields == ["retry.max_attempts", "retry.initial_interval", "retry.backoff", "retry.max_interval"]


@pytest.mark.parametrize("attempts", [0, -2, 2.5, math.nan])
def test_decorator_retry_max_attempts_must_be_a_positive_int(attempts: Any):
    g = Graph("g", retry=RetryPolicy(max_attempts=attempts))
    g.add_node("a", noop)
    found = compile_problems(g)
    assert len(found) == 1 and "retry.max_attempts: must be a whole number >= 1" in found[0]


def test_every_bad_retry_field_of_a_plan_node_is_reported_at_once():
    retry = {"max_attempts": True, "initial_interval": math.nan, "backoff": math.inf, "max_interval": -1}
    found = problems_of(plan_with(retry=retry))
    assert [p.split(": ")[0] for p in found] == [
        "nodes[0] ('a').retry.max_attempts", "nodes[0] ('a').retry.initial_interval",
        "nodes[0] ('a').retry.backoff", "nodes[0] ('a').retry.max_interval"]


def test_plan_retry_with_valid_numbers_still_compiles():
    graph = compile_plan(plan_with(timeout=2, retry={"max_attempts": 4, "initial_interval": 0, "backoff": 1.5}))
    retry = graph.nodes["a"].retry
    assert (retry.max_attempts, retry.initial_interval, retry.backoff) == (4, 0.0, 1.5)
    assert graph.nodes["a"].timeout == 2.0


# --- deeply nested plans -------------------------------------------------------------------

def test_plan_dict_nested_far_too_deep_is_a_graph_error():
    plan: dict[str, Any] = {}
    for _ in range(DEEP):
        plan = {"name": plan}
    found = problems_of(plan)
    assert found == ["name.name.name.name: nested more than 100 levels deep"]


def test_plan_args_nested_far_too_deep_are_located():
    found = problems_of(plan_with(args={"x": nested(DEEP)}))
    assert found == ["nodes[0] ('a').args.x: nested more than 100 levels deep"]


def test_plan_that_contains_itself_is_a_graph_error():
    plan: dict[str, Any] = plan_with()
    plan["nodes"][0]["args"] = {"me": plan}
    found = problems_of(plan)
    assert len(found) == 1 and found[0].endswith("nested more than 100 levels deep")


def test_decorator_args_nested_far_too_deep_are_located():
    def takes(state: Any, x: Any) -> None:
        return None

    g = Graph("g")
    g.add_node("a", takes, args={"x": nested(DEEP)})
    found = compile_problems(g)
    assert len(found) == 1 and found[0].endswith(" args: nested more than 100 levels deep")


# --- plan files ----------------------------------------------------------------------------

def test_plan_file_that_is_not_utf8_names_the_file(tmp_path: Path):
    path = tmp_path / "plan.json"
    path.write_bytes(b'{"name": "p\xff"}')
    with pytest.raises(InvalidRequest) as e:
        resolve_ref(str(path))
    assert str(e.value) == f"cannot read plan {path}: not UTF-8 text (byte 0xff at offset 11)"


def test_plan_file_nested_far_too_deep_names_the_file(tmp_path: Path):
    path = tmp_path / "plan.json"
    path.write_text("[" * DEEP + "]" * DEEP)
    with pytest.raises(GraphError) as e:
        resolve_ref(str(path))
    assert [str(p) for p in e.value.problems] == [
        f"{path}: JSON nested too deeply (a plan may nest at most 100 levels)"]


def test_plan_file_with_an_integer_over_the_digit_limit_names_the_file(tmp_path: Path):
    limit = sys.get_int_max_str_digits()
    path = tmp_path / "plan.json"
    path.write_text('{"name": "p", "nodes": [], "n": ' + "7" * (limit + 1) + "}")
    with pytest.raises(GraphError) as e:
        resolve_ref(str(path))
    assert [str(p) for p in e.value.problems] == [f"{path}: JSON holds an integer longer than {limit} digits"]


@pytest.mark.parametrize("content, message", [
    (b'{"name": "\xfe"}', "not UTF-8 text"),
    (b"[" * DEEP + b"]" * DEEP, "JSON nested too deeply"),
    (b'{"n": ' + b"9" * 5000 + b"}", "JSON holds an integer longer than"),
])
def test_cli_reports_an_unusable_plan_file_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      content: bytes, message: str):
    path = tmp_path / "plan.json"
    path.write_bytes(content)
    assert main(["run", str(path), "--db", str(tmp_path / "runs.db")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert str(path) in err and message in err


def test_a_plan_node_with_an_unknown_key_still_has_its_other_fields_checked():
    """An unknown key is reported, and does not hide what else is wrong with the node: a
    dependency that does not exist, a function that is not there (all in one answer)."""
    found = problems_of({"name": "p", "nodes": [
        {"id": "a", "fn": f"{__name__}:noop"},
        {"id": "b", "fn": f"{__name__}:missing", "after": ["a", "ghost"], "retries": 3},
    ]})
    assert "nodes[1] ('b').retries: Extra inputs are not permitted" in found
    assert any("ghost" in p for p in found), found
    assert any("nodes[1] ('b').fn" in p and "missing" in p for p in found), found


def test_a_plan_node_with_a_misspelt_when_is_not_also_called_an_endless_loop():
    """``whn`` may be the node's condition misspelt: the loop through it is not refused as
    exitless on top of the unknown key (the problem to fix is the key)."""
    found = problems_of({"name": "p", "nodes": [
        {"id": "model", "fn": f"{__name__}:noop", "after": ["tool"], "max_iterations": 3},
        {"id": "tool", "fn": f"{__name__}:noop", "after": ["model"], "whn": f"{__name__}:noop"},
    ]})
    assert found == ["nodes[1] ('tool').whn: Extra inputs are not permitted"]


@pytest.mark.parametrize(("plan", "expected"), [
    (plan_with(retry="x"), "nodes[0] ('a').retry: must be a JSON object, got a string"),
    ({"name": "p", "nodes": [3]}, "nodes[0]: must be a JSON object, got a number"),
    ({"name": "p", "nodes": [{"id": "b", "subgraph": {"nodes": [[]]}}]},
     "nodes[0] ('b').subgraph.nodes[0]: must be a JSON object, got an array"),
])
def test_a_plan_value_that_must_be_an_object_says_so_in_json_terms(plan: dict[str, Any], expected: str):
    found = problems_of(plan)
    assert expected in found, found
    assert not any("_Node" in p or "_Retry" in p or "instance of" in p for p in found), found



def test_a_plan_whose_only_node_cannot_be_read_is_not_also_said_to_have_none():
    assert problems_of({"name": "p", "nodes": [3]}) == ["nodes[0]: must be a JSON object, got a number"]
    assert problems_of({"name": "p", "nodes": []}) == ["graph: a graph needs at least one node"]



@pytest.mark.parametrize("field", ["timeout", "max_iterations"])
def test_a_plan_number_given_as_a_string_is_refused_not_read_as_a_number(field: str):
    found = problems_of(plan_with(**{field: "3"}))
    assert f"nodes[0] ('a').{field}: Input should be a number, not a string" in found, found
    retry = problems_of(plan_with(retry={"max_attempts": "2"}))
    assert "nodes[0] ('a').retry.max_attempts: Input should be a number, not a string" in retry, retry


@pytest.mark.parametrize("retry_on, said", [
    (["transiant"], "retry.retry_on: must be error classes (one of: transient, "),
    ("transiant", "got 'transiant'"),
    (3, "retry.retry_on: must be a set of error classes"),
    ({ErrorClass.TRANSIENT, 3}, "got 3"),
])
def test_a_retry_on_that_names_no_error_class_is_refused(retry_on: Any, said: str):
    """A typo would silently never retry."""
    g = Graph("g")
    g.add_node("a", noop, retry=RetryPolicy(max_attempts=3, retry_on=retry_on))
    found = compile_problems(g)
    assert len(found) == 1 and said in found[0], found


@pytest.mark.parametrize("retry_on", ["transient", ["transient", ErrorClass.INTERNAL]])
def test_a_retry_on_naming_error_classes_compiles_unchanged(retry_on: Any):
    """A graph that ran before keeps its version: its paused runs go on with it."""
    g = Graph("g")
    g.add_node("a", noop, retry=RetryPolicy(backoff=0.5, retry_on=retry_on))
    assert g.compile().nodes["a"].retry.retry_on == retry_on
