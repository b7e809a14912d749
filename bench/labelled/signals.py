"""`python -m bench signals --results RUN...`: which signal escalates the fewest rows for the rotations' answer.

Offline, on a saved `evaluate --derive` run (its rows kept their rotations' results), per
(workload, n): each decision is debiased with the prior of the OTHER decisions (leave one
out, as `bench prior` fits the threshold), and each signal of escalation.SIGNALS is swept
over every threshold, each escalating straight to all n rotations. For each signal it reports the
rows per decision at which the adaptive top equals the rotations' top on --target of the decisions
(the label-free fit), with the accuracy there, and the fewest rows at which its accuracy reaches the
rotations'. Beside them: the staged rule the server now serves (one row where the margin is at least
t, else a second ordering, the half turn, and all n only where the two disagree;
semif_serve.decisions.adaptive) and the bound (escalating exactly the decisions whose one-row top
differs from the rotations'). Labels only score; they choose nothing.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common.report import markdown_table
from semif_serve.decisions import adaptive as served
from semif_serve.decisions import prior as pride

from . import escalation, scoring
from .prior import METHOD, too_few

# One decision: signals, one-row top, whether its half turn confirms that top, rotations' top, label, n.
Case = dict[str, Any]


def cases(rows: Sequence[dict[str, Any]]) -> list[Case]:
    """Every decision of one (workload, n), judged with the prior of the others."""
    priors = [pride.decision_prior(row["methods"][METHOD]["results"]) for row in rows]
    out = []
    for row, others in zip(rows, escalation.leave_one_out(priors)):
        results = row["methods"][METHOD]["results"]
        answer = escalation.debiased(results[0]["option_logits"], others)
        out.append(
            {
                "signals": {name: f(answer) for name, f in escalation.SIGNALS.items()},
                "one": escalation.top(answer),
                "confirmed": served.confirmed(results, others),
                "rotations": row["methods"][METHOD]["top"],
                "label": row["label"],
                "n": row["options"],
            }
        )
    return out


def _sweep(items: Sequence[Case], rule: Any) -> list[tuple[float, float, float]]:
    """(rows per decision, accuracy, share with the rotations' top) of `rule(case, t)` over every t."""
    values = sorted({c["signals"]["margin"] for c in items} | {0.0})
    points = []
    for t in [*values, math.inf]:
        picked = [rule(c, t) for c in items]
        points.append(
            (
                sum(rows for rows, _ in picked) / len(items),
                sum(top == c["label"] for (_, top), c in zip(picked, items)) / len(items),
                sum(top == c["rotations"] for (_, top), c in zip(picked, items)) / len(items),
            )
        )
    return points


def signal_points(items: Sequence[Case], signal: str) -> list[tuple[float, float, float]]:
    values = sorted({c["signals"][signal] for c in items})
    points = []
    for t in [0.0, *(math.nextafter(v, math.inf) for v in values)]:
        escalated = [c["signals"][signal] < t for c in items]
        tops = [c["rotations"] if e else c["one"] for c, e in zip(items, escalated)]
        points.append(
            (
                sum(1 + (c["n"] - 1) * e for c, e in zip(items, escalated)) / len(items),
                sum(top == c["label"] for top, c in zip(tops, items)) / len(items),
                sum(top == c["rotations"] for top, c in zip(tops, items)) / len(items),
            )
        )
    return points


def staged(case: Case, t: float) -> tuple[int, int]:
    """The served rule's rows and top at threshold t (over two options, two rows that agree are
    every rotation, and their top the rotations')."""
    if case["signals"]["margin"] >= t:
        return 1, case["one"]
    if case["confirmed"]:
        return 2, case["one"]
    return case["n"], case["rotations"]


def _first(points: Sequence[tuple[float, float, float]], ok: Any) -> tuple[float, float] | None:
    reached = [(rows, acc) for rows, acc, same in points if ok(acc, same)]
    return min(reached) if reached else None


def study(items: Sequence[Case], target: float) -> list[tuple[str, str, str]]:
    """Per policy: rows at the target share (and accuracy there); fewest rows reaching the rotations' accuracy."""
    goal = sum(c["rotations"] == c["label"] for c in items) / len(items)
    lines = []
    policies = {name: signal_points(items, name) for name in escalation.SIGNALS}
    policies["staged: margin, then the half turn (served)"] = _sweep(items, staged)
    for name, points in policies.items():
        at_target = _first(points, lambda acc, same: same >= target)
        at_goal = _first(points, lambda acc, same: acc >= goal)
        lines.append(
            (
                name,
                "-" if at_target is None else f"{at_target[0]:.2f} ({at_target[1]:.3f})",
                "-" if at_goal is None else f"{at_goal[0]:.2f}",
            )
        )
    wrong = [c["one"] != c["rotations"] for c in items]
    bound = sum(1 + (c["n"] - 1) * w for c, w in zip(items, wrong)) / len(items)
    lines.append(
        (
            "bound: escalate exactly the one-row tops that differ",
            f"{bound:.2f} (1.000 same top)",
            "",
        )
    )
    rows_n = sum(c["n"] for c in items) / len(items)
    lines.append(("rotations", f"{rows_n:.2f} ({goal:.3f})", f"{rows_n:.2f}"))
    return lines


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench signals", description=__doc__.split("\n\n")[1]
    )
    p.add_argument(
        "--results", required=True, type=Path, nargs="+", help="saved evaluate --derive runs"
    )
    p.add_argument(
        "--target",
        type=float,
        default=escalation.DEFAULT_TARGET,
        help="share with the rotations' top",
    )
    p.add_argument("--split", choices=("fit", "test"), help="one side of the split only")
    return p


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    try:
        saved = scoring.load_results(args.results)
    except (ValueError, OSError) as error:
        print(f"signals: {error}", file=sys.stderr)
        return 1
    default = saved.get("workload") or scoring.DEFAULT_WORKLOAD
    grouped: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in saved["rows"]:
        if "results" in row["methods"].get(METHOD, {}) and args.split in (None, row["split"]):
            grouped.setdefault((row.get("workload") or default, row["options"]), []).append(row)
    skipped = too_few(grouped)
    for (workload, n), rows in grouped.items():
        if (workload, n) in skipped:
            print(f"{workload}, {n} options: not studied: {skipped[workload, n]}")
            continue
        print(f"\n{workload}, {n} options, {len(rows)} decisions (leave-one-out priors)\n")
        print(
            markdown_table(
                (
                    "policy",
                    f"rows/decision at {args.target} same top (accuracy)",
                    "fewest rows/decision at the rotations' accuracy",
                ),
                study(cases(rows), args.target),
            )
        )
    return 0
