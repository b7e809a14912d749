"""Methods derived offline from decisions scored once under their rotations: prior, adaptive, PriDe's.

A test decision scored under its n rotations holds what every other method would have seen:
the caller's-order row gives `none`, and with the fitted prior `prior`; with the threshold it
gives `adaptive` (the served staged rule: that row where its margin is at least the threshold;
below it, that row's answer at two rows where the half turn confirms its top, else the rotations'
average, n rows); and PriDe's own protocol (the prior estimated from a random 5 % of the test
decisions, those answered with their rotations, the rest with one debiased row). So a question
costs n rows, and the whole accuracy-against-rows curve of the threshold comes for free.

Rules a newcomer could break:
1. Only rows whose `rotations` record keeps its `results` (a `--derive` run) can be derived;
   the others are left as they are, and a method a row cannot have is simply absent from it.
2. The one-row arithmetic is escalation.debiased, the server's `prior.debias`, and the half turn's
   check the server's `adaptive.confirms`; labels are read only to score, never to derive.
3. PriDe's sample is drawn by a hash of the id and a seed, so the same run derives the same
   sample every time.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semif_serve.decisions import adaptive as served
from semif_serve.decisions import prior as pride

from . import escalation, metrics
from .scoring import ROTATIONS, Record

PRIOR, ADAPTIVE, PRIDE = "prior", "adaptive", "pride"
DERIVED = (PRIOR, ADAPTIVE, PRIDE)
PRIDE_SHARE = 0.05
NOT_DERIVED = {
    PRIOR: "not derived: no prior in --calibration for its (workload, option count)",
    ADAPTIVE: "not derived: no prior and threshold in --calibration for its (workload, option count)",
    PRIDE: "not derived: the run kept no rotation results for it",
}
Z95 = 1.959963984540054


@dataclass(frozen=True)
class Entry:
    prior: tuple[float, ...]
    threshold: float | None


Table = dict[tuple[str, int], Entry]


def read_table(path: Path) -> Table:
    """(workload, n) -> prior and threshold, from a calibration file `bench prior` wrote."""
    document = json.loads(path.read_text(encoding="utf-8"))
    table: Table = {}
    for workload, entries in (document.get("priors") or {}).items():
        for n, entry in entries.items():
            prior = pride.checked(entry["prior"], int(n))
            threshold = entry.get("threshold")
            if threshold is not None and not (
                isinstance(threshold, (int, float)) and 0 <= threshold <= 1
            ):
                raise ValueError(f"{path}: priors {workload!r} {n}: threshold {threshold!r}")
            table[workload, int(n)] = Entry(prior, threshold)
    return table


def one_row(results: Sequence[dict[str, Any]], prior: Sequence[float]) -> Record:
    """The caller's-order row (the first rotation) debiased by `prior`: what `prior` serves; and
    whether adaptive, escalated, would stop there at two rows (its half turn confirms the top, and
    rotations are left to score)."""
    probabilities = escalation.debiased(results[0]["option_logits"], prior)
    return {
        "probabilities": probabilities,
        "scores": [math.log(max(p, math.ulp(0.0))) for p in probabilities],
        "top": escalation.top(probabilities),
        "agreement": 1.0,
        "orderings": 1,
        "margin": escalation.margin(probabilities),
        "confirmed": len(served.stages(len(results))) == 3 and served.confirmed(results, prior),
    }


def answered_by(record: Record, orderings: int, escalated: bool) -> Record:
    return {
        **{k: v for k, v in record.items() if k != "results"},
        "orderings": orderings,
        "escalated": escalated,
    }


def adaptive(single: Record, rotations: Record, threshold: float) -> Record:
    """The served staged rule: one row where its margin reaches the threshold; below it, that row's
    answer at two rows where the half turn confirmed it, else the rotations (all n rows)."""
    if single["margin"] >= threshold:
        return answered_by(single, 1, False)
    if single["confirmed"]:
        return answered_by(single, 2, True)
    return answered_by(rotations, rotations["orderings"], True)


def _sample_key(row_id: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}:{row_id}".encode()).hexdigest()


def pride_protocol(
    rows: Sequence[dict[str, Any]], group_of: Any, share: float = PRIDE_SHARE, seed: int = 0
) -> dict[str, Record]:
    """PriDe's protocol per (workload, n): a `share` sample (at least one decision) answered by its
    rotations and estimating the prior; every other decision one row debiased by it."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(group_of(row), []).append(row)
    out: dict[str, Record] = {}
    for members in groups.values():
        ranked = sorted(members, key=lambda row: _sample_key(row["id"], seed))
        sample = ranked[: max(1, math.ceil(share * len(members)))]
        prior = pride.workload_prior(
            [pride.decision_prior(row["methods"][ROTATIONS]["results"]) for row in sample]
        )
        for row in sample:
            out[row["id"]] = answered_by(row["methods"][ROTATIONS], len(prior), True)
        for row in ranked[len(sample) :]:
            out[row["id"]] = answered_by(
                one_row(row["methods"][ROTATIONS]["results"], prior), 1, False
            )
    return out


def derivable(row: dict[str, Any]) -> bool:
    return "results" in row["methods"].get(ROTATIONS, {})


