"""Order averaging (the contract's "Order averaging"): expansion and arithmetic.

Fake SemIf results are built from the expanded rows themselves, so every check
goes through the same option-id mapping a real shared call would.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semif_serve.decisions.averaging import (
    MAX_ALL_OPTIONS,
    METHODS,
    ORDERINGS,
    combine,
    expand,
    permutations,
)
from semif_serve.decisions.views import CalibratedView, as_json
from tests.reference import softmax

LETTERS = "abcdefghijklmnop"  # 16 ids, the contract's maximum option count


def make_row(ids: Sequence[str], **extra: Any) -> dict[str, Any]:
    return {
        "id": "q1",
        "state": {"evidence": "the door is open"},
        "question": "Is the door open?",
        "options": [{"id": oid, "description": f"option {oid}"} for oid in ids],
        **extra,
    }


def fake_result(row: dict[str, Any], logits: Sequence[float]) -> dict[str, Any]:
    """A SemIf-shaped result for one expanded row: natives are softmax(logits)."""
    return {
        "id": row["id"],
        "option_ids": [option["id"] for option in row["options"]],
        "option_logits": list(logits),
        "probabilities": softmax(logits),
        "probability_status": "uncalibrated",
    }


def results_for(
    row: dict[str, Any], method: str, logit: Callable[[int, int, str], float]
) -> list[dict[str, Any]]:
    """One fake result per ordering; logit(k, position, option_id) gives each logit."""
    return [
        fake_result(expanded, [logit(k, i, o["id"]) for i, o in enumerate(expanded["options"])])
        for k, expanded in enumerate(expand(row, method))
    ]


# --- orderings and expand ---------------------------------------------------------


@pytest.mark.parametrize("n", range(2, 17))
def test_rotations_put_every_option_once_in_every_position(n: int) -> None:
    orders = permutations(n, "rotations")
    assert len(orders) == n
    assert orders[0] == tuple(range(n))
    for k, order in enumerate(orders):
        assert order == tuple((k + i) % n for i in range(n))
        assert sorted(order) == list(range(n))  # each a permutation
    for position in range(n):
        assert sorted(order[position] for order in orders) == list(range(n))


@pytest.mark.parametrize("n", range(2, 17))
def test_expand_rotations_ids_state_question_and_reordered_options(n: int) -> None:
    row = make_row(LETTERS[:n], note={"kept": True})
    before = copy.deepcopy(row)
    rows = expand(row, "rotations")
    assert [r["id"] for r in rows] == [f"q1#o{k}" for k in range(n)]
    for k, expanded in enumerate(rows):
        assert expanded["state"] == row["state"] and expanded["question"] == row["question"]
        assert expanded["note"] == {"kept": True}
        assert set(expanded) == set(row)
        assert expanded["options"] == [row["options"][(k + i) % n] for i in range(n)]
    assert rows[0]["options"] == row["options"]
    assert row == before  # the caller's row is not touched


@pytest.mark.parametrize("n", [2, 3, 4])
def test_all_gives_every_permutation_identity_first(n: int) -> None:
    orders = permutations(n, "all")
    assert len(orders) == math.factorial(n)
    assert orders[0] == tuple(range(n))
    assert len(set(orders)) == len(orders)
    assert all(sorted(order) == list(range(n)) for order in orders)
    rows = expand(make_row(LETTERS[:n]), "all")
    assert [r["id"] for r in rows] == [f"q1#o{k}" for k in range(math.factorial(n))]
    assert len({tuple(o["id"] for o in r["options"]) for r in rows}) == math.factorial(n)


def test_none_is_the_identity_alone() -> None:
    assert permutations(5, "none") == [(0, 1, 2, 3, 4)]
    assert [r["options"] for r in expand(make_row("abc"), "none")] == [make_row("abc")["options"]]


def test_refuses_an_unknown_method_and_all_above_the_limit() -> None:
    assert METHODS == ("none", "rotations", "all")
    with pytest.raises(ValueError):
        permutations(3, "shuffle")
    with pytest.raises(ValueError):
        permutations(MAX_ALL_OPTIONS + 1, "all")
    assert len(permutations(MAX_ALL_OPTIONS, "all")) == math.factorial(MAX_ALL_OPTIONS)


# --- combine: bias cancellation, agreement, spread ---------------------------------


@pytest.mark.parametrize(
    ("n", "method"), [(n, "rotations") for n in range(2, 17)] + [(n, "all") for n in (2, 3, 4)]
)
def test_an_additive_position_bias_cancels_exactly(n: int, method: str) -> None:
    rng = random.Random(n * 31 + len(method))
    ids = list(LETTERS[:n])
    rng.shuffle(ids)  # the caller's order is not alphabetical
    truth = {oid: rng.uniform(-8, 8) for oid in ids}
    bias = [rng.uniform(-5, 5) for _ in range(n)]
    row = make_row(ids)
    results = results_for(row, method, lambda k, i, oid: truth[oid] + bias[i])
    combined = as_json(combine(row, method, results))["combined"]
    expected = softmax([truth[oid] for oid in ids])
    assert combined["probabilities"] == pytest.approx(expected, abs=1e-12, rel=0)
    # The bias is real: the caller's order alone is off.
    assert max(abs(p - q) for p, q in zip(results[0]["probabilities"], expected)) > 1e-6


def hand_built() -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, list[float]]]:
    """3 rotations; orderings 0 and 1 pick "a", ordering 2 picks "b"."""
    natives = [  # per ordering, by option id
        {"a": 0.60, "b": 0.30, "c": 0.10},
        {"a": 0.50, "b": 0.40, "c": 0.10},
        {"a": 0.35, "b": 0.55, "c": 0.10},
    ]
    row = make_row("abc")
    # Logits are log-probabilities plus a per-ordering constant (softmax ignores it).
    results = results_for(row, "rotations", lambda k, i, oid: math.log(natives[k][oid]) + 5.0 * k)
    return row, results, {oid: [n[oid] for n in natives] for oid in "abc"}


def test_agreement_spread_and_probabilities_on_a_hand_built_case() -> None:
    row, results, by_option = hand_built()
    out = as_json(combine(row, "rotations", results))
    combined = out["combined"]
    # The mean of log-probabilities is the log of the geometric mean.
    geo = {oid: math.prod(values) ** (1 / 3) for oid, values in by_option.items()}
    total = sum(geo.values())
    assert combined["probabilities"] == pytest.approx([geo[o] / total for o in "abc"], abs=1e-12)
    assert combined["top"] == "a"
    assert combined["agreement"] == pytest.approx(2 / 3)
    assert combined["spread"] == {
        "a": pytest.approx([0.35, 0.60]),
        "b": pytest.approx([0.30, 0.55]),
        "c": pytest.approx([0.10, 0.10]),
    }
    assert list(combined["spread"]) == ["a", "b", "c"]
    assert combined["method"] == "rotations" and combined["orderings"] == 3


def test_combine_returns_the_result_objects_unchanged_and_the_callers_order() -> None:
    row = make_row("cab")
    results = results_for(row, "rotations", lambda k, i, oid: float("abc".index(oid)) - i)
    snapshot = copy.deepcopy(results)
    out = as_json(combine(row, "rotations", results))
    assert out["id"] == "q1"
    assert out["option_ids"] == ["c", "a", "b"]
    assert len(out["orderings"]) == 3
    assert all(got is sent for got, sent in zip(out["orderings"], results))
    assert results == snapshot  # never rewritten (INV-1)
    # softmax of the true scores c=2, a=0, b=1 in the caller's order
    assert out["combined"]["probabilities"] == pytest.approx(softmax([2.0, 0.0, 1.0]), abs=1e-12)
    assert out["combined"]["top"] == "c"


def test_logits_are_mapped_by_option_id_not_by_position() -> None:
    row, results, _ = hand_built()
    reference = as_json(combine(row, "rotations", results))["combined"]
    # The same scores listed in another order inside each result.
    scrambled = []
    for result in results:
        order = sorted(range(3), key=lambda i: result["option_ids"][i], reverse=True)  # c, b, a
        moved = {
            key: [result[key][i] for i in order]
            for key in ("option_ids", "option_logits", "probabilities")
        }
        scrambled.append({**result, **moved})
    assert scrambled[0]["option_ids"] != results[0]["option_ids"]
    again = as_json(combine(row, "rotations", scrambled))["combined"]
    assert again["probabilities"] == pytest.approx(reference["probabilities"], abs=1e-15)
    assert (again["top"], again["agreement"], again["spread"]) == (
        reference["top"],
        reference["agreement"],
        reference["spread"],
    )


@pytest.mark.parametrize("method", ["rotations", "all"])
@pytest.mark.parametrize(
    "truth", [[1e4, -1e4, 0.0], [1e4, 1e4, 1e4], [-1e4, -1e4, -1e4], [-1e4, 1e4, -1e4]]
)
def test_extreme_logits_stay_finite(method: str, truth: list[float]) -> None:
    row = make_row("abc")
    by_id = dict(zip("abc", truth))
    for bias in ([0.0, 0.0, 0.0], [1e4, -1e4, 0.0]):
        results = results_for(row, method, lambda k, i, oid: by_id[oid] + bias[i])  # noqa: B023 - used within this iteration
        probabilities = as_json(combine(row, method, results))["combined"]["probabilities"]
        assert all(math.isfinite(p) and p >= 0 for p in probabilities)
        assert math.fsum(probabilities) == pytest.approx(1.0, abs=1e-12)
        assert probabilities == pytest.approx(softmax(truth), abs=1e-12)


# --- the tie rule ------------------------------------------------------------------


def test_an_exact_tie_goes_to_the_earliest_option_in_the_callers_order() -> None:
    for ids in (["x", "y"], ["y", "x"], ["c", "b", "a"]):
        row = make_row(ids)
        out = as_json(
            combine(row, "rotations", results_for(row, "rotations", lambda k, i, oid: 0.0))
        )
        assert out["combined"]["probabilities"] == [1 / len(ids)] * len(ids)
        assert out["combined"]["top"] == ids[0]
        # Each ordering's own tie goes to the caller's first option too, never to
        # whatever sat first in that ordering: so all orderings agree.
        assert out["combined"]["agreement"] == 1.0


def test_a_tie_between_the_leaders_goes_to_the_earlier_in_the_callers_order() -> None:
    row = make_row("abc")  # b and c tie, a is below them
    truth = {"a": -1.0, "b": 2.0, "c": 2.0}
    out = as_json(
        combine(row, "rotations", results_for(row, "rotations", lambda k, i, oid: truth[oid]))
    )
    assert out["combined"]["top"] == "b"
    row = make_row("acb")
    out = as_json(
        combine(row, "rotations", results_for(row, "rotations", lambda k, i, oid: truth[oid]))
    )
    assert out["combined"]["top"] == "c"


def test_top_follows_the_combined_probability_not_the_callers_first_option() -> None:
    row = make_row("abc")
    truth = {"a": 0.0, "b": 0.5, "c": 1.0}
    out = as_json(
        combine(
            row,
            "all",
            results_for(row, "all", lambda k, i, oid: truth[oid] + (3.0 if i == 0 else 0.0)),
        )
    )
    assert out["combined"]["top"] == "c"
    # The position bias of 3 makes whichever option sits first each ordering's top.
    tops = [
        max(r["option_ids"], key=lambda o: r["probabilities"][r["option_ids"].index(o)])
        for r in out["orderings"]
    ]
    assert out["combined"]["agreement"] == pytest.approx(tops.count("c") / 6)
    assert tops.count("c") == 2


# --- refusals ------------------------------------------------------------------------


def test_combine_refuses_results_it_cannot_average() -> None:
    row = make_row("abc")
    good = results_for(row, "rotations", lambda k, i, oid: float(i))
    with pytest.raises(ValueError):
        combine(row, "rotations", good[:2])  # one ordering missing
    wrong = copy.deepcopy(good)
    wrong[1]["option_ids"] = ["a", "b", "z"]
    with pytest.raises(ValueError):
        combine(row, "rotations", wrong)
    short = copy.deepcopy(good)
    short[2]["option_logits"] = [0.0, 1.0]
    with pytest.raises(ValueError):
        combine(row, "rotations", short)
    nan = copy.deepcopy(good)
    nan[0]["option_logits"][1] = float("nan")
    with pytest.raises(ValueError):
        combine(row, "rotations", nan)
    with pytest.raises(ValueError):
        combine(make_row("aab"), "rotations", good)


def test_each_refusal_says_exactly_what_it_cannot_compute() -> None:
    row = make_row("abc")
    good = results_for(row, "rotations", lambda k, i, oid: float(i))
    wrong = copy.deepcopy(good)
    wrong[1]["option_ids"] = ["a", "b", "z"]
    nan = copy.deepcopy(good)
    nan[0]["option_logits"][1] = float("nan")
    cases = [
        (
            lambda: permutations(3, "shuffle"),
            "orderings must be one of ('none', 'rotations', 'all', 'prior', 'adaptive'), got 'shuffle'",
        ),
        (lambda: permutations(0, "none"), "a decision needs at least one option, got 0"),
        (lambda: permutations(5, "all"), "orderings 'all' allows at most 4 options, got 5"),
        (
            lambda: combine(row, "rotations", good[:2]),
            "'rotations' over 3 options needs 3 results, got 2",
        ),
        (
            lambda: combine(row, "rotations", wrong),
            "result 'q1#o1' does not score exactly the options ['a', 'b', 'c']",
        ),
        (
            lambda: combine(row, "rotations", nan),
            "result 'q1#o0' has a non-finite logit or probability",
        ),
        (
            lambda: combine(make_row("aab"), "rotations", good),
            "decision 'q1' repeats an option id: ['a', 'a', 'b']",
        ),
    ]
    for call, message in cases:
        with pytest.raises(ValueError) as refused:
            call()
        assert str(refused.value) == message


# --- orderings "prior" (extension): one row, the caller's order, the prior divided out ---------

ROOT6 = math.sqrt(6.0)
WORKED_PRIOR = [
    ROOT6 / (ROOT6 + 1),
    1 / (ROOT6 + 1),
]  # tests/decisions/test_prior.py works it by hand


def test_prior_is_an_orderings_value_but_not_an_averaging_method() -> None:
    assert ORDERINGS == (*METHODS, "prior", "adaptive")
    assert permutations(5, "prior") == [(0, 1, 2, 3, 4)]
    [row] = expand(make_row("abc"), "prior")
    assert row["id"] == "q1#o0" and row["options"] == make_row("abc")["options"]


def test_combine_under_the_prior_matches_the_worked_example() -> None:
    row = make_row("ab")
    [result] = [fake_result(r, [math.log(0.8), math.log(0.2)]) for r in expand(row, "prior")]
    tempered: list[list[float]] = []
    out = as_json(
        combine(
            row,
            "prior",
            [result],
            lambda scores: tempered.append(scores) or CalibratedView("w", 1.0, [0.5, 0.5]),
            prior=WORKED_PRIOR,
        )
    )
    combined = out["combined"]
    assert combined["probabilities"] == pytest.approx(
        [4 / (4 + ROOT6), ROOT6 / (4 + ROOT6)], abs=1e-12
    )
    assert (combined["method"], combined["orderings"], combined["top"], combined["agreement"]) == (
        "prior",
        1,
        "a",
        1.0,
    )
    assert combined["spread"] == {"a": [pytest.approx(0.8)] * 2, "b": [pytest.approx(0.2)] * 2}
    assert combined["prior"] == WORKED_PRIOR
    assert combined["calibrated"] == {
        "workload": "w",
        "temperature": 1.0,
        "probabilities": [0.5, 0.5],
    }
    assert tempered == [
        pytest.approx(
            [math.log(0.8) - math.log(WORKED_PRIOR[0]), math.log(0.2) - math.log(WORKED_PRIOR[1])]
        )
    ]
    assert out["orderings"][0] is result and out["option_ids"] == ["a", "b"]


def test_the_prior_can_move_the_top_and_agreement_stays_one() -> None:
    """p = (0.6, 0.4) under a prior (0.8, 0.2): p/prior ∝ (0.75, 2), so b wins: 0.75/2.75, 2/2.75."""
    row = make_row("ab")
    combined = as_json(
        combine(
            row,
            "prior",
            [fake_result(expand(row, "prior")[0], [math.log(0.6), math.log(0.4)])],
            prior=[0.8, 0.2],
        )
    )["combined"]
    assert combined["probabilities"] == pytest.approx([3 / 11, 8 / 11], abs=1e-12)
    assert combined["top"] == "b" and combined["agreement"] == 1.0


def test_the_prior_method_and_a_prior_go_together_and_the_row_keeps_the_callers_order() -> None:
    row = make_row("ab")
    [good] = results_for(row, "prior", lambda k, i, oid: float(i))
    swapped = {**good, "option_ids": ["b", "a"]}
    cases = [
        (
            lambda: combine(row, "prior", [good]),
            "orderings 'prior' needs a position prior, and only it takes one (got 'prior')",
        ),
        (
            lambda: combine(row, "none", [good], prior=[0.5, 0.5]),
            "orderings 'prior' needs a position prior, and only it takes one (got 'none')",
        ),
        (
            lambda: combine(row, "prior", [good, good], prior=[0.5, 0.5]),
            "'prior' over 2 options needs 1 results, got 2",
        ),
        (
            lambda: combine(row, "prior", [swapped], prior=[0.5, 0.5]),
            "result 'q1#o0' does not score the options ['a', 'b'] in order",
        ),
        (
            lambda: combine(row, "prior", [good], prior=[0.2, 0.3, 0.5]),
            "a prior over 3 positions cannot debias 2 options",
        ),
    ]
    for call, message in cases:
        with pytest.raises(ValueError) as refused:
            call()
        assert str(refused.value) == message


def test_a_single_option_has_one_ordering_whatever_the_method() -> None:
    assert (
        permutations(1, "none") == permutations(1, "rotations") == permutations(1, "all") == [(0,)]
    )


# --- properties ----------------------------------------------------------------------

LOGIT = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, allow_infinity=False)


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, list[str], list[list[float]], list[float]]:
    method = draw(st.sampled_from(["rotations", "all"]))
    n = draw(st.integers(2, 16 if method == "rotations" else MAX_ALL_OPTIONS))
    ids = draw(st.permutations(list(LETTERS[:n])))
    count = len(permutations(n, method))
    per_ordering = draw(
        st.lists(st.lists(LOGIT, min_size=n, max_size=n), min_size=count, max_size=count)
    )
    bias = draw(st.lists(LOGIT, min_size=n, max_size=n))
    return method, ids, per_ordering, bias


@settings(max_examples=150, deadline=None)
@given(cases())
def test_property_combined_scores_are_well_formed(
    case: tuple[str, list[str], list[list[float]], list[float]],
) -> None:
    method, ids, per_ordering, bias = case
    row = make_row(ids)
    results = results_for(row, method, lambda k, i, oid: per_ordering[k][i])
    out = as_json(combine(row, method, results))
    combined = out["combined"]
    count = len(results)
    assert out["option_ids"] == ids
    assert combined["orderings"] == count
    probabilities = combined["probabilities"]
    assert len(probabilities) == len(ids)
    assert all(math.isfinite(p) and p >= 0 for p in probabilities)
    assert math.fsum(probabilities) == pytest.approx(1.0, abs=1e-9)
    assert combined["top"] == ids[max(range(len(ids)), key=probabilities.__getitem__)]
    assert 0.0 <= combined["agreement"] <= 1.0
    assert abs(combined["agreement"] * count - round(combined["agreement"] * count)) < 1e-9
    assert list(combined["spread"]) == ids
    for result in results:
        for oid, native in zip(result["option_ids"], result["probabilities"]):
            low, high = combined["spread"][oid]
            assert low <= native <= high
    # A per-position bias added to every ordering leaves the combined scores alone.
    shifted = results_for(row, method, lambda k, i, oid: per_ordering[k][i] + bias[i])
    assert as_json(combine(row, method, shifted))["combined"]["probabilities"] == pytest.approx(
        probabilities, abs=1e-9, rel=0
    )


@settings(max_examples=100, deadline=None)
@given(cases())
def test_property_consistent_scores_plus_bias_give_softmax_of_truth(
    case: tuple[str, list[str], list[list[float]], list[float]],
) -> None:
    method, ids, per_ordering, bias = case
    truth = dict(zip(ids, per_ordering[0]))
    row = make_row(ids)
    results = results_for(row, method, lambda k, i, oid: truth[oid] + bias[i])
    probabilities = as_json(combine(row, method, results))["combined"]["probabilities"]
    assert probabilities == pytest.approx(softmax([truth[oid] for oid in ids]), abs=1e-9, rel=0)
