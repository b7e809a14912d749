"""`python -m bench evaluate (--url URL --data FILE.jsonl | --results results.json) [--out …] [--plot …]`.

How well a served model chooses on labelled rows, per ordering method (none,
rotations, all, and prior when asked): accuracy; the share of rows whose
orderings agree unanimously (agreement == 1) and the accuracy on them; position
bias (the share of rows whose top choice sits at each position of the row's own
order, against the share whose label does); NLL, Brier and ECE (10 bins); the
rows scored per decision; and, for every method beside rotations, how closely it
reproduces rotations (the share of rows with the same top, the mean
KL(rotations ‖ method)). Accuracy is also given on the rows every method scored,
since "all" skips rows over 4 options and "prior" rows with no prior.

Rules: scoring is the scoring module's, figures are the metrics module's,
drawing is the plots module's; this module only summarises and reports. A
table goes to stdout, progress to stderr, the full JSON (with every row's
probabilities per method, which `calibrate --results` reuses) to --out;
`--results` re-reports a saved JSON without asking the server again.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common.report import fmt, machine, markdown_table, note, now, write_json
from semif_serve.decisions.averaging import METHODS

from . import metrics, plots, scoring
from . import rows as labelled

SCORED_KEYS = (
    "health",
    "methods",
    "derived",
    "workload",
    "split",
    "rows",
    "skipped",
)  # what scoring.score returns
REFERENCE = "rotations"  # what one row is compared against: the n-row answer with no position bias


def _positions(items: Sequence[dict[str, Any]], key: Any, width: int) -> list[float]:
    counts = [0] * width
    for item in items:
        counts[key(item)] += 1
    return [count / len(items) for count in counts]


def method_summary(scored_rows: Sequence[dict[str, Any]], method: str) -> dict[str, Any]:
    """Every figure for one method over the rows it scored."""
    rows = [row for row in scored_rows if method in row["methods"]]
    if not rows:
        return {"rows": 0}
    records = [row["methods"][method] for row in rows]
    labels = [row["label"] for row in rows]
    figures = metrics.summary([r["probabilities"] for r in records], labels)
    width = max(row["options"] for row in rows)
    figures["top_position"] = _positions(records, lambda r: r["top"], width)
    figures["label_position"] = _positions(rows, lambda row: row["label"], width)
    counts = sorted({row["options"] for row in rows})
    figures["by_options"] = {
        str(n): {
            "rows": sum(row["options"] == n for row in rows),
            "top_position": _positions(
                [rec for rec, row in zip(records, rows) if row["options"] == n],
                lambda r: r["top"],
                n,
            ),
            "label_position": _positions(
                [row for row in rows if row["options"] == n], lambda row: row["label"], n
            ),
        }
        for n in counts
    }
    figures["rows_per_decision"] = sum(r["orderings"] for r in records) / len(records)
    if method != REFERENCE:
        both = [
            (row["methods"][REFERENCE], rec)
            for row, rec in zip(rows, records)
            if REFERENCE in row["methods"]
        ]
        if both:
            figures["vs_rotations"] = {
                "rows": len(both),
                "same_top": sum(ref["top"] == rec["top"] for ref, rec in both) / len(both),
                "kl": metrics.mean_kl(
                    [ref["probabilities"] for ref, _ in both],
                    [rec["probabilities"] for _, rec in both],
                ),
            }
    if (
        method in METHODS and method != "none"
    ):  # averaged over several orderings: their agreement means something
        unanimous = [(rec, y) for rec, y in zip(records, labels) if rec["agreement"] == 1.0]
        figures["unanimous_rows"] = len(unanimous)
        figures["unanimous_share"] = len(unanimous) / len(rows)
        figures["unanimous_accuracy"] = (
            (sum(rec["top"] == y for rec, y in unanimous) / len(unanimous)) if unanimous else None
        )
    return figures


def summarise(scored: dict[str, Any]) -> dict[str, Any]:
    """Per-method figures, plus accuracy on the rows that every method scored."""
    methods = scored["methods"]
    out = {method: method_summary(scored["rows"], method) for method in methods}
    common = [row for row in scored["rows"] if all(m in row["methods"] for m in methods)]
    for method in methods:
        if common:
            out[method]["common_rows"] = len(common)
            out[method]["common_accuracy"] = metrics.accuracy(
                [row["methods"][method]["probabilities"] for row in common],
                [row["label"] for row in common],
            )
    return out


def not_asked(scored: dict[str, Any]) -> dict[str, str]:
    """Per method that skipped rows: how many, and why (for "prior", the (workload, n) the server has no prior for)."""
    by_id = {row["id"]: row for row in scored["rows"]}
    default = (
        scored.get("workload") or scoring.DEFAULT_WORKLOAD
    )  # a run saved before --workload existed
    out = {}
    for method, ids in scored["skipped"].items():
        if not ids:
            continue
        why = scoring.NOT_ASKED.get(method, "not asked")
        if method == scoring.PRIOR:
            groups = sorted(
                {(labelled.workload_of(by_id[i], default), by_id[i]["options"]) for i in ids}
            )
            why += ": " + ", ".join(f"{w}/{n}" for w, n in groups)
        out[method] = f"{method}: {len(ids)} rows not scored ({why})"
    return out


def tables(summary: dict[str, Any], skipped: dict[str, str]) -> str:
    """The stdout report: one line per method, the position tables, then the one-row methods against rotations."""
    head = (
        "method",
        "rows",
        "rows/decision",
        "accuracy",
        "acc. on common rows",
        "unanimous",
        "acc. when unanimous",
        "NLL",
        "Brier",
        "ECE",
    )
    lines = []
    for method, s in summary.items():
        if not s["rows"]:
            lines.append((method, 0, *["-"] * 8))
            continue
        lines.append(
            (
                method,
                s["rows"],
                fmt(s["rows_per_decision"], 2),
                fmt(s["accuracy"], 3),
                fmt(s.get("common_accuracy"), 3),
                fmt(s.get("unanimous_share"), 3),
                fmt(s.get("unanimous_accuracy"), 3),
                fmt(s["nll"], 3),
                fmt(s["brier"], 3),
                fmt(s["ece"], 3),
            )
        )
    scored = [s for s in summary.values() if s["rows"]]
    width = max((len(s["label_position"]) for s in scored), default=0)
    position_rows = []
    for k in range(width):
        first = next(s for s in scored if len(s["label_position"]) > k)
        position_rows.append(
            (
                k,
                fmt(first["label_position"][k], 3),
                *(
                    fmt(s["top_position"][k], 3)
                    if s["rows"] and k < len(s["top_position"])
                    else "-"
                    for s in summary.values()
                ),
            )
        )

    def shares(values):
        return " / ".join(f"{v:.2f}" for v in values)

    counts = sorted({int(n) for s in scored for n in s["by_options"]})
    per_count = []
    for n in counts:
        first = next(s["by_options"][str(n)] for s in scored if str(n) in s["by_options"])
        per_count.append(
            (
                n,
                first["rows"],
                shares(first["label_position"]),
                *(
                    shares(s["by_options"][str(n)]["top_position"])
                    if s["rows"] and str(n) in s["by_options"]
                    else "-"
                    for s in summary.values()
                ),
            )
        )
    against = [
        (
            method,
            s["vs_rotations"]["rows"],
            fmt(s["rows_per_decision"], 2),
            fmt(s["vs_rotations"]["same_top"], 3),
            fmt(s["vs_rotations"]["kl"], 4),
        )
        for method, s in summary.items()
        if s["rows"] and "vs_rotations" in s
    ]
    text = [
        markdown_table(head, lines),
        "",
        markdown_table(
            ("position", "label share", *(f"top share ({m})" for m in summary)), position_rows
        ),
        "",
        markdown_table(
            (
                "options",
                "rows",
                "label share by position",
                *(f"top share by position ({m})" for m in summary),
            ),
            per_count,
        ),
    ]
    if against:
        text += [
            "",
            markdown_table(
                (
                    "method",
                    "rows also scored by rotations",
                    "rows/decision",
                    "same top as rotations",
                    "mean KL(rotations ‖ method)",
                ),
                against,
            ),
        ]
    text += [f"\n{line}" for line in skipped.values()]
    return "\n".join(text)


def panels(summary: dict[str, Any], prefix: str = "") -> list[plots.Panel]:
    return [plots.Panel(f"{prefix}{method}", s) for method, s in summary.items() if s["rows"]]


def report(
    scored: dict[str, Any], data: str, out: Path | None, plot: Path | None
) -> dict[str, Any]:
    """Summarise, print, and write the JSON and the PNG as asked; the JSON payload."""
    summary = summarise(scored)
    print(tables(summary, not_asked(scored)))
    payload = {
        "tool": "evaluate",
        "data": data,
        "when": now(),
        "machine": machine(),
        **scored,
        "summary": summary,
    }
    if out is not None:
        write_json(out, payload)
        note(f"evaluate: wrote {out}")
    if plot is not None and not panels(summary):
        note("evaluate: no method scored any row; no plot")
    elif plot is not None:
        model = scored["health"].get("model")
        side = f", {scored['split']} split" if scored.get("split") else ""
        plots.reliability(
            [panels(summary)], plot, f"Reliability on {Path(data).name}{side} ({model})"
        )
        note(f"evaluate: wrote {plot}")
    return payload


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench evaluate", description=__doc__.split("\n\n")[1]
    )
    scoring.add_arguments(p, "re-report a saved --out JSON without rescoring")
    p.add_argument(
        "--split",
        choices=labelled.SPLITS,
        help="score one side of the split only (default: every row)",
    )
    p.add_argument("--out", type=Path, help="write the full results JSON here")
    p.add_argument("--plot", type=Path, help="write a reliability-diagram PNG here")
    return p


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    try:
        if args.results is not None:
            saved = json.loads(Path(args.results).read_text(encoding="utf-8"))
            scored = {key: saved[key] for key in SCORED_KEYS if key in saved}
            data = saved.get("data", str(args.results))
        else:
            scored, data = {**scoring.score_from(args, args.split), "split": args.split}, args.data
    except (ValueError, OSError, TimeoutError, scoring.ScoringError) as error:
        print(f"evaluate: {error}", file=sys.stderr)
        return 1
    report(scored, data, args.out, args.plot)
    return 0
