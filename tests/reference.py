"""The tests' softmax reference: written here, independently of semif_serve.decisions.numerics.

One implementation for every test that predicts probabilities (fake results,
averaged and calibrated views), max-shifted so logits of +-1e4 stay finite.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def softmax(values: Sequence[float], temperature: float = 1.0) -> list[float]:
    """softmax(values / temperature)."""
    scaled = [value / temperature for value in values]
    top = max(scaled)
    weights = [math.exp(value - top) for value in scaled]
    total = math.fsum(weights)
    return [weight / total for weight in weights]
