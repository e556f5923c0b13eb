"""The JSON API's request bodies: what each action accepts, with the descriptions the
OpenAPI document shows. Strict, and closed to unknown fields: a wrong type or an unknown
field is a 422 naming it before any action runs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Limits(Body):
    """Limits a resumed or forked run gets instead of the ones it inherits."""

    deadline: float | None = Field(None, description="seconds the run may take from now")
    max_steps: int | None = Field(None, description="node attempts the run (with its lineage) may start")
    max_tokens: int | None = Field(None, description="model tokens the run (with its lineage) may use")
    max_cost: float | None = Field(None, description="cost the run (with its lineage) may spend")

    def limits(self) -> dict[str, Any]:
        return {"deadline": self.deadline, "max_steps": self.max_steps, "max_tokens": self.max_tokens,
                "max_cost": self.max_cost}


class ForkBody(_Limits):
    patch: dict[str, Any] | None = Field(None, description="state fields to change at the checkpoint")
    effects: Literal["mock", "live"] = Field("mock", description="serve effects from the journal, or run them")
    mocks: dict[str, Any] | None = Field(None, description="{effect name: result} for effects with no record")


class ReplayBody(Body):
    version: str | None = Field(None, description="a registered version of the run's graph (default: its own)")
    mocks: dict[str, Any] | None = Field(None, description="{effect name: result} for effects with no record")


class CancelBody(Body):
    reason: str = Field("", max_length=500, description="why, recorded with the cancellation")


class CompensateBody(Body):
    retry_in_doubt: bool = Field(False, description="call again compensations whose outcome was never recorded")


class AnswerBody(Body):
    answer: Any = Field(description="the answer (checked against the question's response model, if any)")


class ResumeBody(_Limits):
    answers: dict[str, Any] | None = Field(
        None, description="{interrupt id: answer} for a run waiting for answers: every one is checked "
                          "before the run moves, and the run goes on with all of them")
