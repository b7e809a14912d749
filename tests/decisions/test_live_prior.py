"""The live prior's arithmetic (decisions/live_prior.py) against decisions/prior.py and averaging on
the same rows: sums and squares, agreement, margins, drift and its threshold, the threshold fit."""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest

from semif_serve.decisions import averaging, live_prior, prior
from semif_serve.decisions.numerics import softmax

BIAS = [1.2, 0.4, 0.0, -0.7]


def row(k: int, n: int = 4) -> dict[str, Any]:
    return {
        "id": f"d{k}",
        "state": "s",
        "question": "q",
        "options": [{"id": f"o{i}", "description": f"{k}-{i}"} for i in range(n)],
    }


def rotation_results(decision: dict[str, Any], rng: random.Random) -> list[dict[str, Any]]:
    """The n rotations' results of a model with a position bias and a content score per option."""
    content = {option["id"]: rng.gauss(0, 1) for option in decision["options"]}
    results = []
    for expanded in averaging.expand(decision, "rotations"):
        ids = [option["id"] for option in expanded["options"]]
        logits = [content[oid] + BIAS[i] + rng.gauss(0, 0.05) for i, oid in enumerate(ids)]
        results.append(
            {
                "id": expanded["id"],
                "option_ids": ids,
                "option_logits": logits,
                "probabilities": softmax(logits),
            }
        )
    return results


SERVED = (0.4, 0.3, 0.2, 0.1)


def tallied(count: int, seed: int = 3) -> tuple[live_prior.Tally, list[list[float]], list[Any]]:
    rng = random.Random(seed)
    tally = live_prior.Tally(SERVED)
    priors, cases = [], []
    for k in range(count):
        decision = row(k)
        results = rotation_results(decision, rng)
        tally.add(live_prior.audited(decision, results, SERVED))
        priors.append(prior.decision_prior(results))
        cases.append((decision, results))
    return tally, priors, cases


def test_the_live_prior_is_prior_py_within_1e_9() -> None:
    tally, priors, _ = tallied(40)
    live = tally.live()
    assert live is not None
    assert all(math.isclose(a, b, abs_tol=1e-9) for a, b in zip(live, prior.workload_prior(priors)))
    for position in range(4):
        column = [p[position] for p in priors]
        error = statistics.stdev(column) / math.sqrt(len(column))
        assert math.isclose(tally.as_json()["standard_errors"][position], error, abs_tol=1e-9)


def half_turn_top(result: dict[str, Any]) -> str:
    """The half turn's answer with SERVED divided out by position, read by option id."""
    scores = prior.debias([math.log(p) for p in softmax(result["option_logits"])], SERVED)
    return dict(zip(scores, result["option_ids"]))[max(scores)]


def test_agreement_margins_and_confirmations_are_averaging_s_answers() -> None:
    """Confirmed: the disagreeing whose half turn (rotation 2 of 4) keeps the served top."""
    tally, _, cases = tallied(60)
    agreed = confirmed = 0
    for decision, results in cases:
        one = averaging.combine(decision, "prior", results[:1], prior=SERVED).combined
        rotations = averaging.combine(decision, "rotations", results).combined
        agreed += one.top == rotations.top
        confirmed += one.top != rotations.top and half_turn_top(results[2]) == one.top
    assert tally.agreements == agreed and 0 < agreed < 60
    assert sum(tally.agreeing) == agreed and sum(tally.disagreeing) == 60 - agreed
    assert sum(tally.confirmed) == confirmed and 0 < confirmed < sum(tally.disagreeing)
    assert tally.as_json()["margins"]["confirmed"] == tally.confirmed


def test_over_two_options_no_disagreement_is_confirmed_two_rows_that_agree_are_the_rotations() -> (
    None
):
    rng = random.Random(5)
    tally = live_prior.Tally((0.7, 0.3))
    for k in range(60):
        decision = row(k, 2)
        tally.add(live_prior.audited(decision, rotation_results(decision, rng), (0.7, 0.3)))
    assert sum(tally.disagreeing) > 0 and sum(tally.confirmed) == 0


def test_drift_starts_at_the_prior_s_minimum_and_reads_the_window() -> None:
    tally, _, _ = tallied(prior.MIN_DECISIONS - 1)
    assert tally.drift() is None and tally.as_json()["drift"] is None
    tally, priors, _ = tallied(prior.MIN_DECISIONS)
    k = len(priors)
    expected = max(
        abs(statistics.fmean(p[i] for p in priors) - SERVED[i])
        / (statistics.stdev(p[i] for p in priors) / math.sqrt(k))
        for i in range(4)
    )
    drift = tally.drift()
    assert drift is not None and math.isclose(drift, expected, rel_tol=1e-9)


def test_drift_is_measured_over_the_last_window_only() -> None:
    tally, _, _ = tallied(live_prior.DRIFT_WINDOW + 20)
    assert (
        len(tally.window) == live_prior.DRIFT_WINDOW and tally.count == live_prior.DRIFT_WINDOW + 20
    )


def test_a_prior_that_fits_does_not_drift_and_one_that_does_not_does() -> None:
    tally, priors, _ = tallied(60)
    fitting = live_prior.Tally(tuple(prior.workload_prior(priors)))
    for audit in (live_prior.Audited(p, True, 0.5) for p in priors):
        fitting.add(audit)
    assert (fitting.drift() or 0.0) < live_prior.drift_threshold(4)
    assert (tally.drift() or 0.0) > live_prior.drift_threshold(4)


