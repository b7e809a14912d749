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

With --calibration (a file `bench prior` wrote) and a derived run, prior, adaptive and
PriDe's protocol are derived offline from each row's rotations (bench/labelled/derived.py):
each with accuracy and its 95 % interval, RStd, rows per decision, the share with the
rotations' top, ECE and a McNemar test against rotations, and --curve draws adaptive's
accuracy against rows over every threshold. --journal appends each answered row to a JSONL
file and skips the rows already there, so a long run resumes where it stopped.

Rules: scoring is the scoring module's, figures are the metrics module's,
drawing is the plots module's; this module only summarises and reports. A
table goes to stdout, progress to stderr, the full JSON (with every row's
probabilities per method, which `calibrate --results` reuses) to --out;
`--results` re-reports a saved JSON without asking the server again.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common.report import fmt, machine, markdown_table, note, now, write_json
from semif_serve.decisions.averaging import MAX_ALL_OPTIONS, METHODS

from . import derived, journal, metrics, plots, scoring
from . import rows as labelled

SCORED_KEYS = (
    "health",
    "methods",
    "derived",
    "workload",
    "all_max_options",
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
        why = (
            scoring.all_not_asked(scored.get("all_max_options", MAX_ALL_OPTIONS))
            if method == "all"
            else derived.NOT_DERIVED[method]
            if method in derived.NOT_DERIVED and derived.PRIDE in scored["methods"]
            else scoring.NOT_ASKED.get(method, "not asked")
        )
        if method in (scoring.PRIOR, derived.ADAPTIVE):
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


DERIVED_ORDER = ("none", derived.PRIOR, derived.PRIDE, derived.ADAPTIVE, REFERENCE)


def derived_tables(figures: dict[str, Any], curve: list[dict[str, float]]) -> str:
    """The derived methods against rotations, on the rows every one of them could be derived for."""
    head = (
        "method",
        "rows",
        "accuracy [95 % interval]",
        "RStd",
        "rows/decision",
        "escalated",
        "same top as rotations",
        "ECE",
        "McNemar vs rotations (only this / only rotations, p)",
    )
    lines = [
        (
            method,
            f["rows"],
            f"{fmt(f['accuracy'], 3)} [{fmt(f['interval95'][0], 3)}, {fmt(f['interval95'][1], 3)}]",
            fmt(f["rstd"], 3),
            fmt(f["rows_per_decision"], 2),
            fmt(f["escalated"], 3),
            fmt(f["same_top_as_rotations"], 3),
            fmt(f["ece"], 3),
            "-"
            if method == REFERENCE
            else f"{f['vs_rotations']['only_first']} / {f['vs_rotations']['only_second']}, "
            f"p = {fmt(f['vs_rotations']['p'], 3)}",
        )
        for method, f in figures.items()
        if f["rows"]
    ]
    text = markdown_table(head, lines)
    reach = figures.get(REFERENCE, {}).get("accuracy")
    if curve and reach is not None:
        first = next((p for p in curve if p["accuracy"] >= reach), None)
        text += "\n\nadaptive over every threshold: reaches the rotations' accuracy " + (
            f"at {fmt(first['rows_per_decision'], 2)} rows per decision (threshold {fmt(first['threshold'], 4)})"
            if first
            else "at no threshold"
        )
    return text


def derived_figures(scored: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, float]]]:
    """Figures per derived method on the rows all of them hold, and adaptive's curve on those rows."""
    present = [m for m in DERIVED_ORDER if any(m in row["methods"] for row in scored["rows"])]
    common = [row for row in scored["rows"] if all(m in row["methods"] for m in present)]
    return {m: derived.figures(common, m) for m in present}, derived.curve(common)


def report(
    scored: dict[str, Any],
    data: str,
    out: Path | None,
    plot: Path | None,
    curve_plot: Path | None = None,
) -> dict[str, Any]:
    """Summarise, print, and write the JSON and the PNGs as asked; the JSON payload."""
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
    if derived.PRIDE in scored["methods"]:  # derived.add ran: prior, adaptive and pride are derived
        figures, curve = derived_figures(scored)
        print("\n" + derived_tables(figures, curve))
        payload["derived_figures"], payload["curve"] = figures, curve
        if curve_plot is not None and curve:
            model = scored["health"].get("model")
            plots.rows_curve(
                curve, figures, curve_plot, f"Accuracy against rows on {Path(data).name} ({model})"
            )
            note(f"evaluate: wrote {curve_plot}")
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
    p.add_argument(
        "--calibration",
        type=Path,
        help="a calibration file `bench prior` wrote: derive prior, adaptive and PriDe's protocol "
        "offline from each row's rotations (needs --derive, or --results of a derived run); "
        "'prior' is then not asked",
    )
    p.add_argument(
        "--curve", type=Path, help="with --calibration: adaptive's accuracy against rows (PNG)"
    )
    p.add_argument(
        "--journal",
        type=Path,
        help="append each answered row to this JSONL and skip rows already in it (resumable; "
        "--results reads it back)",
    )
    p.add_argument("--limit", type=int, help="score only the first N rows (of the split)")
    return p


def resumer(args: argparse.Namespace) -> Any:
    """What scoring.score calls with /health: the rows the journal holds, and the journal's appender."""

    def resume(health: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        options = {
            "methods": list(args.methods),
            "derived": args.derive,
            "workload": args.workload,
            "all_max_options": min(args.all_max_options, MAX_ALL_OPTIONS),
            "split": args.split,
            "data": str(args.data),
        }
        done = journal.resume(args.journal, journal.header(health, options))
        if done:
            note(f"evaluate: {len(done)} rows already in {args.journal}, not asked again")
        return done, lambda row: journal.append(args.journal, row)

    return resume


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    try:
        table = derived.read_table(args.calibration) if args.calibration is not None else None
        if args.results is not None:
            saved = scoring.load_results(args.results)
            scored = {key: saved[key] for key in SCORED_KEYS if key in saved}
            data = saved["data"]
        else:
            if table is not None:
                if not args.derive or REFERENCE not in args.methods:
                    raise ValueError(
                        "--calibration derives from the rotations: it needs --derive "
                        "and 'rotations' among --methods"
                    )
                args.methods = [m for m in args.methods if m != scoring.PRIOR]
            resume = resumer(args) if args.journal is not None else None
            scored = scoring.score_from(args, args.split, args.limit, resume)
            scored, data = {**scored, "split": args.split}, args.data
        if table is not None:
            scored = derived.add(scored, table)
    except (ValueError, OSError, TimeoutError, scoring.ScoringError) as error:
        print(f"evaluate: {error}", file=sys.stderr)
        return 1
    report(scored, data, args.out, args.plot, args.curve)
    return 0
