"""Temperature scaling (Guo et al. 2017): the one T that minimises the NLL of the labels.

Rules: T is searched as log T within the contract's [T_MIN, T_MAX], so every
fitted value is one the server accepts; the objective is metrics.nll_of_scores,
the same NLL the reports print. Calibrated probabilities come from the server
package's own tempered softmax, so what is fitted here is what is served.

Theory: for fixed scores, NLL(1/T) is a log-sum-exp of functions linear in 1/T
minus a linear term, hence convex in 1/T, and so unimodal in log T (a monotone
change of variable). A bounded Brent search (scipy's `minimize_scalar`,
method="bounded") therefore finds the minimum on the interval; it never
evaluates the end points themselves, so both bounds are compared as well and
the best of the three is kept (an optimum on a bound is a real outcome: a
model that is always right wants the sharpest T allowed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy.optimize import minimize_scalar

from semif_serve.decisions.calibration import tempered_softmax
from semif_serve.decisions.calibration_file import T_MAX, T_MIN

from .metrics import Vector, nll_of_scores

LOG_BOUNDS = (math.log(T_MIN), math.log(T_MAX))
XATOL = 1e-7  # in log T: far below the 2% the tests ask for


def fit_temperature(scores: Sequence[Vector], labels: Sequence[int]) -> float:
    """The T in [T_MIN, T_MAX] minimising the mean NLL of softmax(scores / T) at the labels."""
    if not labels:
        raise ValueError("no rows to fit a temperature on")

    def nll(t):
        return nll_of_scores(scores, labels, t)

    found = minimize_scalar(
        lambda log_t: nll(math.exp(log_t)),
        bounds=LOG_BOUNDS,
        method="bounded",
        options={"xatol": XATOL},
    )
    inside = min(
        max(math.exp(float(found.x)), T_MIN), T_MAX
    )  # exp(log T) may round a hair past a bound
    return min(
        (inside, T_MIN, T_MAX), key=nll
    )  # the bounds themselves are never evaluated by the search


def calibrate(scores: Sequence[Vector], temperature: float) -> list[list[float]]:
    """softmax(scores / T) per row, as the server computes a calibrated view."""
    return [tempered_softmax(list(s), temperature) for s in scores]
