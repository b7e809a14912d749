"""The views of one decision's scored rows, as typed values; the edge renders them (`as_json`).

Rule: the scorer's results pass through unchanged (INV-1): a Native view holds the result
mapping itself and an Averaged view each ordering's; no key of theirs is dropped, renamed or
reordered. What the service adds (`calibrated`, `combined`) sits beside them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CalibratedView:
    """A workload's temperature applied to a distribution: a result's `calibrated`, or with the
    averaging `method` named, `combined.calibrated`."""

    workload: str
    temperature: float
    probabilities: list[float]
    method: str | None = None


@dataclass(frozen=True)
class DividedPrior:
    """The position prior divided out of a debiased decision (`combined.prior`)."""

    probabilities: tuple[float, ...]


@dataclass(frozen=True)
class Escalation:
    """An adaptive decision's escalation (extension): the workload's threshold, and the rows it scored
    (1; more where its prior's margin fell below the threshold, so that it scored the half turn, and
    every rotation where the two rows disagreed)."""

    threshold: float
    rows: int

    @property
    def escalated(self) -> bool:
        """Its margin fell below the threshold: it scored more than its first row."""
        return self.rows > 1


@dataclass(frozen=True)
class Combined:
    """One decision over its orderings: the combined distribution and how far the orderings agreed."""

    method: str
    count: int  # the orderings scored (wire: `combined.orderings`)
    probabilities: list[float]
    top: str
    agreement: float
    spread: dict[str, list[float]]
    prior: DividedPrior | None = None
    calibrated: CalibratedView | None = None
    escalation: Escalation | None = None


@dataclass(frozen=True)
class Native:
    """A decision scored once: the scorer's own result, and its calibrated view where a workload applies."""

    result: Mapping[str, Any]
    calibrated: CalibratedView | None = None

    @property
    def option_ids(self) -> list[str]:
        return list(self.result["option_ids"])


@dataclass(frozen=True)
class Averaged:
    """A decision scored under several orderings (or under "prior"): the combined view and each
    ordering's result, in expansion order (wire: `orderings`)."""

    id: str
    option_ids: list[str]
    combined: Combined
    results: list[Mapping[str, Any]]


View = Native | Averaged


def distribution(view: View) -> list[float]:
    """The probabilities an answer is read from: the combined view when averaged, else the native
    one; its calibrated view wherever the service built one."""
    source: Combined | Native = view.combined if isinstance(view, Averaged) else view
    if source.calibrated is not None:
        return source.calibrated.probabilities
    if isinstance(source, Combined):
        return source.probabilities
    return list(source.result["probabilities"])


def _calibrated_json(view: CalibratedView) -> dict[str, Any]:
    method = {} if view.method is None else {"method": view.method}
    return {
        "workload": view.workload,
        **method,
        "temperature": view.temperature,
        "probabilities": view.probabilities,
    }


def _combined_json(view: Combined) -> dict[str, Any]:
    combined: dict[str, Any] = {
        "method": view.method,
        "orderings": view.count,
        "probabilities": view.probabilities,
        "top": view.top,
        "agreement": view.agreement,
        "spread": view.spread,
    }
    if view.prior is not None:
        combined["prior"] = list(view.prior.probabilities)
    if view.escalation is not None:
        combined["rows"] = view.escalation.rows
        combined["escalated"] = view.escalation.escalated
        combined["threshold"] = view.escalation.threshold
    if view.calibrated is not None:
        combined["calibrated"] = _calibrated_json(view.calibrated)
    return combined


def as_json(view: View) -> Mapping[str, Any]:
    """The view as the wire shows it: a native result as the scorer returned it (the same object when
    nothing is added), `calibrated` after its keys; an averaged one as id, option_ids, combined, orderings."""
    if isinstance(view, Native):
        if view.calibrated is None:
            return view.result
        return {**view.result, "calibrated": _calibrated_json(view.calibrated)}
    return {
        "id": view.id,
        "option_ids": view.option_ids,
        "combined": _combined_json(view.combined),
        "orderings": view.results,
    }
