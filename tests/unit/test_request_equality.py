"""An effect's request is compared as JSON, where ``true`` is not ``1``: by a replay's report
(the diff already said so) and by a mocked branch deciding whether the recorded result
still answers the request it makes."""

from __future__ import annotations

from pydantic import BaseModel

from runtime import Graph, InterruptKind, NodeContext, Runtime, RunStatus


class Job(BaseModel):
    dry: int = 1
    sent: str = ""


def mailer(as_bool: bool, calls: list[object]) -> Graph:
    g = Graph("mailer", state=Job)

    @g.node()
    async def send(state: Job, ctx: NodeContext) -> dict:
        flag: object = bool(state.dry) if as_bool else state.dry
        def deliver() -> str:
            calls.append(flag)
            return "sent"
        return {"sent": await ctx.effect("mail.send", deliver, request={"dry_run": flag})}

    return g


async def test_a_replay_reports_a_request_that_turned_1_into_true_as_changed(rt: Runtime) -> None:
    calls: list[object] = []
    run = await rt.start(mailer(False, calls), {})
    report = await rt.replay(run.id, graph=mailer(True, calls))
    [effect] = report.node("send").effects
    assert (effect.verdict, effect.recorded_request, effect.request) == ("changed", {"dry_run": 1}, {"dry_run": True})
    assert [(c.dotted(), c.old, c.new) for c in effect.changes] == [("dry_run", 1, True)]
    assert not report.same and calls == [1]


class Flagged(BaseModel):
    dry: bool | int = 1
    sent: str = ""


async def test_a_mocked_fork_whose_request_turned_1_into_true_asks_instead_of_serving_the_old_result(
        rt: Runtime) -> None:
    calls: list[object] = []
    g = Graph("flagged", state=Flagged)

    @g.node()
    async def send(state: Flagged, ctx: NodeContext) -> dict:
        def deliver() -> str:
            calls.append(state.dry)
            return "sent"
        return {"sent": await ctx.effect("mail.send", deliver, request={"dry_run": state.dry})}

    run = await rt.start(g, {})
    first = (await rt.history(run.id))[0]
    same = await rt.fork(first.id, patch={"dry": 1})   # the same request: the recorded result serves it
    assert same.status == RunStatus.SUCCEEDED
    changed = await rt.fork(first.id, patch={"dry": True})
    assert changed.status == RunStatus.INTERRUPTED
    [question] = await rt.interrupts(changed.id)
    assert question.kind == InterruptKind.UNRECORDED
    assert question.payload["value"]["recorded_request"] == {"dry_run": 1}
    assert calls == [1]   # nothing ran for real in either branch
