"""An answer that does not fit its response model names the keys the model has no field
of, with the field most likely meant: a misspelt key is why a field is "missing". What is
accepted does not change."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, Field

from runtime import Graph, InvalidAnswer, NodeContext, RunStatus, Runtime


class S(BaseModel):
    value: str = ""


class Approval(BaseModel):
    approve: bool
    note: str = ""


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")
    approve: bool


class Aliased(BaseModel):
    approve: bool = Field(alias="ok")


def asking(model: type[BaseModel]) -> Graph:
    g = Graph("asks", state=S)

    @g.node()
    async def ask(state: S, ctx: NodeContext) -> dict[str, str]:
        answer = await ctx.interrupt({"q": "approve?"}, response=model)
        return {"value": str(answer.approve)}

    return g


async def test_a_misspelt_key_is_named_with_the_field_meant(rt: Runtime) -> None:
    run = await rt.start(asking(Approval), {})
    with pytest.raises(InvalidAnswer) as refused:
        await rt.resume(run.id, {"aprove": True})
    assert str(refused.value).endswith("is invalid: approve: Field required; unknown field 'aprove' (did you "
                                       "mean 'approve'?) (Approval has: approve, note)")
    assert (await rt.get_run(run.id)).status == RunStatus.INTERRUPTED


async def test_an_unknown_key_far_from_any_field_is_named_alone(rt: Runtime) -> None:
    run = await rt.start(asking(Approval), {})
    with pytest.raises(InvalidAnswer) as refused:
        await rt.resume(run.id, {"zzz": 1})
    assert str(refused.value).endswith("approve: Field required; unknown field 'zzz' (Approval has: approve, note)")


async def test_an_answer_that_fits_is_accepted_with_extra_keys_as_before(rt: Runtime) -> None:
    run = await rt.start(asking(Approval), {})
    assert (await rt.resume(run.id, {"approve": True, "extra": 1})).status == RunStatus.SUCCEEDED


async def test_a_model_that_takes_extra_fields_has_no_unknown_ones(rt: Runtime) -> None:
    run = await rt.start(asking(Open), {})
    with pytest.raises(InvalidAnswer) as refused:
        await rt.resume(run.id, {"aprove": True})
    assert str(refused.value).endswith("is invalid: approve: Field required")


async def test_an_alias_is_a_known_field(rt: Runtime) -> None:
    run = await rt.start(asking(Aliased), {})
    with pytest.raises(InvalidAnswer) as refused:
        await rt.resume(run.id, {"ok": "perhaps", "okk": 1})
    assert str(refused.value).endswith("unknown field 'okk' (did you mean 'ok'?) (Aliased has: ok)")
