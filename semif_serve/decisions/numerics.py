"""Stable softmax arithmetic shared by averaging, calibration and the stub.

Max-shifted so no weight overflows: logits of ±1e4 stay finite.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def softmax(values: Sequence[float]) -> list[float]:
    """softmax shifted by the maximum, so no weight overflows and the largest is 1."""
    top = max(values)
    weights = [math.exp(value - top) for value in values]
    total = math.fsum(weights)
    return [weight / total for weight in weights]


def log_softmax(values: Sequence[float]) -> list[float]:
    """log softmax via a max-shifted log-sum-exp, finite for values of any finite size."""
    top = max(values)
    lse = top + math.log(math.fsum(math.exp(value - top) for value in values))
    return [value - lse for value in values]


def margin(probabilities: Sequence[float]) -> float:
    """The top probability minus the runner-up's: how sure a one-row answer is."""
    top, runner_up = sorted(probabilities, reverse=True)[:2]
    return top - runner_up
