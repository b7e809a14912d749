"""Each decision's view of its slice of the engine's results: native, calibrated, or combined.

The one place the server applies a decision's method and the calibration table, the position
prior among them: the request model already refused what these lookups would not find.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from . import averaging, calibration
from .calibration_file import PLAIN_METHOD, Table
from .prior import METHOD as PRIOR
from .request_model import DecideRequest, Decision
from .views import Native, View


def views(request: DecideRequest, results: Sequence[Mapping[str, Any]], table: Table) -> list[View]:
    """Every decision's view, in the request's order, from its own slice of `results`."""
    return [
        view(decision, results[rows], request.workload, table)
        for decision, rows in request.planned(len(results))
    ]


def view(
    decision: Decision, results: Sequence[Mapping[str, Any]], workload: str | None, table: Table
) -> View:
    """One decision's view. A workload adds the calibrated view with the temperature fitted for the
    decision's method; under the prior the workload names the prior, and a temperature is optional."""
    if not decision.averaged:
        (result,) = results
        if workload is None:
            return Native(result)
        plain = table[workload][PLAIN_METHOD]
        return Native(result, calibration.calibrated_view(result, workload, plain))
    method = decision.method
    if workload is None:
        return averaging.combine(decision.row, method, results)
    temperatures = table[workload]
    # Under the prior the temperature is optional; for any other method the request model refused one without.
    temperature: float | None = temperatures.get(PRIOR) if method == PRIOR else temperatures[method]
    temper = (
        None
        if temperature is None
        else functools.partial(calibration.combined_view, workload, method, temperature)
    )
    if method != PRIOR:
        return averaging.combine(decision.row, method, results, temper)
    prior = table.priors[workload][len(decision.row["options"])].prior
    return averaging.combine(decision.row, PRIOR, results, temper, prior)
