"""Exact refusals of the request model for long inputs, and the per-workload method table.

A refusal quotes what it refuses only as a short excerpt (40 characters of an
overflowing number, 60 of a workload name or decision id), so a hostile body cannot
grow the error; and a workload calibrates exactly the orderings methods fitted for
it. In process through `request_model.parse_decide`.
"""

from __future__ import annotations

import json

import pytest

from semif_serve.decisions import request_model
from semif_serve.errors import ApiError
from tests.request_bodies import ROW

WORKLOAD = "w" * 70
LIMITS = request_model.Limits(5, frozenset({WORKLOAD}), {WORKLOAD: frozenset({"none", "all"})})


def refusal(body: bytes) -> str:
    with pytest.raises(ApiError) as refused:
        request_model.parse_decide(body, LIMITS)
    return refused.value.message


def test_an_overflowing_number_is_quoted_to_40_characters() -> None:
    body = json.dumps(ROW).replace('"printer on fire"', "1" + "0" * 60 + "e400").encode()
    assert refusal(body) == "body is not valid JSON: number 1" + "0" * 39 + "… overflows a double"


def test_a_method_without_a_temperature_quotes_workload_and_id_to_60_characters() -> None:
    body = json.dumps(
        {**ROW, "id": "i" * 70, "workload": WORKLOAD, "orderings": "rotations"}
    ).encode()
    assert refusal(body) == (
        f"workload {'w' * 60 + '…'!r} has no temperature for method 'rotations' "
        f"(decision {'i' * 60 + '…'!r}); it has: all, none"
    )


@pytest.mark.parametrize("orderings", ["none", "all"])
def test_each_method_fitted_for_the_workload_is_accepted(orderings: str) -> None:
    body = json.dumps({**ROW, "workload": WORKLOAD, "orderings": orderings}).encode()
    request = request_model.parse_decide(body, LIMITS)
    assert request.workload == WORKLOAD and request.decisions[0].method == orderings


def test_a_missing_prior_is_found_past_a_first_decision_that_needs_none_and_quoted_to_60() -> None:
    """The prior check goes on past a decision that needs no prior, quotes the workload and the id
    to 60 characters, and lists every option count the workload has a prior for."""
    limits = request_model.Limits(
        5, frozenset({WORKLOAD}), {WORKLOAD: frozenset({"none"})}, {WORKLOAD: frozenset({2, 4})}
    )
    three = [{"id": f"o{i}", "description": f"option {i}"} for i in range(3)]
    body = json.dumps(
        {
            "state": "s",
            "workload": WORKLOAD,
            "decisions": [
                {"id": "first", "question": "Q?", "options": ROW["options"]},
                {"id": "i" * 70, "question": "Q?", "options": three, "orderings": "prior"},
            ],
        }
    ).encode()
    with pytest.raises(ApiError) as refused:
        request_model.parse_shared(body, limits)
    assert refused.value.message == (
        f"workload {'w' * 60 + '…'!r} has no prior for 3 options (decision {'i' * 60 + '…'!r}); "
        "it has priors for: 2, 4"
    )
