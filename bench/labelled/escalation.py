"""When one row is enough: the escalation signals, the threshold fit, and the answers they give.

Rules a newcomer could break:
1. Nothing here reads a label. The threshold is fitted against the rotations' own top (what
   escalating would have answered), so `bench prior` fits it on unlabelled rows and the fit is
   the same whether labels are present or not.
2. A fit decision is judged with a prior that does NOT contain its own rotations (leave one
   out): a decision debiased by a prior it helped estimate looks better than a new one will.
3. The debiasing arithmetic is the server's (`semif_serve.decisions.prior.debias`); a signal
   is computed on the debiased, uncalibrated probabilities of the caller's-order row.

The adaptive answer at threshold t: the caller's-order row debiased by the prior where its
signal is at least t, else the average of all n rotations (the first being that row). A
decision whose signal is below t therefore agrees with the rotations by construction, so the
share of fit decisions whose adaptive top equals the rotations' top only grows with t, and
the lowest t that reaches a target share is found by counting, not searched.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from semif_serve.decisions import adaptive as served
from semif_serve.decisions import prior as pride
from semif_serve.decisions.numerics import log_softmax, softmax

DEFAULT_TARGET = 0.97
SIGNAL = "margin"  # the signal the served method uses
FIT_METHOD = "leave-one-out"
Vector = Sequence[float]


def debiased(logits: Vector, prior: Vector) -> list[float]:
    """The one-row answer: softmax(log p(i) − log prior(i)), as the server's `prior` view."""
    return softmax(pride.debias(log_softmax(list(logits)), prior))


def _two_best(values: Vector) -> tuple[float, float]:
    first, second = sorted(values, reverse=True)[:2]
    return first, second


def margin(probabilities: Vector) -> float:
    """Top minus runner-up: the served signal, by the server's own rule (decisions/adaptive.py)."""
    return served.margin(probabilities)


def log_margin(probabilities: Vector) -> float:
    """log(top) − log(runner-up), squashed into [0, 1) as 1 − runner-up/top so a threshold stays in [0, 1].
    A temperature divides the log-margin by T for every row alike, so the calibrated margin orders rows
    the same way: this signal stands for both."""
    first, second = _two_best(probabilities)
    return 1.0 - second / first


def top_probability(probabilities: Vector) -> float:
    return max(probabilities)


def certainty(probabilities: Vector) -> float:
    """1 − entropy / log n: 1 for a one-hot answer, 0 for a uniform one."""
    entropy = -math.fsum(p * math.log(p) for p in probabilities if p > 0)
    return 1.0 - entropy / math.log(len(probabilities))


SIGNALS: dict[str, Callable[[Vector], float]] = {
    "margin": margin,
    "log-margin": log_margin,
    "top probability": top_probability,
    "certainty (1 - normalised entropy)": certainty,
}


def top(probabilities: Vector) -> int:
    """Index of the largest; an exact tie goes to the earliest, as the server does."""
    return max(range(len(probabilities)), key=probabilities.__getitem__)


def leave_one_out(priors: Sequence[Vector]) -> list[list[float]]:
    """For each decision, the workload prior of all the others (its own rotations left out)."""
    if len(priors) < 2:
        raise ValueError("leave-one-out needs at least two decision priors")
    count = len(priors)
    totals = [math.fsum(p[k] for p in priors) for k in range(len(priors[0]))]
    return [[(totals[k] - p[k]) / (count - 1) for k in range(len(p))] for p in priors]


def fit_threshold(signals: Sequence[float], agrees: Sequence[bool], target: float) -> float:
    """The lowest t in [0, 1] at which (signal < t or agrees) holds for at least `target` of decisions.

    Only disagreeing decisions with signal >= t count against t; `allowed` of them may remain, so
    t must lie just above the (allowed+1)-th largest disagreeing signal."""
    if not 0 < target <= 1:
        raise ValueError(f"the target share must be in (0, 1], got {target}")
    if not signals or len(signals) != len(agrees):
        raise ValueError("a threshold needs one signal and one agreement per decision")
    allowed = math.floor((1 - target) * len(signals) + 1e-9)
    wrong = sorted((s for s, ok in zip(signals, agrees) if not ok), reverse=True)
    if len(wrong) <= allowed:
        return 0.0
    return min(math.nextafter(wrong[allowed], math.inf), 1.0)


def adaptive_share(signals: Sequence[float], agrees: Sequence[bool], threshold: float) -> float:
    """The share of decisions whose adaptive top equals the rotations' top at `threshold`."""
    return sum(s < threshold or ok for s, ok in zip(signals, agrees)) / len(signals)


def group_fit(
    decisions: Sequence[Mapping[str, Any]], target: float, signal: str = SIGNAL
) -> dict[str, Any]:
    """The threshold for one (workload, n), leave-one-out, from decisions `{prior, first, rotations_top}`:
    each one's decision prior, its caller's-order logits, and the index its rotations answered."""
    loo = leave_one_out([d["prior"] for d in decisions])
    values, agrees = [], []
    for decision, others in zip(decisions, loo):
        answer = debiased(decision["first"], others)
        values.append(SIGNALS[signal](answer))
        agrees.append(top(answer) == decision["rotations_top"])
    threshold = fit_threshold(values, agrees, target)
    escalated = sum(v < threshold for v in values) / len(values)
    return {
        "threshold": threshold,
        "escalated": escalated,
        "one_row_same_top": sum(agrees) / len(agrees),
        "adaptive_same_top": adaptive_share(values, agrees, threshold),
    }
