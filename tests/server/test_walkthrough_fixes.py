"""What a walk through the debugger found, each pinned: how a settled question's node,
an answer's spaces, a cancel's reason, a pasted search and a form's button are shown."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from conftest import Seeded
from local_client import TestClient

Client = TestClient[Any]


def test_an_answered_questions_page_shows_its_node_as_it_is_now(seeded: Seeded, client: Client) -> None:
    [q] = asyncio.run(seeded.rt.interrupts(seeded.interrupted))
    asking = client.get(f"/interrupts/{q.id}").text
    assert re.search(r"<dt>Node</dt><dd>.*?interrupted", asking)
    asyncio.run(seeded.rt.resume(seeded.interrupted, {"approve": True, "note": "  indented"}))
    answered = client.get(f"/interrupts/{q.id}").text
    node = re.search(r"<dt>Node</dt><dd>(.*?)</dd>", answered, re.S)
    assert node and "succeeded" in node.group(1) and "interrupted" not in node.group(1)
    # the answer as recorded, spaces kept
    run_page = client.get(f"/runs/{seeded.interrupted}").text
    assert re.search(r'<code class="keep-space">[^<]*&#34;  indented&#34;', run_page)


def test_a_cancel_reason_is_not_shown_as_an_error(seeded: Seeded, client: Client) -> None:
    asyncio.run(seeded.rt.cancel(seeded.interrupted, "not today"))
    page = client.get(f"/runs/{seeded.interrupted}").text
    assert "<dt>Cancelled</dt><dd>not today</dd>" in page and "<dt>Error</dt>" not in page
    failed = client.get(f"/runs/{seeded.failed}").text
    assert "<dt>Error</dt>" in failed


def test_a_pasted_search_finds_its_run(seeded: Seeded, client: Client) -> None:
    page = client.get("/runs", params={"q": f"  {seeded.failed} \n", "graph": " api_failing "}).text
    assert f'href="/runs/{seeded.failed}"' in page and "No runs match" not in page


def test_a_forms_button_is_disabled_while_its_request_is_out(seeded: Seeded, client: Client) -> None:
    [q] = asyncio.run(seeded.rt.interrupts(seeded.interrupted))
    form = re.search(r"<form [^>]*answer-form[^>]*>", client.get(f"/interrupts/{q.id}").text)
    assert form and 'hx-disabled-elt="find button"' in form.group(0)
    for run_id, action in ((seeded.failed, "resume"), (seeded.succeeded, "compensate")):
        tag = re.search(rf'<form [^>]*action="/runs/{run_id}/{action}"[^>]*>', client.get(f"/runs/{run_id}").text)
        assert tag and 'hx-disabled-elt="find button"' in tag.group(0), action


def test_compensate_is_offered_only_where_there_is_something_to_undo(seeded: Seeded, client: Client) -> None:
    def offered(run_id: str) -> bool:
        return f'action="/runs/{run_id}/compensate"' in client.get(f"/runs/{run_id}").text

    assert offered(seeded.succeeded)            # a charge whose undo is a refund
    assert not offered(seeded.failed)           # no effect at all
    cp = seeded.rt.store.checkpoints(seeded.succeeded)[0].id
    fork = asyncio.run(seeded.rt.fork(cp))      # mocked: nothing reached the world
    assert fork.status.value == "succeeded" and not offered(fork.id)
    asyncio.run(seeded.rt.compensate(seeded.succeeded))
    assert not offered(seeded.succeeded)        # undone already


def test_the_waterfall_tells_a_retrys_wait_and_no_made_up_wait_for_a_first_attempt(seeded: Seeded) -> None:
    """A first attempt's wait would be counted from the run's start, its dependencies' time
    included: the bar says when it started instead; a retry says how long it waited."""
    from runtime.core.records import NodeAttempt
    from runtime.core.states import NodeStatus
    from server.web.waterfall import bars as waterfall

    run = seeded.rt.store.get_run(seeded.succeeded)
    t0 = run.created_at
    bars = waterfall([NodeAttempt(run.id, "a", 1, NodeStatus.SUCCEEDED, t0 + 0.010, t0 + 0.020),
                      NodeAttempt(run.id, "b", 1, NodeStatus.FAILED, t0 + 0.020, t0 + 0.025),
                      NodeAttempt(run.id, "b", 2, NodeStatus.SUCCEEDED, t0 + 0.045, t0 + 0.050)], run)
    assert [(b["node"], b["attempt"], b["wait_ms"]) for b in bars] == [("a", 1, None), ("b", 1, None),
                                                                     ("b", 2, pytest.approx(20.0, abs=0.01))]
    assert bars[1]["at_ms"] == pytest.approx(20.0, abs=0.01) and bars[2]["run_ms"] == pytest.approx(5.0, abs=0.01)


def test_a_patch_giving_a_field_twice_is_refused_and_forks_nothing(seeded: Seeded, client: Client) -> None:
    cp = seeded.rt.store.checkpoints(seeded.failed)[1].id
    before = len(seeded.rt.store.list_runs())
    r = client.post(f"/api/checkpoints/{cp}/fork", content=b'{"patch": {"n": 1, "n": 5}}',
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and "key 'n' appears twice" in r.json()["error"]
    assert len(seeded.rt.store.list_runs()) == before


def test_a_forks_header_links_the_checkpoint_it_branched_from(seeded: Seeded, client: Client) -> None:
    cp = seeded.rt.store.checkpoints(seeded.failed)[1]
    fork = asyncio.run(seeded.rt.fork(cp.id, {"n": 4}))
    assert f'<a class="mono" href="/checkpoints/{cp.id}">' in client.get(f"/runs/{fork.id}").text
    r = client.get(f"/checkpoints/{cp.id}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/runs/{seeded.failed}?cp={cp.seq}"
    assert client.get("/checkpoints/cp_nope", follow_redirects=False).status_code == 404
