"""The position prior (PriDe): fitted once per workload and option count, divided out of one row.

Rules:
1. This is the one home of the prior's arithmetic: the server's debiased and calibrated
   views and the bench's fit both call these functions; nobody copies them.
2. Pure arithmetic on plain numbers and SemIf result mappings: no I/O, no torch, no HTTP.
   It does not know the calibration file (decisions/calibration_file.py reads it and calls `checked`),
   nor requests (the request model refuses a decision without a prior before scoring).
3. A refusal is a ValueError whose message names what is wrong, never the variable or the
   field: the caller knows where the value came from and prefixes that.

Theory of operation (Zheng et al., "Large Language Models Are Not Robust Multiple Choice
Selectors", ICLR 2024). Reading an answer off option-letter logits, the probability the
model gives position i factors as

    p(i) ∝ prior(i) · q(option at i)

where `prior` is the model's preference for positions whatever they hold, and `q` its
preference for the options' content. Score one decision under its n cyclic rotations: every
option then sits in every position exactly once, so the mean over rotations of
log p(i) = log prior(i) + (the mean of every option's log q, the same for every i) + a
per-row constant. The content cancels, and the softmax removes the constant:

    decision prior      = softmax_i( mean over orderings of log_softmax(logits)[i] )
    workload prior (n)  = the mean of its decisions' priors (at least MIN_DECISIONS of them)

Any later decision with n options is then debiased from ONE row scored in the caller's order:

    debiased   = softmax_i( log p(i) − log prior(i) )
    calibrated = softmax_i( (log p(i) − log prior(i)) / T )    (T fitted for method "prior")

The estimate holds for any balanced set of orderings (each option in each position equally
often: the rotations, or every permutation); `decision_prior` checks that balance rather
than trusting the caller's order. What it cannot remove: a bias that is not a shift per
position (one that depends on the content, or on which option sits beside which), and a
position preference that differs between this decision and the ones the prior was fitted on.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from .methods import Method
from .numerics import log_softmax, softmax

METHOD = (
    Method.PRIOR.value
)  # the orderings value, and the calibration method, of a decision debiased by it
MIN_DECISIONS = 8  # a (workload, n) fitted from fewer decisions is not fitted at all
SUM_TOLERANCE = 1e-6  # a stored prior sums to 1 within this


def _finite(values: Sequence[float], what: str) -> None:
    if not all(
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        for value in values
    ):
        raise ValueError(f"{what} holds a value that is not a finite number")


def _balanced(results: Sequence[Mapping[str, Any]]) -> int:
    """n, after checking every result scores the same n options and each option sits in each
    position equally often (what makes the content cancel)."""
    if not results:
        raise ValueError("a decision prior needs the results of its orderings, got none")
    first = list(results[0]["option_ids"])
    n = len(first)
    if n < 2 or len(set(first)) != n:
        raise ValueError(f"a decision prior needs at least 2 distinct options, got {first}")
    for result in results:
        if sorted(result["option_ids"]) != sorted(first) or len(result["option_logits"]) != n:
            raise ValueError(
                f"result {result.get('id')!r} does not score exactly the options {sorted(first)}"
            )
    if len(results) % n:
        raise ValueError(
            f"{len(results)} orderings of {n} options cannot put each option in each position equally often"
        )
    even = {option: len(results) // n for option in first}
    for position in range(n):
        if Counter(result["option_ids"][position] for result in results) != even:
            raise ValueError(
                f"position {position} does not hold each option equally often: "
                "score the decision under its n cyclic rotations"
            )
    return n


def decision_prior(results: Sequence[Mapping[str, Any]]) -> list[float]:
    """One decision's prior over positions, from its SemIf results under balanced orderings.

    `results` are the rows' results as scored (`option_ids` and `option_logits` in each row's
    own order), e.g. `combined.orderings` of a decision served with orderings "rotations".
    """
    n = _balanced(results)
    per_ordering = []
    for result in results:
        _finite(result["option_logits"], f"result {result.get('id')!r}'s option_logits")
        per_ordering.append(log_softmax(result["option_logits"]))
    mean = [
        math.fsum(logp[position] for logp in per_ordering) / len(per_ordering)
        for position in range(n)
    ]
    return softmax(mean)


def workload_prior(priors: Sequence[Sequence[float]]) -> list[float]:
    """The mean of decisions' priors over the same option count, position by position."""
    if not priors:
        raise ValueError("a workload prior needs at least one decision prior")
    n = len(priors[0])
    if any(len(prior) != n for prior in priors):
        raise ValueError(
            f"decision priors over different option counts cannot be averaged: {sorted({len(p) for p in priors})}"
        )
    return [math.fsum(prior[position] for prior in priors) / len(priors) for position in range(n)]


def entry(priors: Sequence[Sequence[float]]) -> dict[str, Any]:
    """The calibration file's entry for one (workload, n): `{"prior": [...], "decisions": k}`.

    Fewer than MIN_DECISIONS decisions is refused: a prior from a handful of rows would move
    every later answer on little evidence.
    """
    if len(priors) < MIN_DECISIONS:
        raise ValueError(f"{len(priors)} decision(s); a prior needs at least {MIN_DECISIONS}")
    return {"prior": workload_prior(priors), "decisions": len(priors)}


def checked(prior: Any, n: int) -> tuple[float, ...]:
    """A stored prior over n positions, as read from a file: n finite numbers, each > 0, summing
    to 1 within SUM_TOLERANCE. Zero would make log prior infinite; a wrong length or sum means
    the entry belongs to another option count or was edited by hand."""
    if not isinstance(prior, list) or not all(
        isinstance(p, (int, float)) and not isinstance(p, bool) for p in prior
    ):
        raise ValueError(f"prior must be an array of numbers, got {prior!r}")
    if len(prior) != n:
        raise ValueError(f"prior has {len(prior)} entries; {n} options need {n}")
    # isfinite before the sign: NaN compares false both ways. A JSON integer too big for a
    # float is infinite for isfinite's purpose only after float(), hence the conversion.
    try:
        values = tuple(float(p) for p in prior)
    except OverflowError:
        raise ValueError("prior holds a value that is not a finite number") from None
    _finite(values, "prior")
    if any(value <= 0 for value in values):
        raise ValueError(
            f"prior holds a value <= 0 ({min(values)!r}); every position needs a positive prior"
        )
    total = math.fsum(values)
    if abs(total - 1.0) > SUM_TOLERANCE:
        raise ValueError(f"prior sums to {total:.9g}, not 1 within {SUM_TOLERANCE:g}")
    return values


def debias(log_scores: Sequence[float], prior: Sequence[float]) -> list[float]:
    """log p(i) − log prior(i), position by position: the debiased view is its softmax, the
    calibrated view its tempered softmax. Any per-row constant in `log_scores` (logits or
    log-probabilities) cancels in that softmax."""
    if len(log_scores) != len(prior):
        raise ValueError(
            f"a prior over {len(prior)} positions cannot debias {len(log_scores)} options"
        )
    return [score - math.log(weight) for score, weight in zip(log_scores, prior)]
