"""System One's defaults (SEMIF_SYSTEMONE_ORDERINGS and SEMIF_SYSTEMONE_WORKLOAD) checked against
the calibration table: the default workload must be in it and hold what the default method needs
(its `Method` says what: decisions/methods.py), for some option count: its priors, and for
"adaptive" a threshold beside them, or a temperature where the method requires one.

Run wherever a calibration table is taken: at startup before the model loads (server.py), and where
the System One policy is built from the table (the service, at start and on every reload), so a
reloaded file that lacks what the defaults need is refused and the old table kept.
"""

from __future__ import annotations

from ..decisions import methods
from ..decisions.calibration_file import Refused, Table


def check(table: Table, orderings: str, workload: str | None) -> None:
    """Refuse a table that cannot serve the defaults, naming the setting and what the table holds
    (a default method that needs a workload and names none is the settings' own refusal)."""
    if workload is None:
        return
    if workload not in table:
        raise Refused(
            f"SEMIF_SYSTEMONE_WORKLOAD names {workload!r}, which SEMIF_CALIBRATION does not hold "
            f"(it holds: {', '.join(sorted(table)) or 'none'})"
        )
    fit = table.fit(workload)
    lack = methods.BY_NAME[orderings].lacks(fit, None)
    if lack is methods.Need.PRIOR:
        raise Refused(
            f"SEMIF_SYSTEMONE_WORKLOAD {workload!r} has no priors for SEMIF_SYSTEMONE_ORDERINGS="
            f"{orderings!r}; workloads with priors: {', '.join(sorted(table.priors)) or 'none'}"
        )
    if lack is methods.Need.THRESHOLD:
        raise Refused(
            f"SEMIF_SYSTEMONE_WORKLOAD {workload!r} has no threshold beside its priors for "
            f"SEMIF_SYSTEMONE_ORDERINGS={orderings!r}; fit one with `bench prior`"
        )
    if lack is methods.Need.TEMPERATURE:
        raise Refused(
            f"SEMIF_SYSTEMONE_WORKLOAD {workload!r} has no temperature for "
            f"SEMIF_SYSTEMONE_ORDERINGS={orderings!r}; it has: "
            f"{', '.join(sorted(fit.temperatures)) or 'none at all'}"
        )
