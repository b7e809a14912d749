"""An export of what audits learned (extension): replicas' /v1/audit answers summed into a bound
calibration file whose priors are the live ones. Pure: the command (cli.py) fetches and writes.

Rules:
1. Every replica must serve the same calibration (its sha256) on the same binding (model, revision,
   prompt version, dtype); otherwise their audits measured different things and nothing is written.
2. A (workload, n) takes the live prior, summed over replicas (decisions/live_prior.py), once it has
   at least prior.MIN_DECISIONS audits against the prior served now; otherwise it keeps the served
   entry, and the export says so. A tally against an older prior (audits not yet resumed since a
   reload) is not used.
3. An escalation threshold is refitted where the served entry has one, from the audits' margins
   (live_prior.fitted_threshold), never below the served one: orderings "adaptive" audits only the
   decisions it did not escalate, so the audits never saw a margin below it.
4. Every temperature is kept as served; one fitted for method "prior" was fitted against the old
   prior, which the export says (a warning), so the operator refits it before trusting it.
5. The document is checked by calibration_file.bound before it is returned: what is written loads.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import calibration_file, live_prior
from . import prior as position_prior

DEFAULT_TARGET = 0.97  # the share of one-row answers that must keep the rotations' top


@dataclass(frozen=True)
class Exported:
    """The calibration document to write, and what the operator must read before applying it."""

    document: dict[str, Any]
    notes: list[str]
    warnings: list[str]


def refitted_threshold(served: float, added: live_prior.Summed, target: float) -> float:
    """The threshold the audits' margins support, never below the one served (Rule 3)."""
    return max(
        served,
        live_prior.fitted_threshold(added.disagreeing, added.confirmed, added.audits, target),
    )


def _same_calibration(replicas: Sequence[Mapping[str, Any]]) -> None:
    """Rule 1."""
    keys = (*calibration_file.BINDING_KEYS, "dtype")
    first = replicas[0]
    for index, other in enumerate(replicas[1:], start=2):
        for key in keys:
            if other["calibration"].get(key) != first["calibration"].get(key):
                raise ValueError(
                    f"replica {index} serves {key} {other['calibration'].get(key)!r}, replica 1 "
                    f"{first['calibration'].get(key)!r}: their audits cannot be added"
                )
        if other["calibration_sha256"] != first["calibration_sha256"]:
            raise ValueError(
                f"replica {index} serves another calibration file than replica 1 "
                "(calibration_sha256): reload them all with one file first"
            )


def _tallies(
    replicas: Sequence[Mapping[str, Any]], served: Mapping[str, Any]
) -> tuple[dict[tuple[str, str], list[Mapping[str, Any]]], list[str]]:
    """Each (workload, n)'s tallies against the prior served now, over every replica (Rule 2)."""
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    stale: set[tuple[str, str]] = set()
    for replica in replicas:
        for tally in replica["audits"]:
            key = (tally["workload"], str(tally["n"]))
            entry = served.get(key[0], {}).get(key[1])
            if "sums" not in tally or entry is None:
                continue
            if list(tally["served_prior"]) != list(entry["prior"]):
                stale.add(key)
                continue
            grouped[key].append(tally)
    notes = [
        f"{workload} n={n}: a replica's audits were counted against an older prior and are left out"
        for workload, n in sorted(stale)
    ]
    return grouped, notes


def exported(replicas: Sequence[Mapping[str, Any]], target: float, date: str) -> Exported:
    """The calibration document from replicas' /v1/audit answers (Rules 1-5); ValueError naming what
    cannot be exported."""
    if not replicas:
        raise ValueError("no replica to export from")
    _same_calibration(replicas)
    document = copy.deepcopy(dict(replicas[0]["calibration"]))
    priors = document.get("priors", {})
    grouped, notes = _tallies(replicas, priors)
    warnings: list[str] = []
    total = 0
    for workload, counts in sorted(priors.items()):
        for n, entry in sorted(counts.items()):
            tallies = grouped.get((workload, n), [])
            added = live_prior.summed(tallies) if tallies else None
            if added is None or added.audits < position_prior.MIN_DECISIONS:
                audits = 0 if added is None else added.audits
                notes.append(f"{workload} n={n}: {audits} audit(s); kept the served prior")
                continue
            total += added.audits
            entry["prior"], entry["decisions"] = added.live(), added.audits
            if "threshold" in entry:
                entry["threshold"] = refitted_threshold(entry["threshold"], added, target)
            notes.append(f"{workload} n={n}: the live prior of {added.audits} audits")
            if position_prior.METHOD in document.get("workloads", {}).get(workload, {}):
                warnings.append(
                    f"workload {workload!r}: its temperature for method {position_prior.METHOD!r} was "
                    "fitted against the old prior; refit it before trusting its calibrated view"
                )
    document["fitted"] = {
        "by": "semif-serve audit export",
        "date": date,
        "replicas": len(replicas),
        "audits": total,
        "target": target,
        "from_sha256": replicas[0]["calibration_sha256"],
    }
    calibration_file.bound(document)  # Rule 5: raises what a server would refuse
    return Exported(document, notes, sorted(set(warnings)))
