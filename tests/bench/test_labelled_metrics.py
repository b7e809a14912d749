"""bench/labelled metrics and the temperature fit: hand-computed figures, a known T recovered, a fine grid agreeing."""

from __future__ import annotations

import math
import random

import pytest

from bench.labelled import fit, metrics
from semif_serve.decisions.calibration_file import T_MAX, T_MIN
from semif_serve.decisions.numerics import softmax

# Two rows worked by hand: p = (0.7, 0.2, 0.1) with label 0 (right, confidence 0.7),
# p = (0.4, 0.6) with label 0 (wrong, confidence 0.6).
HAND_P = [[0.7, 0.2, 0.1], [0.4, 0.6]]
HAND_Y = [0, 0]


def test_nll_brier_ece_and_accuracy_match_hand_computed_values() -> None:
    # NLL = (-ln 0.7 - ln 0.4) / 2 = (0.356675 + 0.916291) / 2
    assert metrics.nll(HAND_P, HAND_Y) == pytest.approx(0.636483, abs=1e-6)
    # Brier = ((0.3^2 + 0.2^2 + 0.1^2) + (0.6^2 + 0.6^2)) / 2 = (0.14 + 0.72) / 2
    assert metrics.brier(HAND_P, HAND_Y) == pytest.approx(0.43, abs=1e-12)
    # ECE: bin [0.7, 0.8) holds a right answer at 0.7, bin [0.6, 0.7) a wrong one at 0.6:
    # 0.5 * |1 - 0.7| + 0.5 * |0 - 0.6| = 0.15 + 0.30
    assert metrics.ece(HAND_P, HAND_Y) == pytest.approx(0.45, abs=1e-12)
    assert metrics.accuracy(HAND_P, HAND_Y) == 0.5


def test_kl_matches_hand_computed_values() -> None:
    # 0.5 ln(0.5 / 0.25) + 0.5 ln(0.5 / 0.75) = 0.5 (0.693147 - 0.405465)
    assert metrics.kl([0.5, 0.5], [0.25, 0.75]) == pytest.approx(0.143841, abs=1e-6)
    assert metrics.kl([1.0, 0.0], [0.5, 0.5]) == pytest.approx(
        math.log(2), abs=1e-12
    )  # a zero p_k adds nothing
    assert metrics.kl([0.3, 0.7], [0.3, 0.7]) == 0.0
    # a zero q_k counts as the smallest float: 0.5 ln(0.5 / 1) + 0.5 ln(0.5 / ulp)
    assert metrics.kl([0.5, 0.5], [1.0, 0.0]) == pytest.approx(
        math.log(0.5) - 0.5 * math.log(math.ulp(0.0))
    )
    assert metrics.mean_kl([[0.5, 0.5], [1.0, 0.0]], [[0.25, 0.75], [0.5, 0.5]]) == pytest.approx(
        (0.143841 + math.log(2)) / 2
    )
    with pytest.raises(ValueError, match="same options"):
        metrics.kl([0.5, 0.5], [0.2, 0.3, 0.5])


def test_ece_averages_within_a_bin_and_puts_certainty_in_the_last_bin() -> None:
    # All three in [0.9, 1.0]: confidences 0.9, 0.95, 1.0 (mean 0.95); right, wrong, right (2/3).
    probabilities = [[0.9, 0.1], [0.95, 0.05], [0.0, 1.0]]
    labels = [0, 1, 1]
    assert metrics.ece(probabilities, labels) == pytest.approx(abs(2 / 3 - 0.95), abs=1e-12)
    bins = metrics.reliability(probabilities, labels)
    assert [b["count"] for b in bins] == [0] * 9 + [3]
    assert bins[9]["accuracy"] == pytest.approx(2 / 3) and bins[0]["confidence"] is None


def test_top_breaks_an_exact_tie_towards_the_earliest_option() -> None:
    assert metrics.top([0.25, 0.375, 0.375]) == 1


def test_nll_of_scores_is_exact_where_probabilities_underflow() -> None:
    assert metrics.nll_of_scores([[0.0, -2000.0]], [1]) == pytest.approx(2000.0)
    assert metrics.nll_of_scores([[0.0, -2000.0]], [1], temperature=T_MAX) == pytest.approx(
        100.0, rel=1e-9
    )
    assert math.isfinite(metrics.nll([[1.0, 0.0]], [1]))


def sample(temperature: float, rows: int, seed: int) -> tuple[list[list[float]], list[int]]:
    """Logits with 2..5 options; each label drawn from softmax(logits / T).

    The logits' spread scales with T so every case is equally informative.
    """
    rng = random.Random(seed)
    scores, labels = [], []
    for _ in range(rows):
        logits = [rng.gauss(0.0, 2.0 * temperature) for _ in range(rng.randint(2, 5))]
        labels.append(
            rng.choices(range(len(logits)), softmax([v / temperature for v in logits]))[0]
        )
        scores.append(logits)
    return scores, labels


@pytest.mark.parametrize(("temperature", "seed"), [(0.2, 1), (1.7, 2), (6.0, 3)])
def test_fit_recovers_a_known_temperature_within_two_percent(temperature: float, seed: int) -> None:
    scores, labels = sample(temperature, 20_000, seed)
    assert fit.fit_temperature(scores, labels) == pytest.approx(temperature, rel=0.02)


def test_fit_agrees_with_a_fine_grid() -> None:
    scores, labels = sample(2.5, 300, seed=7)
    fitted = fit.fit_temperature(scores, labels)
    low, high = math.log(T_MIN), math.log(T_MAX)
    step = (high - low) / 1000
    grid = [math.exp(low + k * step) for k in range(1001)]
    best = min(grid, key=lambda t: metrics.nll_of_scores(scores, labels, t))
    assert abs(math.log(fitted) - math.log(best)) <= step
    assert (
        metrics.nll_of_scores(scores, labels, fitted)
        <= metrics.nll_of_scores(scores, labels, best) + 1e-12
    )


def test_fit_stops_at_the_contract_bounds() -> None:
    # Always right: sharper is always better, so the lower bound. (A margin small enough
    # that the NLL at T_MIN, about 2e-9, is not rounded to 0, which would make a plateau.)
    assert fit.fit_temperature([[1.0, 0.0, -0.5]] * 10, [0] * 10) == T_MIN
    # Always the lowest score: flatter is always better, so the upper bound.
    assert fit.fit_temperature([[1.0, 0.0, -0.5]] * 10, [2] * 10) == T_MAX


def test_calibrated_probabilities_are_the_tempered_softmax_and_keep_the_argmax() -> None:
    scores = [[2.0, -1.0, 0.5]]
    calibrated = fit.calibrate(scores, 2.0)[0]
    assert calibrated == pytest.approx(softmax([1.0, -0.5, 0.25]))
    assert metrics.top(calibrated) == metrics.top(scores[0])
