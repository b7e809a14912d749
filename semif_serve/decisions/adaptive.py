"""Orderings "adaptive" (extension): the prior's one row, and the other rotations only where it is unsure.

Rules:
1. The request's first engine call scores an adaptive decision once, in the caller's order. Its
   margin is the top minus the runner-up of the prior's debiased, uncalibrated probabilities.
2. Below the workload's threshold for n the decision escalates: the request's second engine call
   scores its other n-1 rotations, every escalated decision of the request in that one call
   (`second_rows`), and its answer is averaging's combination of all n rotations, the first being
   the row already scored. Otherwise the prior's one-row answer stands.
3. Its view is the view of the method it reduced to (`basis`: "prior" or "rotations", with that
   method's temperature where the workload has one), labelled "adaptive" with the escalation.
Pure: no I/O. The service makes the calls (service/escalation.py); the request model has refused
a decision whose workload holds no prior or no threshold for its n before anything is scored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import averaging
from .calibration_file import FittedPrior, Table
from .methods import Method
from .numerics import margin as margin  # the one-row answer's sureness, shared with audits
from .request_model import DecideRequest, Decision
from .views import Averaged, Escalation


def _entry(decision: Decision, workload: str | None, table: Table) -> tuple[FittedPrior, float]:
    """The workload's prior for the decision's n, and its threshold (the request model checked both)."""
    if workload is None:
        raise ValueError(f"decision {decision.row['id']!r} is adaptive without a workload")
    entry = table.priors[workload][len(decision.row["options"])]
    if entry.threshold is None:
        raise ValueError(f"decision {decision.row['id']!r} has a prior without a threshold")
    return entry, entry.threshold


def escalates(
    decision: Decision, result: Mapping[str, Any], workload: str | None, table: Table
) -> bool:
    """Whether an adaptive decision's first row leaves it unsure: its prior's margin below the threshold."""
    entry, threshold = _entry(decision, workload, table)
    debiased = averaging.combine(decision.row, Method.PRIOR, [result], prior=entry.prior)
    return margin(debiased.combined.probabilities) < threshold


def escalated(
    request: DecideRequest, results: Sequence[Mapping[str, Any]], table: Table
) -> frozenset[int]:
    """The indices of the request's decisions that escalate, from the first call's `results`."""
    return frozenset(
        index
        for index, (decision, rows) in enumerate(request.planned(len(results)))
        if decision.method.rules.escalates
        and escalates(decision, results[rows][0], request.workload, table)
    )


def second_rows(request: DecideRequest, indices: Iterable[int]) -> list[dict[str, Any]]:
    """The second call's rows: each escalated decision's other orderings, in the request's order."""
    return [row for index in sorted(indices) for row in request.decisions[index].rest()]


def merged(
    request: DecideRequest,
    first: Sequence[Mapping[str, Any]],
    second: Sequence[Mapping[str, Any]],
    indices: frozenset[int],
) -> list[Mapping[str, Any]]:
    """Both calls' results as `DecideRequest.planned` reads them: each decision's first-call rows, then
    where it escalated its second-call rows, in the request's order."""
    rest = iter(second)
    results: list[Mapping[str, Any]] = []
    for index, (decision, rows) in enumerate(request.planned(len(first))):
        results.extend(first[rows])
        if index in indices:
            results.extend(next(rest) for _ in range(decision.row_count - decision.first_count))
    if next(rest, None) is not None:
        raise RuntimeError("the second call returned more results than its rows")
    return results


def _escalated(decision: Decision, results: Sequence[Mapping[str, Any]]) -> bool:
    """A decision escalated where it holds more rows than its first call scored."""
    return len(results) > decision.first_count


def basis(decision: Decision, results: Sequence[Mapping[str, Any]]) -> Decision:
    """The decision under the method its answer reduces to: "prior" over its one row, or "rotations"
    over all its rows where it escalated."""
    method = Method.ROTATIONS if _escalated(decision, results) else Method.PRIOR
    return Decision(decision.row, method)


def labelled(view: Averaged, decision: Decision, workload: str | None, table: Table) -> Averaged:
    """Its basis method's view as the adaptive decision's: method "adaptive", and its escalation."""
    _, threshold = _entry(decision, workload, table)
    escalation = Escalation(_escalated(decision, view.results), threshold)
    combined = dataclasses.replace(view.combined, method=decision.method, escalation=escalation)
    return dataclasses.replace(view, combined=combined)
