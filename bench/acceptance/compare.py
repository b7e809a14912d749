"""The two figures every agreement check reports: top-choice agreement and max probability gap.

Results are matched by row id and options by option id, never by position, so
a reordered or relabelled answer cannot agree by accident.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Result = Mapping[str, Any]


def top(result: Result) -> str:
    """The option id with the highest native probability (first on a tie, as argmax does)."""
    probabilities = result["probabilities"]
    return result["option_ids"][max(range(len(probabilities)), key=probabilities.__getitem__)]


def by_option(result: Result) -> dict[str, float]:
    return dict(zip(result["option_ids"], result["probabilities"]))


def keyed(results: Iterable[Result]) -> dict[str, Result]:
    """Results by id; a repeated id is an error (it would hide a missing one)."""
    out: dict[str, Result] = {}
    for result in results:
        if result["id"] in out:
            raise ValueError(f"result id {result['id']!r} appears twice")
        out[result["id"]] = result
    return out


@dataclass
class Comparison:
    """How two runs over the same ids agree."""

    rows: int = 0
    agreeing: int = 0
    max_gap: float = 0.0
    worst: str | None = None
    disagreeing: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def agreement(self) -> float:
        return self.agreeing / self.rows if self.rows else 0.0

    def figures(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "top_choice_agreement": round(self.agreement, 6),
            "max_probability_gap": self.max_gap,
            "worst_row": self.worst,
            "disagreeing_rows": self.disagreeing,
            "missing_rows": self.missing,
        }


def gap(left: Result, right: Result) -> float:
    """Largest absolute probability difference over the options, matched by id."""
    a, b = by_option(left), by_option(right)
    if set(a) != set(b):
        raise ValueError(f"row {left['id']!r}: option ids differ ({sorted(a)} vs {sorted(b)})")
    return max(abs(a[key] - b[key]) for key in a)


def compare(
    left: Mapping[str, Result], right: Mapping[str, Result], ids: Iterable[str]
) -> Comparison:
    """Agreement of `right` with `left` over `ids`; an id missing on either side is reported."""
    outcome = Comparison()
    for row_id in ids:
        if row_id not in left or row_id not in right:
            outcome.missing.append(row_id)
            continue
        outcome.rows += 1
        if top(left[row_id]) == top(right[row_id]):
            outcome.agreeing += 1
        else:
            outcome.disagreeing.append(row_id)
        difference = gap(left[row_id], right[row_id])
        if outcome.worst is None or difference > outcome.max_gap:
            outcome.max_gap, outcome.worst = difference, row_id
    return outcome
