"""A model's validation errors reach people as sentences that name the field and say
what it expects; the validator's own words (a pattern, a type) are a folded detail."""

from __future__ import annotations

import asyncio
import re
from typing import Any, Literal

import pytest
from conftest import Seeded
from local_client import TestClient
from pydantic import BaseModel, Field, ValidationError, field_validator

from server.web import form_errors, forms, wording

Client = TestClient[Any]


class Ticket(BaseModel):
    ref: str = Field(pattern=r"^[A-Z]{3}-\d+$", title="Ticket")
    seats: int = Field(ge=2)
    tags: list[str] = Field(min_length=2)
    tier: Literal["gold", "silver"] = "gold"
    note: str = ""

    @field_validator("note")
    @classmethod
    def polite(cls, v: str) -> str:
        if "!" in v:
            raise ValueError("no shouting, please")
        return v


def verdict(value: dict[str, Any]) -> dict[tuple[str | int, ...], tuple[str, str]]:
    fields = forms.build(Ticket.model_json_schema())
    with pytest.raises(ValidationError) as caught:
        Ticket.model_validate(value)
    return {e.loc: (e.message, e.detail) for e in form_errors.errors_of(caught.value, fields)}


def test_each_error_names_its_field_and_what_it_expects() -> None:
    said = verdict({"ref": "abc", "seats": 1, "tags": ["a", 3], "tier": "bronze", "note": "now!"})
    assert said[("ref",)] == ("Ticket is not in the expected format", "String should match pattern '^[A-Z]{3}-\\d+$'")
    assert said[("seats",)][0] == "Seats must be at least 2"
    assert said[("tags", 1)][0] == "Tags item 1 must be text"
    assert said[("tier",)][0] == "Tier must be one of 'gold' or 'silver'"
    # a model's own message is its author's words, kept whole and not repeated as a detail
    assert said[("note",)] == ("Note: no shouting, please", "")


def test_a_missing_field_and_a_short_list() -> None:
    said = verdict({"tags": ["one"]})
    assert said[("ref",)] == ("Ticket is required", "")
    assert said[("tags",)][0] == "Tags must have at least 2 item(s)"


def test_an_error_type_without_words_keeps_the_validators_as_detail() -> None:
    err: Any = {"type": "something_new", "loc": ("x",), "msg": "Something new went wrong", "input": 1}
    assert wording.sentence(err, "X") == ("X is not valid", "Something new went wrong")


def test_a_patch_that_does_not_fit_the_state_is_worded_on_the_fork_page(seeded: Seeded, client: Client) -> None:
    cp = seeded.rt.store.checkpoints(seeded.failed)[1].id
    url = f"/checkpoints/{cp}/fork"
    token = re.search(r'name="_csrf_token" value="([^"]+)"', client.get(url).text)
    assert token
    r = client.post(url, data={"_csrf_token": token.group(1), "action": "preview", "patch": '{"n": "two"}'},
                    headers={"HX-Request": "true"})
    assert r.status_code == 422
    message = re.search(r'<p class="error field-error" role="alert">(.*?)</p>', r.text, re.S)
    assert message and message.group(1) == "The patch does not fit the state: field &#39;n&#39; must be a whole number"
    assert "Input should be" not in message.group(1)
    detail = re.search(r'<details class="error-detail"><summary>details</summary><code>(.*?)</code>', r.text, re.S)
    assert detail and "Input should be a valid integer" in detail.group(1)
    assert asyncio.run(seeded.rt.get_run(seeded.failed)).status.value == "failed"


# ------------------------------------------------------------------ what the form itself refuses

class Search(BaseModel):
    query: str = Field(min_length=2, title="Search for")
    limit: int = Field(20, ge=1, le=100)
    ratio: float = 0.5
    order: Literal["newest", "oldest"] = "newest"
    exact: bool
    filters: dict[str, str] = {}


def refused(typed: dict[str, str]) -> dict[str, str | None]:
    """What the form itself says of each field, read from what was typed."""
    fields = forms.build(Search.model_json_schema())
    _, ok = forms.read(fields, {"f.query": "ok", "f.exact": "true", **typed})
    assert not ok
    return {f.path[-1]: f.error for f in fields if f.error}


def test_a_bound_the_form_checks_names_its_field_by_its_label() -> None:
    assert refused({"f.limit": "101"}) == {"limit": "Limit must be at most 100"}
    assert refused({"f.limit": "0"}) == {"limit": "Limit must be at least 1"}


@pytest.mark.parametrize(("typed", "said"), [
    ({"f.query": ""}, {"query": "Search for is required"}),
    ({"f.query": "a"}, {"query": "Search for must be at least 2 characters"}),
    ({"f.limit": "many"}, {"limit": "Limit must be a whole number"}),
    ({"f.ratio": "half"}, {"ratio": "Ratio must be a number"}),
    ({"f.order": "random"}, {"order": "Order must be one of: newest, oldest"}),
    ({"f.exact": ""}, {"exact": "Exact is required: choose Yes or No"}),
    ({"f.filters": "[1]"}, {"filters": 'Filters must be a JSON object, like {"key": "value"}'}),
])
def test_every_error_the_form_finds_names_its_field_and_what_it_expects(typed: dict[str, str],
                                                                      said: dict[str, str]) -> None:
    assert refused(typed) == said


def test_a_nested_fields_error_names_it_by_its_own_label() -> None:
    class Address(BaseModel):
        zip_code: int

    class Order(BaseModel):
        address: Address

    fields = forms.build(Order.model_json_schema())
    _, ok = forms.read(fields, {"f.address.zip_code": "12.5"})
    assert not ok and fields[0].children[0].error == "Zip Code must be a whole number"


def test_the_json_api_words_an_error_as_json_and_a_models_own_message_as_written() -> None:
    from server.web import bodies

    with pytest.raises(ValidationError) as caught:
        Ticket.model_validate({"ref": "ABC-1", "seats": True, "tags": ["a", "b"], "note": "now!"})
    said = {e["loc"]: bodies.expects(e) for e in caught.value.errors()}
    assert said[("note",)] == "no shouting, please"
    assert bodies.expects({"type": "bool_type", "loc": ("x",), "msg": "Input should be a valid boolean",
                           "input": 1}) == "must be true or false"
