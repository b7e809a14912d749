"""System One's defaults (SEMIF_SYSTEMONE_ORDERINGS and SEMIF_SYSTEMONE_WORKLOAD) checked against
the calibration table: the default workload must be in it and hold what the default method needs
(decisions/methods.py): its priors where it needs them, a temperature where it requires one.

Run wherever a calibration table is taken: at startup before the model loads (server.py), and where
the System One policy is built from the table (the service, at start and on every reload), so a
reloaded file that lacks what the defaults need is refused and the old table kept.
"""

from __future__ import annotations

from ..decisions import methods
from ..decisions.calibration_file import Refused, Table


def check(table: Table, orderings: str, workload: str | None) -> None:
    """Refuse a table that cannot serve the defaults, naming the setting and what the table holds."""
    if workload is None:
        return
    method = methods.TABLE[orderings]
    if workload not in table:
        raise Refused(
            f"SEMIF_SYSTEMONE_WORKLOAD names {workload!r}, which SEMIF_CALIBRATION does not hold "
            f"(it holds: {', '.join(sorted(table)) or 'none'})"
        )
    if method.needs_prior and workload not in table.priors:
        raise Refused(
            f"SEMIF_SYSTEMONE_WORKLOAD {workload!r} has no priors for SEMIF_SYSTEMONE_ORDERINGS="
            f"{orderings!r}; workloads with priors: {', '.join(sorted(table.priors)) or 'none'}"
        )
    if method.temperature_required and orderings not in (fitted := table.methods()[workload]):
        raise Refused(
            f"SEMIF_SYSTEMONE_WORKLOAD {workload!r} has no temperature for "
            f"SEMIF_SYSTEMONE_ORDERINGS={orderings!r}; it has: {', '.join(sorted(fitted)) or 'none at all'}"
        )
