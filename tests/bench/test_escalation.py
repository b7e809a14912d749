"""The escalation threshold's arithmetic (bench/labelled/escalation.py), on made-up signals."""

from __future__ import annotations

import math
import random

import pytest

from bench.labelled import escalation
from semif_serve.decisions import prior as pride


def case(seed: int, count: int = 200) -> tuple[list[float], list[bool]]:
    rng = random.Random(seed)
    signals = [rng.random() for _ in range(count)]
    return signals, [rng.random() < 0.3 + 0.7 * s for s in signals]  # surer rows agree more


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("target", [0.5, 0.9, 0.97, 1.0])
def test_the_threshold_is_the_lowest_that_reaches_the_target(seed: int, target: float) -> None:
    signals, agrees = case(seed)
    t = escalation.fit_threshold(signals, agrees, target)
    assert 0 <= t <= 1
    assert escalation.adaptive_share(signals, agrees, t) >= target
    if t > 0:
        assert escalation.adaptive_share(signals, agrees, math.nextafter(t, -1.0)) < target


def test_all_agreeing_needs_no_escalation_and_the_cap_is_one() -> None:
    assert escalation.fit_threshold([0.1, 0.5], [True, True], 1.0) == 0.0
    assert escalation.fit_threshold([1.0, 0.5], [False, True], 1.0) == 1.0


def test_bad_targets_and_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="target share"):
        escalation.fit_threshold([0.1], [True], 0.0)
    with pytest.raises(ValueError, match="one signal and one agreement"):
        escalation.fit_threshold([0.1], [], 0.9)


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
