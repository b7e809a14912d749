"""Calibrated views: a workload's temperature applied beside SemIf's native scores, never over them
(INV-1: `calibrated` is an extra key); the temperatures come from calibration_file.Table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .numerics import softmax
from .views import CalibratedView


def tempered_softmax(logits: Sequence[float], temperature: float) -> list[float]:
    """softmax(logits / T); max-shifted, so extreme logits stay finite."""
    return softmax([value / temperature for value in logits])


def calibrated_view(result: Mapping[str, Any], workload: str, temperature: float) -> CalibratedView:
    """The `calibrated` view of one SemIf result."""
    return CalibratedView(
        workload, temperature, tempered_softmax(result["option_logits"], temperature)
    )


def combined_view(
    workload: str, method: str, temperature: float, mean_log_probabilities: Sequence[float]
) -> CalibratedView:
    """`combined.calibrated` for an averaged decision: softmax(mean per-option log-softmax / T)."""
    return CalibratedView(
        workload, temperature, tempered_softmax(mean_log_probabilities, temperature), method
    )
