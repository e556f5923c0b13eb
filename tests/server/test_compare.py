""""Compare with…" opens on something to read: from the run page, the diff from the
checkpoint the selected one follows; with only one side chosen, a prompt that says what
to do and links the suggested comparison, never an empty diff."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from conftest import Seeded
from local_client import TestClient

Client = TestClient[Any]


def compare_link(html: str) -> str:
    found = re.search(r'<a href="(/diff\?[^"]+)">Compare with…</a>', html)
    assert found, "no Compare with… link"
    return found.group(1).replace("&amp;", "&")


def test_compare_from_a_checkpoint_opens_on_what_changed_there(shared: Seeded, reader: Client) -> None:
    cps = shared.rt.store.checkpoints(shared.succeeded)
    link = compare_link(reader.get(f"/runs/{shared.succeeded}?cp=1").text)
    assert link == f"/diff?a={cps[0].id}&b={cps[1].id}"
    page = reader.get(link).text
    assert f"1 change(s) from #0 of {shared.succeeded} to #1 of {shared.succeeded}" in page
    assert '<tr class="op-changed"><td class="mono">amount</td>' in page
    assert 'id="compare-prompt"' not in page


def test_compare_from_a_forks_first_checkpoint_starts_at_its_base(seeded: Seeded, client: Client) -> None:
    cps = seeded.rt.store.checkpoints(seeded.failed)
    fork = asyncio.run(seeded.rt.fork(cps[1].id, patch={"n": 2}))
    first, patched = seeded.rt.store.checkpoints(fork.id)[:2]
    assert compare_link(client.get(f"/runs/{fork.id}?cp=0").text) == f"/diff?a={cps[1].id}&b={first.id}"
    # the patch's checkpoint: the diff is the person's edit
    page = client.get(compare_link(client.get(f"/runs/{fork.id}?cp=1").text)).text
    assert f"1 change(s) from #0 of {fork.id} to #1 of {fork.id}" in page and patched.source == "patch"


def test_a_first_checkpoint_asks_what_to_compare_it_with(shared: Seeded, reader: Client) -> None:
    cps = shared.rt.store.checkpoints(shared.succeeded)
    link = compare_link(reader.get(f"/runs/{shared.succeeded}?cp=0").text)
    assert link == f"/diff?a={cps[0].id}"
    page = reader.get(link).text
    assert '<table class="diff">' not in page
    prompt = re.search(r'<p class="notice" id="compare-prompt">(.*?)</p>', page, re.S)
    assert prompt and "Nothing is compared yet" in prompt.group(1)
    # the suggestion (the run's latest checkpoint) is one click away, and selected under To
    suggestion = f'<a href="/diff?a={cps[0].id}&amp;b={cps[-1].id}">#{cps[-1].seq}</a>'
    assert suggestion + ", the run's latest checkpoint" in prompt.group(1)
    assert f'<option value="{cps[-1].id}" selected>' in page


def test_the_choices_say_what_happened_at_checkpoints_that_folded_nothing(shared: Seeded, reader: Client) -> None:
    """As the timeline does: #2 of the failed run folded nothing, and its node failed there."""
    cps = shared.rt.store.checkpoints(shared.failed)
    page = reader.get(f"/diff?a={cps[0].id}").text
    assert re.search(rf'<option value="{cps[2].id}"[^>]*>#2 step failed: second</option>', page)
    assert re.search(rf'<option value="{cps[1].id}"[^>]*>#1 step first</option>', page)
