"""The effects a mocked fork from a checkpoint can be served from recordings, on every
store: the source lineage's served outcomes, as a fork made there is served them."""

from __future__ import annotations

from runtime import RunKind, RunStatus, Runtime
from runtime.travel.branches import mockable_effects
from shop import shop

EFFECTS = ("audit.log", "mail.send", "payments.charge")


async def failed_then_continued(rt: Runtime) -> tuple[str, str]:
    """A run that failed after its charge (its audit FAILED), and the continuation that
    finished it (recording the audit and the email)."""
    failing = [True]
    run = await rt.start(shop(failing), {})
    assert run.status == RunStatus.FAILED
    failing[0] = False
    cont = await rt.resume(run.id)
    assert cont.status == RunStatus.SUCCEEDED and cont.kind == RunKind.CONTINUATION
    return run.id, cont.id


async def served_from_recordings(rt: Runtime, checkpoint_id: str) -> list[str]:
    """What a mocked fork from the checkpoint is served from recordings: with a mock for
    every effect it never stops, and each entry says where its result came from."""
    branch = await rt.fork(checkpoint_id, mocks={name: "mocked" for name in EFFECTS})
    assert branch.status == RunStatus.SUCCEEDED
    return sorted({e.name for e in rt.store.journal([branch.id]) if (e.source or "").startswith("run:")})


async def test_a_continuations_checkpoint_offers_what_the_run_it_continues_recorded(rt: Runtime):
    _, cont = await failed_then_continued(rt)
    first = (await rt.history(cont))[0].id
    assert {e.name for e in rt.store.journal([cont])} == {"audit.log", "mail.send"}   # the charge was served
    assert mockable_effects(rt.store, first) == list(EFFECTS)
    assert await served_from_recordings(rt, first) == list(EFFECTS)


async def test_what_a_continuation_recorded_or_an_effect_that_failed_is_not_offered(rt: Runtime):
    run, _ = await failed_then_continued(rt)
    first = (await rt.history(run))[0].id
    assert mockable_effects(rt.store, first) == ["payments.charge"]
    assert await served_from_recordings(rt, first) == ["payments.charge"]


async def test_a_patched_forks_first_checkpoint_offers_what_its_base_offers(rt: Runtime):
    run, _ = await failed_then_continued(rt)
    base = (await rt.history(run))[0].id
    patched = await rt.fork(base, {"order": 2}, mocks={name: "mocked" for name in EFFECTS})
    before, after_patch = (c.id for c in (await rt.history(patched.id))[:2])
    # branching before the patch is branching where the fork branched: its mocks are not served
    assert mockable_effects(rt.store, before) == ["payments.charge"]
    assert await served_from_recordings(rt, before) == ["payments.charge"]
    assert mockable_effects(rt.store, after_patch) == list(EFFECTS)
    assert await served_from_recordings(rt, after_patch) == list(EFFECTS)