def add(scored: dict[str, Any], table: Table) -> dict[str, Any]:
    """`scored` with prior, adaptive (where the table holds a threshold) and pride added to each derivable row."""
    default = scored.get("workload") or "default"

    def group(row: dict[str, Any]) -> tuple[str, int]:
        return (row.get("workload") or default, row["options"])

    rows = [row for row in scored["rows"] if derivable(row)]
    protocol = pride_protocol(rows, group)
    out_rows = []
    for row in scored["rows"]:
        methods = dict(row["methods"])
        if derivable(row):
            rotations = methods[ROTATIONS]
            entry = table.get(group(row))
            if entry is not None:
                single = one_row(rotations["results"], entry.prior)
                methods[PRIOR] = answered_by(single, 1, False)
                if entry.threshold is not None:
                    methods[ADAPTIVE] = adaptive(single, rotations, entry.threshold)
            methods[PRIDE] = protocol[row["id"]]
        out_rows.append({**row, "methods": methods})
    asked = [m for m in scored["methods"] if m not in DERIVED]
    return {
        **scored,
        "methods": [*asked, *DERIVED],
        "rows": out_rows,
        "skipped": {
            **{m: ids for m, ids in scored["skipped"].items() if m not in DERIVED},
            **{m: [r["id"] for r in out_rows if m not in r["methods"]] for m in DERIVED},
        },
    }


def wilson(correct: int, total: int) -> tuple[float, float]:
    """The 95 % Wilson score interval of a proportion."""
    if not total:
        raise ValueError("no rows")
    p = correct / total
    centre = (p + Z95**2 / (2 * total)) / (1 + Z95**2 / total)
    half = Z95 * math.sqrt(p * (1 - p) / total + Z95**2 / (4 * total**2)) / (1 + Z95**2 / total)
    return centre - half, centre + half


def mcnemar(first: Sequence[bool], second: Sequence[bool]) -> dict[str, Any]:
    """Exact McNemar test on paired outcomes: the discordant counts and the two-sided p-value."""
    only_first = sum(a and not b for a, b in zip(first, second))
    only_second = sum(b and not a for a, b in zip(first, second))
    discordant = only_first + only_second
    tail = (
        math.fsum(math.comb(discordant, k) for k in range(min(only_first, only_second) + 1))
        / 2**discordant
        if discordant
        else 1.0
    )
    return {"only_first": only_first, "only_second": only_second, "p": min(1.0, 2 * tail)}


def rstd(tops: Sequence[int], labels: Sequence[int]) -> float:
    """PriDe's balance measure: the standard deviation of recall across the answer positions."""
    recalls = []
    for position in sorted(set(labels)):
        mine = [t == y for t, y in zip(tops, labels) if y == position]
        recalls.append(sum(mine) / len(mine))
    return statistics.pstdev(recalls) if len(recalls) > 1 else 0.0


def figures(rows: Sequence[dict[str, Any]], method: str) -> dict[str, Any]:
    """Accuracy with its interval, RStd, rows per decision, the share with the rotations' top, ECE."""
    chosen = [row for row in rows if method in row["methods"] and ROTATIONS in row["methods"]]
    if not chosen:
        return {"rows": 0}
    records = [row["methods"][method] for row in chosen]
    labels = [row["label"] for row in chosen]
    correct = [r["top"] == y for r, y in zip(records, labels)]
    return {
        "rows": len(chosen),
        "accuracy": sum(correct) / len(chosen),
        "interval95": wilson(sum(correct), len(chosen)),
        "rstd": rstd([r["top"] for r in records], labels),
        "rows_per_decision": sum(r["orderings"] for r in records) / len(records),
        "escalated": sum(bool(r.get("escalated")) for r in records) / len(records),
        "same_top_as_rotations": sum(
            r["top"] == row["methods"][ROTATIONS]["top"] for r, row in zip(records, chosen)
        )
        / len(chosen),
        "ece": metrics.ece([r["probabilities"] for r in records], labels),
        "vs_rotations": mcnemar(
            correct, [row["methods"][ROTATIONS]["top"] == y for row, y in zip(chosen, labels)]
        ),
    }


def curve(rows: Sequence[dict[str, Any]]) -> list[dict[str, float]]:
    """Adaptive's accuracy and rows per decision at every threshold that changes an answer (from 0,
    every row answered by one row, to above the largest margin, every row escalated)."""
    chosen = [row for row in rows if PRIOR in row["methods"] and ROTATIONS in row["methods"]]
    if not chosen:
        return []
    margins = sorted({row["methods"][PRIOR]["margin"] for row in chosen})
    points = []
    for threshold in [0.0, *(math.nextafter(m, math.inf) for m in margins)]:
        picked = [
            adaptive(row["methods"][PRIOR], row["methods"][ROTATIONS], threshold) for row in chosen
        ]
        points.append(
            {
                "threshold": threshold,
                "rows_per_decision": sum(p["orderings"] for p in picked) / len(picked),
                "accuracy": sum(p["top"] == row["label"] for p, row in zip(picked, chosen))
                / len(chosen),
            }
        )
    return points
