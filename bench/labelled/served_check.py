"""`python -m bench served-check`: the served `prior` and `adaptive` against the ones derived offline.

`evaluate --derive --calibration` derives `prior` and `adaptive` from each decision's rotations,
scored in one n-row call; the server answers them from a one-row call (and, where adaptive
escalates, a call of the half turn, and one of the rest where the two disagree). On the same
decisions, with the same calibration file, the two must agree up to the scoring noise between a
one-row and an n-row call (about 1e-6 on the CPU models): the same top, the same escalations
and rows, probabilities within that noise.

Rules a newcomer could break:
1. Both runs must hold the same decisions under the same calibration: rows are matched by id, and
   a row one run lacks is counted, never guessed.
2. An escalation that differs (whether, or how many rows) is reported by id: near the threshold,
   noise of 1e-6 in the margin may flip it, and the probabilities then differ by design.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common.report import markdown_table, now, write_json

from .derived import ADAPTIVE, PRIOR
from .scoring import load_results

NOISE = 1e-6  # the gap between a one-row and an n-row call measured on the CPU models


def _rows(path: Path) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in load_results([path])["rows"]}


def compare(
    served: dict[str, dict[str, Any]], derived: dict[str, dict[str, Any]], method: str
) -> dict[str, Any]:
    """One method: rows in both, same top, escalations that differ, the largest probability gap."""
    both = [
        (i, served[i]["methods"][method], derived[i]["methods"][method])
        for i in served
        if i in derived and method in served[i]["methods"] and method in derived[i]["methods"]
    ]
    flips = [
        i
        for i, s, d in both
        if s.get("escalated") is not None
        and (bool(s["escalated"]), s["orderings"]) != (bool(d.get("escalated")), d["orderings"])
    ]
    gaps = [  # Rule 2: where the escalation flipped, the answers differ by design
        max(abs(a - b) for a, b in zip(s["probabilities"], d["probabilities"]))
        for i, s, d in both
        if i not in flips
    ]
    return {
        "rows": len(both),
        "same_top": sum(s["top"] == d["top"] for _, s, d in both) / len(both) if both else None,
        "escalation_flips": flips,
        "max_probability_gap": max(gaps) if gaps else None,
        "served_escalated": sum(bool(s.get("escalated")) for _, s, _ in both),
        "derived_escalated": sum(bool(d.get("escalated")) for _, _, d in both),
        "served_rows": sum(s["orderings"] for _, s, _ in both),
        "derived_rows": sum(d["orderings"] for _, _, d in both),
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench served-check", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--served",
        type=Path,
        required=True,
        help="`evaluate --methods prior adaptive --out` (served)",
    )
    p.add_argument(
        "--derived",
        type=Path,
        required=True,
        help="`evaluate --derive --calibration --out` (derived)",
    )
    p.add_argument("--out", type=Path, help="the comparison as JSON")
    return p


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    served, derived = _rows(args.served), _rows(args.derived)
    found = {method: compare(served, derived, method) for method in (PRIOR, ADAPTIVE)}
    print(
        markdown_table(
            [
                "method",
                "rows",
                "same top",
                "max |p served - p derived|",
                "escalated (served / derived)",
                "rows (served / derived)",
                "flips",
            ],
            [
                [
                    m,
                    f["rows"],
                    f"{f['same_top']:.3f}" if f["same_top"] is not None else "-",
                    f"{f['max_probability_gap']:.1e}"
                    if f["max_probability_gap"] is not None
                    else "-",
                    f"{f['served_escalated']} / {f['derived_escalated']}",
                    f"{f['served_rows']} / {f['derived_rows']}",
                    len(f["escalation_flips"]),
                ]
                for m, f in found.items()
            ],
        )
    )
    if args.out:
        write_json(
            args.out,
            {
                "tool": "served-check",
                "when": now(),
                "served": str(args.served),
                "derived": str(args.derived),
                "noise": NOISE,
                "methods": found,
            },
        )
    within = all(
        f["rows"] and (f["max_probability_gap"] or 0) <= 10 * NOISE for f in found.values()
    )
    return 0 if within else 1
