"""The calibration in force: one table, what the routes derive from it, and which file it came from.

A request reads it once, at the body pipeline's read step, and keeps it to its response; a reload
(service/reload.py) builds a new one and swaps it in whole, so no request sees two tables.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from ..config import Settings
from ..decisions import calibration_file, request_model
from ..systemone import translate


@dataclass(frozen=True)
class LoadedCalibration:
    """One calibration table and what the routes derive from it: their request limits and the System
    One policy."""

    table: calibration_file.Table
    limits: request_model.Limits
    policy: translate.Policy
    sha256: str | None  # of the SEMIF_CALIBRATION file; None without one
    loaded_at: float  # unix time


def loaded(
    table: calibration_file.Table, sha256: str | None, settings: Settings, models: Iterable[str]
) -> LoadedCalibration:
    """What `table` gives the routes under `settings`, System One accepting the `models` names."""
    limits = request_model.Limits(
        settings.max_decisions,
        frozenset(table),
        table.methods(),
        table.prior_counts(),
        table.threshold_counts(),
    )
    policy = translate.Policy(
        limits, frozenset(models), settings.systemone_orderings, settings.systemone_workload
    )
    return LoadedCalibration(table, limits, policy, sha256, time.time())
