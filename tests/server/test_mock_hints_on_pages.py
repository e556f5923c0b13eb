"""A mocked branch paused on an unrecorded effect names, on its page, each mock no effect
has called yet and the effect a misspelt one likely meant (as ``harness show`` does)."""

from __future__ import annotations

from typing import Any

from conftest import Seeded
from local_client import TestClient


async def test_a_fork_paused_by_a_misspelt_mock_says_on_its_page_which_effect_it_meant(
        seeded: Seeded, client: TestClient[Any]) -> None:
    """The moment the hint is of use: once the branch has ended, a mock can no longer be given."""
    first = (await seeded.rt.history(seeded.succeeded))[0]
    fork = await seeded.rt.fork(first.id, patch={"order_id": 8}, mocks={"payments.chrge": "rcpt-x"})
    assert fork.status.value == "interrupted"
    html = client.get(f"/runs/{fork.id}").text
    assert "mock &#39;payments.chrge&#39; was never used; did you mean &#39;payments.charge&#39;?" in html
    assert 'id="mock-hints"' not in client.get(f"/runs/{seeded.succeeded}").text
