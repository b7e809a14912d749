"""When one row is enough: the escalation signals, the threshold fit, and the answers they give.

Rules a newcomer could break:
1. Nothing here reads a label. The threshold is fitted against the rotations' own top (what
   scoring every rotation would have answered), so `bench prior` fits it on unlabelled rows and
   the fit is the same whether labels are present or not.
2. A fit decision is judged with a prior that does NOT contain its own rotations (leave one
   out): a decision debiased by a prior it helped estimate looks better than a new one will.
3. The debiasing arithmetic is the server's (`semif_serve.decisions.prior.debias`), and so is the
   staged rule (`semif_serve.decisions.adaptive`); a signal is computed on the debiased,
   uncalibrated probabilities of the caller's-order row.

The adaptive answer at threshold t (the served, staged rule): the caller's-order row debiased by
the prior where its margin is at least t; below t, that answer where the half turn confirms its
top, else the average of all n rotations. A decision below t therefore keeps another top than the
rotations' only where its half turn confirmed a wrong one, and one at or above t only where its
one row is wrong: raising t never adds a disagreement, so the share of fit decisions whose
adaptive top equals the rotations' top only grows with t, and the lowest t that reaches a target
share is found by counting, not searched.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from semif_serve.decisions import adaptive as served
from semif_serve.decisions import prior as pride
from semif_serve.decisions.numerics import log_softmax, softmax

DEFAULT_TARGET = 0.97
SIGNAL = "margin, then the half turn"  # the rule the served method uses (decisions/adaptive.py)
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


def fit_threshold(
    signals: Sequence[float],
    agrees: Sequence[bool],
    target: float,
    settled: Sequence[bool],
) -> float:
    """The lowest t in [0, 1] at which at most (1 − target) of decisions keep another top than the
    rotations': those at signal ≥ t whose one row disagrees (`agrees` False), and those below t whose
    escalated answer still disagrees (`settled` False).
    1.0 where no t reaches the target."""
    if not 0 < target <= 1:
        raise ValueError(f"the target share must be in (0, 1], got {target}")
    if not signals or not len(signals) == len(agrees) == len(settled):
        raise ValueError("a threshold needs one signal and one agreement per decision")
    allowed = math.floor((1 - target) * len(signals) + 1e-9)
    wrong = sum(not ok for ok in agrees)  # t = 0: every decision answered by its one row
    if wrong <= allowed:
        return 0.0
    ranked = sorted(range(len(signals)), key=signals.__getitem__)
    for place, index in enumerate(ranked):
        wrong += (not settled[index]) - (not agrees[index])  # t just above it escalates it
        last = place + 1 == len(ranked) or signals[ranked[place + 1]] != signals[index]
        if last and wrong <= allowed:
            return min(math.nextafter(signals[index], math.inf), 1.0)
    return 1.0


def adaptive_share(
    signals: Sequence[float],
    agrees: Sequence[bool],
    threshold: float,
    settled: Sequence[bool],
) -> float:
    """The share of decisions whose adaptive top equals the rotations' top at `threshold`."""
    return sum(
        (done if s < threshold else ok) for s, ok, done in zip(signals, agrees, settled)
    ) / len(signals)


def settles(decision: Mapping[str, Any], prior: Vector) -> bool:
    """Whether the decision, escalated, answers with the rotations' top under the staged rule: it
    scores every rotation where its half turn disagrees with its first row, and keeps the first
    row's answer where the two agree (so agrees only if that answer was right). Over two options
    two rows that agree are the rotations' answer too."""
    if not served.confirmed(decision["results"], prior):
        return True
    return top(debiased(decision["first"], prior)) == decision["rotations_top"]


def group_fit(decisions: Sequence[Mapping[str, Any]], target: float) -> dict[str, Any]:
    """The staged rule's threshold for one (workload, n), leave-one-out, from decisions
    `{prior, first, rotations_top, results}`: each one's decision prior, its caller's-order logits,
    the index its rotations answered, and its rotations' results in rotation order."""
    loo = leave_one_out([d["prior"] for d in decisions])
    values, agrees, settled = [], [], []
    for decision, others in zip(decisions, loo):
        answer = debiased(decision["first"], others)
        values.append(margin(answer))
        agrees.append(top(answer) == decision["rotations_top"])
        settled.append(settles(decision, others))
    threshold = fit_threshold(values, agrees, target, settled)
    escalated = sum(v < threshold for v in values) / len(values)
    return {
        "threshold": threshold,
        "escalated": escalated,
        "one_row_same_top": sum(agrees) / len(agrees),
        "adaptive_same_top": adaptive_share(values, agrees, threshold, settled),
    }
