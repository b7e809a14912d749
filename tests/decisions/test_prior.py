"""The position prior's arithmetic (semif_serve/decisions/prior.py), against values worked by hand.

Worked example (two options a, b; logits given as log-probabilities, so log_softmax keeps them):
rotation 0 scores (a, b) as p = (0.8, 0.2), rotation 1 scores (b, a) as p = (0.6, 0.4).
Mean log p per position: position 0: (ln .8 + ln .6)/2 = ln √.48, position 1: ln √.08.
softmax -> prior = (√.48, √.08) / (√.48 + √.08) = (√6, 1) / (√6 + 1) = (0.710102..., 0.289898...).
Debiasing rotation 0's row: p/prior ∝ (0.8/√6, 0.2) -> (4/(4+√6), √6/(4+√6)) = (0.620204..., 0.379796...).
With T = 2 the odds 4/√6 become their square root: p(a) = 2/(2 + 6^¼) = 0.5609965...
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semif_serve.decisions.averaging import combine
from semif_serve.decisions.prior import (
    METHOD,
    MIN_DECISIONS,
    SUM_TOLERANCE,
    checked,
    debias,
    decision_prior,
    entry,
    workload_prior,
)
from semif_serve.decisions.views import as_json
from tests.reference import softmax

ROOT6 = math.sqrt(6.0)


def result(option_ids: Sequence[str], probabilities: Sequence[float]) -> dict[str, Any]:
    """A SemIf-shaped result whose logits are the log of the given probabilities."""
    return {
        "id": "q#o",
        "option_ids": list(option_ids),
        "option_logits": [math.log(p) for p in probabilities],
    }


def rotations(option_ids: Sequence[str], logit: Any) -> list[dict[str, Any]]:
    """The n cyclic rotations (shift k puts option (k + i) mod n at position i); logit(position, option)."""
    n = len(option_ids)
    rows = []
    for k in range(n):
        ids = [option_ids[(k + i) % n] for i in range(n)]
        rows.append(
            {
                "id": f"q#o{k}",
                "option_ids": ids,
                "option_logits": [logit(i, oid) for i, oid in enumerate(ids)],
            }
        )
    return rows


WORKED = [result("ab", [0.8, 0.2]), result("ba", [0.6, 0.4])]


def debiased(scored: dict[str, Any], prior: Sequence[float]) -> list[float]:
    """What the server serves for one row under orderings "prior": `combined.probabilities` from
    averaging.combine, the row's options in the order it was scored."""
    row = {"id": "q", "options": [{"id": option_id} for option_id in scored["option_ids"]]}
    native = {**scored, "probabilities": softmax(scored["option_logits"])}
    return as_json(combine(row, METHOD, [native], prior=prior))["combined"]["probabilities"]


def test_decision_prior_matches_the_worked_example() -> None:
    assert decision_prior(WORKED) == pytest.approx(
        [ROOT6 / (ROOT6 + 1), 1 / (ROOT6 + 1)], abs=1e-12
    )
    assert decision_prior(WORKED) == pytest.approx([0.7101020514, 0.2898979486], abs=1e-10)


def test_decision_prior_ignores_each_rows_constant() -> None:
    """Logits shifted by any constant per row give the same prior (the log-softmax removes it)."""
    shifted = [
        {**r, "option_logits": [v + shift for v in r["option_logits"]]}
        for r, shift in zip(WORKED, (7.0, -300.0))
    ]
    assert decision_prior(shifted) == pytest.approx(decision_prior(WORKED), abs=1e-12)


def test_debiased_matches_the_worked_example() -> None:
    prior = decision_prior(WORKED)
    assert debiased(WORKED[0], prior) == pytest.approx(
        [4 / (4 + ROOT6), ROOT6 / (4 + ROOT6)], abs=1e-12
    )
    assert debiased(WORKED[0], prior) == pytest.approx([0.6202041029, 0.3797958971], abs=1e-10)


def test_calibrated_is_the_tempered_softmax_of_the_debiased_scores() -> None:
    prior = decision_prior(WORKED)
    scores = debias(WORKED[0]["option_logits"], prior)
    assert softmax(scores, temperature=2.0)[0] == pytest.approx(2 / (2 + 6**0.25), abs=1e-12)
    assert softmax(scores, temperature=2.0)[0] == pytest.approx(0.5609965, abs=1e-7)


def test_debias_subtracts_the_log_prior_position_by_position() -> None:
    assert debias([1.0, 2.0, 3.0], [0.5, 0.25, 0.25]) == pytest.approx(
        [1.0 + math.log(2), 2.0 + math.log(4), 3.0 + math.log(4)], abs=1e-12
    )
    with pytest.raises(ValueError, match="a prior over 2 positions cannot debias 3 options"):
        debias([1.0, 2.0, 3.0], [0.5, 0.5])


PRIOR = [0.5, 0.3, 0.2]
CONTENT = {"a": 0.2, "b": 0.3, "c": 0.5}


def exact_model(position: int, option: str) -> float:
    """A model whose position bias is exactly PriDe's: log p(i) = log prior(i) + log q(option) + const."""
    return math.log(PRIOR[position]) + math.log(CONTENT[option]) + 1.25


