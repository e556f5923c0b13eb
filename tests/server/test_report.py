"""A replay's divergence report while the replay is still going on: it must not call nodes
the replay has not reached yet a divergence, and it follows the replay until it ends."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from local_client import TestClient
from waiting import wait_for

from runtime import RunStatus

if TYPE_CHECKING:
    from conftest import Seeded

Client = TestClient[Any]
HTMX = {"HX-Request": "true"}


def held_replay(seeded: Seeded, client: Client) -> str:
    """A replay that stays running: of a run whose ``charge`` waits until it is cancelled."""
    start = seeded.rt.store.find_checkpoint(seeded.succeeded, 0)
    assert start is not None
    held = client.post(f"/api/checkpoints/{start.id}/fork", json={"patch": {"hold": True}}).json()["run_id"]
    deadline = time.monotonic() + 10
    while not any(e.node == "charge" for e in seeded.rt.store.events(held)):
        assert time.monotonic() < deadline, "the held run never started charge"
        time.sleep(0.01)
    assert client.post(f"/api/runs/{held}/cancel", json={"reason": "held"}).status_code == 202
    wait_for(seeded.rt, held, [RunStatus.CANCELLED])
    replay_id: str = client.post(f"/api/runs/{held}/replay", json={}).json()["run_id"]
    deadline = time.monotonic() + 10
    while not any(e.node == "charge" for e in seeded.rt.store.events(replay_id)):
        assert time.monotonic() < deadline, "the replay never started charge"
        time.sleep(0.01)
    return replay_id


def test_the_report_of_a_replay_still_running_is_not_a_verdict(seeded: Seeded, client: Client) -> None:
    replay_id = held_replay(seeded, client)
    assert seeded.rt.store.get_run(replay_id).status == RunStatus.RUNNING
    page = client.get(f"/runs/{replay_id}/report").text
    assert "Some nodes diverged" not in page and "Every node did what the recording did" not in page
    assert "The replay is still running:" in page
    # it refreshes itself: the fragment it asks for is the report, refreshing while the replay goes on
    assert re.search(rf'<section id="report" hx-get="/runs/{replay_id}/report" hx-trigger="every 1s"', page)
    fragment = client.get(f"/runs/{replay_id}/report", headers=HTMX).text
    assert fragment.lstrip().startswith('<section id="report" hx-get=') and "<html" not in fragment

    assert client.post(f"/api/runs/{replay_id}/cancel", json={"reason": "enough"}).status_code == 202
    wait_for(seeded.rt, replay_id, [RunStatus.CANCELLED])
    ended = client.get(f"/runs/{replay_id}/report", headers=HTMX).text
    assert ended.lstrip().startswith('<section id="report">')   # nothing more to follow
    assert "still running" not in ended
    assert "Every node did what the recording did." in ended   # it was cancelled at charge, as the recording


def test_the_report_of_a_replay_paused_for_an_answer_says_it_waits(seeded: Seeded, client: Client) -> None:
    # the recording itself waits for the answer: its replay asks the same question and pauses there
    answer = client.post(f"/api/runs/{seeded.interrupted}/replay", json={})
    assert answer.status_code == 202, answer.text
    replay_id = answer.json()["run_id"]
    wait_for(seeded.rt, replay_id, [RunStatus.INTERRUPTED])
    page = client.get(f"/runs/{replay_id}/report").text
    assert "The replay is paused, waiting for an answer:" in page
    assert "Some nodes diverged" not in page and "Every node did what the recording did" not in page
    assert f'<a href="/runs/{replay_id}">it is answered</a>' in page


def test_the_report_names_the_recorded_answers_the_replay_used_again(seeded: Seeded, client: Client) -> None:
    [question] = seeded.rt.store.interrupts(seeded.interrupted)
    answered = client.post(f"/api/runs/{seeded.interrupted}/resume", json={"answers": {question.id: {"approve": True}}})
    assert answered.status_code == 202, answered.text
    done = wait_for(seeded.rt, seeded.interrupted, [RunStatus.SUCCEEDED, RunStatus.FAILED])
    replay = client.post(f"/api/runs/{done.id}/replay", json={})
    assert replay.status_code == 202, replay.text
    wait_for(seeded.rt, replay.json()["run_id"], [RunStatus.SUCCEEDED])
    page = client.get(f"/runs/{replay.json()['run_id']}/report").text
    reused = page.split('<div class="reused">', 1)[1].split("</div>", 1)[0]
    assert f'Re-used the recorded answer to <a href="/interrupts/{question.id}">{question.id}</a>' == reused