def test_the_threshold_is_bonferroni_over_n_positions() -> None:
    assert live_prior.drift_threshold(2) == pytest.approx(2.807, abs=1e-3)
    assert live_prior.drift_threshold(4) == pytest.approx(3.023, abs=1e-3)
    assert live_prior.drift_threshold(8) == pytest.approx(3.227, abs=1e-3)


def bins(*margins: float) -> list[int]:
    counts = [0] * live_prior.MARGIN_BINS
    for margin in margins:
        counts[live_prior.margin_bin(margin)] += 1
    return counts


def test_the_threshold_fit_escalates_just_enough_disagreements() -> None:
    """100 decisions, 5 disagreeing at margins 0.02, 0.05, 0.10, 0.30, 0.31: at target 0.97 three may
    stand, so escalating below 0.10 (two escalated) is the lowest that leaves three."""
    disagreeing, none = bins(0.02, 0.05, 0.10, 0.30, 0.31), bins()
    assert live_prior.fitted_threshold(disagreeing, none, 100, 0.97) == pytest.approx(0.06)
    assert live_prior.fitted_threshold(disagreeing, none, 100, 0.99) == pytest.approx(0.31)
    assert live_prior.fitted_threshold(disagreeing, none, 100, 1.0) == pytest.approx(0.32)
    assert live_prior.fitted_threshold(bins(), none, 100, 0.97) == 0.0
    assert live_prior.margin_bin(1.0) == live_prior.MARGIN_BINS - 1


def test_a_confirmed_disagreement_stays_wrong_when_escalated() -> None:
    """The half turn confirms the disagreeing at 0.02 and 0.05: escalated, they keep their wrong top, so
    at 0.97 (three may stand) escalating below 0.10 no longer does: it must pass 0.30, leaving the two
    confirmed and the one at 0.31."""
    disagreeing, confirmed = bins(0.02, 0.05, 0.10, 0.30, 0.31), bins(0.02, 0.05)
    assert live_prior.fitted_threshold(disagreeing, confirmed, 100, 0.97) == pytest.approx(0.31)
    assert live_prior.fitted_threshold(disagreeing, confirmed, 100, 0.98) == pytest.approx(0.32)
    assert live_prior.fitted_threshold(disagreeing, confirmed, 100, 0.99) == 1.0  # never reached


def test_replicas_tallies_add_up_to_one_tally_over_all_their_audits() -> None:
    _, priors, _ = tallied(30)
    # the same 30 audits split 12 / 18 over two replicas
    one, two = live_prior.Tally(SERVED), live_prior.Tally(SERVED)
    for index, p in enumerate(priors):
        audit = live_prior.Audited(p, index % 3 == 0, index / 30, confirmed=index % 2 == 0)
        (one if index < 12 else two).add(audit)
    added = live_prior.summed([one.as_json(), two.as_json()])
    assert added.audits == 30 and added.agreements == 10
    assert all(
        math.isclose(a, b, abs_tol=1e-9) for a, b in zip(added.live(), prior.workload_prior(priors))
    )
    assert sum(added.disagreeing) == 20
    assert sum(added.confirmed) == sum(index % 2 == 0 and index % 3 != 0 for index in range(30))
    older = {**one.as_json(), "margins": {"disagreeing": one.disagreeing}}  # before "confirmed"
    assert live_prior.summed([older, two.as_json()]).confirmed == tuple(two.confirmed)
    assert sum(two.confirmed) > 0
    with pytest.raises(ValueError, match="different option counts"):
        live_prior.summed([one.as_json(), live_prior.Tally((0.5, 0.5)).as_json()])


def test_standard_errors_exist_from_the_second_audit_and_json_shows_none_before() -> None:
    tally = live_prior.Tally(SERVED)
    tally.add(live_prior.Audited([0.4, 0.3, 0.2, 0.1], True, 0.5))
    assert tally.as_json()["standard_errors"] == [None] * 4
    tally.add(live_prior.Audited([0.2, 0.3, 0.2, 0.3], True, 0.5))
    assert tally.standard_errors() == pytest.approx([0.1, 0.0, 0.0, 0.1])


def test_margins_below_zero_or_at_zero_fall_in_the_first_bin_and_bins_must_match() -> None:
    assert live_prior.margin_bin(0.0) == live_prior.margin_bin(-0.5) == 0
    assert live_prior.margin_bin(0.019) == 1
    with pytest.raises(ValueError):
        live_prior.fitted_threshold([1] * 100, [1] * 99, 100, 0.97)


def test_confirmed_audits_at_one_margin_add_up_and_a_tally_of_other_bins_is_refused() -> None:
    tally = live_prior.Tally(SERVED)
    for _ in range(2):
        tally.add(live_prior.Audited([0.4, 0.3, 0.2, 0.1], False, 0.5, confirmed=True))
    assert tally.confirmed[live_prior.margin_bin(0.5)] == 2
    for key in ("disagreeing", "confirmed"):
        short = tally.as_json()
        short["margins"] = {**short["margins"], key: [0] * 99}
        with pytest.raises(ValueError, match="different option counts or margin bins"):
            live_prior.summed([tally.as_json(), short])
