"""The escalation threshold's arithmetic (bench/labelled/escalation.py), on made-up signals."""

from __future__ import annotations

import math
import random

import pytest

from bench.labelled import escalation
from semif_serve.decisions import averaging
from semif_serve.decisions import prior as pride
from semif_serve.decisions.numerics import softmax


def case(seed: int, count: int = 200) -> tuple[list[float], list[bool], list[bool]]:
    rng = random.Random(seed)
    signals = [round(rng.random(), 2) for _ in range(count)]  # ties too
    agrees = [rng.random() < 0.3 + 0.7 * s for s in signals]  # surer rows agree more
    # a half turn confirms about a third of the wrong ones: escalated, they stay wrong
    return signals, agrees, [ok or rng.random() < 0.7 for ok in agrees]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("target", [0.5, 0.9, 0.97, 1.0])
@pytest.mark.parametrize("staged", [False, True])
def test_the_threshold_is_the_lowest_that_reaches_the_target(
    seed: int, target: float, staged: bool
) -> None:
    signals, agrees, settled = case(seed)
    after = settled if staged else [True] * len(signals)  # the margin rule: escalated agrees
    t = escalation.fit_threshold(signals, agrees, target, after)
    assert 0 <= t <= 1
    if sum(after) < target * len(signals):  # even escalating every decision falls short
        assert t == 1.0
        return
    assert escalation.adaptive_share(signals, agrees, t, after) >= target
    if t > 0:
        lower = math.nextafter(t, -1.0)
        assert escalation.adaptive_share(signals, agrees, lower, after) < target


def test_a_confirmed_wrong_answer_stays_wrong_when_escalated() -> None:
    """Four decisions, the two least sure wrong: escalating both fixes them unless the half turn
    confirms one, which then never counts as fixed."""
    signals, agrees = [0.1, 0.2, 0.5, 0.9], [False, False, True, True]
    assert escalation.fit_threshold(signals, agrees, 1.0, [True] * 4) == math.nextafter(0.2, 1.0)
    assert escalation.fit_threshold(signals, agrees, 0.75, [True, False, True, True]) == (
        math.nextafter(0.1, 1.0)
    )
    assert escalation.fit_threshold(signals, agrees, 1.0, [True, False, True, True]) == 1.0


def test_all_agreeing_needs_no_escalation_and_the_cap_is_one() -> None:
    assert escalation.fit_threshold([0.1, 0.5], [True, True], 1.0, [True, True]) == 0.0
    assert escalation.fit_threshold([1.0, 0.5], [False, True], 1.0, [True, True]) == 1.0


def test_bad_targets_and_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="target share"):
        escalation.fit_threshold([0.1], [True], 0.0, [True])
    with pytest.raises(ValueError, match="one signal and one agreement"):
        escalation.fit_threshold([0.1], [], 0.9, [True])
    with pytest.raises(ValueError, match="one signal and one agreement"):
        escalation.fit_threshold([0.1], [True], 0.9, [])


def test_leave_one_out_is_the_mean_of_the_others() -> None:
    priors = [[0.2, 0.8], [0.5, 0.5], [0.6, 0.4]]
    for k, others in enumerate(escalation.leave_one_out(priors)):
        assert others == pytest.approx(pride.workload_prior(priors[:k] + priors[k + 1 :]))


def test_signals_order_a_sure_answer_above_an_unsure_one() -> None:
    sure, unsure = [0.9, 0.05, 0.05], [0.4, 0.35, 0.25]
    for name, signal in escalation.SIGNALS.items():
        assert 0 <= signal(unsure) < signal(sure) <= 1, name


def test_debiased_is_the_servers_prior_view() -> None:
    logits, prior = [2.0, 1.0, 0.0], [0.5, 0.3, 0.2]
    raw = [math.exp(v - math.log(p)) for v, p in zip(logits, prior)]
    assert escalation.debiased(logits, prior) == pytest.approx([r / sum(raw) for r in raw])


def rotations(logits: list[float], twist: float = 0.0) -> list[dict[str, object]]:
    """Three rotations' results of a row whose option k scores logits[k] plus log PRIOR by position;
    `twist` adds to position 0 of the half turn (rotation 1)."""
    row = {"id": "r", "options": [{"id": f"o{k}"} for k in range(3)]}
    out = []
    for k, rotated in enumerate(averaging.expand(row, "rotations")):
        ids = [option["id"] for option in rotated["options"]]
        values = [logits[int(i[1])] + math.log(PRIOR[p]) for p, i in enumerate(ids)]
        values[0] += twist if k == 1 else 0.0
        out.append({"option_ids": ids, "option_logits": values, "probabilities": softmax(values)})
    return out


PRIOR = [0.5, 0.3, 0.2]


@pytest.mark.parametrize(
    ("twist", "rotations_top", "expected"),
    [
        (0.0, 0, True),  # confirmed, and the first row was right
        (0.0, 1, False),  # confirmed, but the rotations answer otherwise: stays wrong
        (3.0, 1, True),  # the half turn disagrees: every rotation scored, their answer
    ],
)
def test_settles_follows_the_served_staged_rule(
    twist: float, rotations_top: int, expected: bool
) -> None:
    results = rotations([1.2, 1.0, 0.0], twist)
    decision = {
        "first": results[0]["option_logits"],
        "rotations_top": rotations_top,
        "results": results,
    }
    assert escalation.settles(decision, PRIOR) is expected