def test_an_exact_prior_is_recovered_and_divided_out() -> None:
    rows = rotations("abc", exact_model)
    prior = decision_prior(rows)
    assert prior == pytest.approx(PRIOR, abs=1e-12)
    for row in rows:  # every rotation, debiased, gives the content preference of its own options
        assert debiased(row, prior) == pytest.approx(
            [CONTENT[o] for o in row["option_ids"]], abs=1e-12
        )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-4, 4), min_size=3, max_size=3),
    st.lists(st.floats(-4, 4), min_size=3, max_size=3),
)
def test_any_additive_position_bias_is_recovered(bias: list[float], content: list[float]) -> None:
    rows = rotations("abc", lambda i, oid: bias[i] + content["abc".index(oid)])
    assert decision_prior(rows) == pytest.approx(softmax(bias), abs=1e-9)


def test_every_permutation_is_balanced_too() -> None:
    import itertools

    rows = [
        {
            "id": "x",
            "option_ids": list(p),
            "option_logits": [exact_model(i, o) for i, o in enumerate(p)],
        }
        for p in itertools.permutations("abc")
    ]
    assert decision_prior(rows) == pytest.approx(PRIOR, abs=1e-12)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([], "^a decision prior needs the results of its orderings, got none$"),
        ([result("a", [1.0])], "at least 2 distinct options"),
        ([result("aa", [0.5, 0.5])], "at least 2 distinct options"),
        (
            [result("ab", [0.8, 0.2]), result("ac", [0.6, 0.4])],
            r"^result 'q#o' does not score exactly the options \['a', 'b'\]$",
        ),
        (
            [
                result("ab", [0.8, 0.2]),
                {"id": "q", "option_ids": ["b", "a"], "option_logits": [0.0]},
            ],
            r"^result 'q' does not score exactly the options \['a', 'b'\]$",
        ),
        (
            [result("ab", [0.8, 0.2])],
            "1 orderings of 2 options cannot put each option in each position equally often",
        ),
        (
            [result("ab", [0.8, 0.2]), result("ab", [0.6, 0.4])],
            "^position 0 does not hold each option equally often: score the decision under its n cyclic rotations$",
        ),
        (
            [
                {"id": "q", "option_ids": ["a", "b"], "option_logits": [math.nan, 0.0]},
                result("ba", [0.6, 0.4]),
            ],
            "^result 'q''s option_logits holds a value that is not a finite number$",
        ),
        (
            [
                {"id": "q", "option_ids": ["a", "b"], "option_logits": [True, 0.0]},
                result("ba", [0.6, 0.4]),
            ],
            "^result 'q''s option_logits holds a value that is not a finite number$",
        ),
    ],
)
def test_decision_prior_refuses_what_does_not_cancel_the_content(
    rows: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        decision_prior(rows)


def test_workload_prior_is_the_mean_of_its_decisions() -> None:
    assert workload_prior([[0.6, 0.4], [0.8, 0.2]]) == pytest.approx([0.7, 0.3], abs=1e-15)
    assert workload_prior([[0.5, 0.3, 0.2]]) == [0.5, 0.3, 0.2]
    with pytest.raises(ValueError, match="^a workload prior needs at least one decision prior$"):
        workload_prior([])
    with pytest.raises(ValueError, match=r"different option counts cannot be averaged: \[2, 3\]"):
        workload_prior([[0.5, 0.5], [0.2, 0.3, 0.5]])


def test_entry_is_the_files_shape_and_needs_enough_decisions() -> None:
    priors = [[0.6, 0.4]] * (MIN_DECISIONS - 1) + [[0.8, 0.2]]
    fitted = entry(priors)
    assert fitted == {"prior": pytest.approx([0.625, 0.375], abs=1e-15), "decisions": MIN_DECISIONS}
    assert checked(fitted["prior"], 2) == pytest.approx(
        (0.625, 0.375)
    )  # what the fit writes, startup reads
    with pytest.raises(
        ValueError,
        match=f"^{MIN_DECISIONS - 1} decision\\(s\\); a prior needs at least {MIN_DECISIONS}$",
    ):
        entry(priors[1:])


def test_checked_accepts_a_prior_that_sums_to_one_within_the_tolerance() -> None:
    assert checked([0.5, 0.5 + SUM_TOLERANCE / 2], 2) == (0.5, 0.5 + SUM_TOLERANCE / 2)
    assert checked([1e-300, 1.0], 2) == (1e-300, 1.0)  # tiny but positive: log stays finite
    assert checked([1, 1e-12], 2) == (1.0, 1e-12)  # a JSON integer is a number too


@pytest.mark.parametrize(
    ("prior", "n", "message"),
    [
        ({"0": 1.0}, 2, "must be an array of numbers"),
        ([0.5, "0.5"], 2, "must be an array of numbers"),
        ([True, 0.0], 2, "must be an array of numbers"),
        ([0.5, 0.5], 3, "^prior has 2 entries; 3 options need 3$"),
        ([0.2, 0.3, 0.25, 0.25], 3, "^prior has 4 entries; 3 options need 3$"),
        (
            [1.5, -0.5],
            2,
            r"^prior holds a value <= 0 \(-0.5\); every position needs a positive prior$",
        ),
        ([1.0, 0.0], 2, r"^prior holds a value <= 0 \(0.0\)"),
        ([math.nan, 0.5], 2, "^prior holds a value that is not a finite number$"),
        ([math.inf, 0.5], 2, "^prior holds a value that is not a finite number$"),
        (
            [10**400, 0.5],
            2,
            "^prior holds a value that is not a finite number$",
        ),  # past float: OverflowError
        ([0.5, 0.5 + 2 * SUM_TOLERANCE], 2, r"^prior sums to 1.000002, not 1 within 1e-06$"),
        ([0.4, 0.4], 2, r"^prior sums to 0.8, not 1 within 1e-06$"),
    ],
)
def test_checked_refuses_a_prior_that_cannot_be_divided_out(
    prior: Any, n: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        checked(prior, n)
