"""The fork form names the recorded effects a mocked fork from its checkpoint can be
served: those of the source lineage (a continuation's checkpoint offers what the run it
continues recorded), never what a later continuation recorded or an effect that failed."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from local_client import TestClient
from runtime import RunKind, RunStatus, Runtime, SqlStore
from shop import shop

HINT = re.compile(r'<p class="help">Recorded effects a mocked fork can serve: (.*?)</p>')


@dataclass
class Continued:
    rt: Runtime
    failed: str         # failed after its charge, its audit FAILED
    continuation: str   # finished it: the charge served, the audit and the email recorded


@pytest.fixture
def continued(tmp_path: Path) -> Iterator[Continued]:
    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'h.db'}"), max_concurrency=4)
    failing = [True]

    async def seed() -> Continued:
        run = await rt.start(shop(failing, "fork_hint_shop"), {})
        assert run.status == RunStatus.FAILED
        failing[0] = False
        cont = await rt.resume(run.id)
        assert cont.status == RunStatus.SUCCEEDED and cont.kind == RunKind.CONTINUATION
        return Continued(rt, run.id, cont.id)

    yield asyncio.run(seed())
    rt.close()


@pytest.fixture
def client(continued: Continued, make_app: Callable[..., Litestar]) -> Iterator[TestClient[Any]]:
    with TestClient(make_app(continued.rt)) as c:
        yield c


def hint(client: TestClient[Any], checkpoint_id: str) -> str:
    r = client.get(f"/checkpoints/{checkpoint_id}/fork")
    assert r.status_code == 200, r.text
    found = HINT.search(r.text)
    assert found, "no hint about recorded effects"
    return found.group(1)


def test_a_continuations_checkpoint_offers_the_effects_of_the_run_it_continues(
        continued: Continued, client: TestClient[Any]) -> None:
    first = continued.rt.store.checkpoints(continued.continuation)[0].id
    assert hint(client, first) == "audit.log, mail.send, payments.charge"


def test_the_continued_runs_checkpoint_offers_neither_its_failed_effect_nor_the_continuations(
        continued: Continued, client: TestClient[Any]) -> None:
    first = continued.rt.store.checkpoints(continued.failed)[0].id
    assert hint(client, first) == "payments.charge"
