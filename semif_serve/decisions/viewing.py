"""Each decision's view of its slice of the engine's results: native, calibrated, or combined.

The one place the server applies a decision's method and the calibration table, the position
prior among them: the request model already refused what these lookups would not find. An
adaptive decision's view is that of the method it reduced to (decisions/adaptive.py).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from . import adaptive, averaging, calibration
from .calibration_file import Table
from .request_model import NONE_ESCALATED, DecideRequest, Decision, Escalated
from .views import Averaged, Native, View


def views(
    request: DecideRequest,
    results: Sequence[Mapping[str, Any]],
    table: Table,
    escalated: Escalated = NONE_ESCALATED,
) -> list[View]:
    """Every decision's view, in the request's order, from its own slice of `results` (every engine
    call's where decisions `escalated`, as `adaptive.Progress` orders them)."""
    return [
        view(decision, results[rows], request.workload, table)
        for decision, rows in request.planned(len(results), escalated)
    ]


def view(
    decision: Decision, results: Sequence[Mapping[str, Any]], workload: str | None, table: Table
) -> View:
    """One decision's view. A workload adds the calibrated view with the temperature fitted for the
    decision's method (where the method leaves it optional, only if fitted), and names the prior
    divided out where the method needs one."""
    if not decision.averaged:
        (result,) = results
        if workload is None:
            return Native(result)
        plain = table[workload][decision.method]
        return Native(result, calibration.calibrated_view(result, workload, plain))
    if decision.method.rules.escalates:
        ordered = adaptive.in_rotation_order(decision, results)
        reduced, rows = adaptive.basis(decision, ordered)
        return adaptive.labelled(
            _averaged(reduced, rows, workload, table), decision, ordered, workload, table
        )
    return _averaged(decision, results, workload, table)


def _averaged(
    decision: Decision, results: Sequence[Mapping[str, Any]], workload: str | None, table: Table
) -> Averaged:
    """The combined view over an averaged method's rows."""
    method = decision.method
    if workload is None:
        return averaging.combine(decision.row, method, results)
    # Where the method requires a temperature, the request model refused a workload without one.
    temperature = table[workload].get(method)
    temper = (
        None
        if temperature is None
        else functools.partial(calibration.combined_view, workload, method, temperature)
    )
    if not method.needs_prior:
        return averaging.combine(decision.row, method, results, temper)
    prior = table.priors[workload][len(decision.row["options"])].prior
    return averaging.combine(decision.row, method, results, temper, prior)
