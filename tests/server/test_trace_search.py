"""The trace panel's search finds what its Data column shows, a node's writes included
("which node wrote this?" is the usual question)."""

from __future__ import annotations

import re
from typing import Any

from conftest import Seeded
from local_client import TestClient

from runtime.core.records import EventType


def rows(html: str) -> list[int]:
    return [int(s) for s in re.findall(r'<tr id="ev-(\d+)">', html)]


def test_searching_the_trace_for_a_written_value_finds_the_node_that_wrote_it(
        shared: Seeded, reader: TestClient[Any]) -> None:
    run_id = shared.mapped
    wrote = [e for e in shared.rt.store.events(run_id, 0)
             if e.type == EventType.NODE_SUCCEED and e.node == "work[2]"]
    assert len(wrote) == 1
    html = reader.get(f"/runs/{run_id}/panels/events", params={"eq": '"results": [4]'}).text
    assert rows(html) == [wrote[0].seq]
    assert "work[2]" in html

