"""Calibrated views: per-workload temperatures applied beside SemIf's native scores.

Temperature scaling never changes the argmax, and the native `probabilities`
stay untouched (INV-1): the calibrated view is an extra key, never a rewrite.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from .numerics import softmax

T_MIN, T_MAX = 0.05, 20.0
VARIABLE = "SEMIF_CALIBRATION"


def _temperature(workload: str, value: Any) -> float:
    # bool is an int subclass, and a tiny T overflowed to NaN once (S8).
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{VARIABLE}: workload {workload!r} needs a number, got {value!r}")
    # Range first: math.isfinite on a JSON integer too big for a float raises
    # OverflowError, not the ValueError naming the variable; NaN fails the range too.
    if not (T_MIN <= value <= T_MAX and math.isfinite(value)):
        raise ValueError(f"{VARIABLE}: workload {workload!r} temperature {value!r} is not in [{T_MIN}, {T_MAX}]")
    return float(value)


def load_table(path: str) -> dict[str, float]:
    """Read `{workload: T}` from a JSON file; raise ValueError naming the variable."""
    try:
        with open(path, encoding="utf-8") as handle:
            table = json.load(handle)
    except OSError as error:
        raise ValueError(f"{VARIABLE}: cannot read {path!r}: {error.strerror}") from None
    except ValueError as error:
        raise ValueError(f"{VARIABLE}: {path!r} is not valid JSON: {error}") from None
    if not isinstance(table, dict):
        raise ValueError(f"{VARIABLE}: {path!r} must hold a JSON object {{workload: temperature}}")
    return {str(name): _temperature(name, value) for name, value in table.items()}


def tempered_softmax(logits: list[float], temperature: float) -> list[float]:
    """softmax(logits / T); max-shifted, so extreme logits stay finite."""
    return softmax([value / temperature for value in logits])


def calibrated_view(result: Mapping[str, Any], workload: str, temperature: float) -> dict[str, Any]:
    """The `calibrated` key for one SemIf result."""
    return {
        "workload": workload,
        "temperature": temperature,
        "probabilities": tempered_softmax(result["option_logits"], temperature),
    }
