"""`python -m bench calibrate (--url URL --data FILE.jsonl | --results results.json) --out calibration.json`.

Fits one temperature per workload and per ordering method (none, rotations,
all) on the fit part of labelled rows, reports NLL, Brier and ECE before and
after on the held-out test part, draws the reliability diagrams before and
after, and writes the calibration file in the bound form:

    {"model", "revision", "prompt_version",
     "fitted": {"rows", "test_rows", "date", "data", "nll_before", "nll_after", "ece_before", "ece_after"},
     "workloads": {name: {"none": T, "rotations": T, "all": T}}}

with the before/after figures keyed `{workload: {method: value}}`. model and
revision come from the server's /health; prompt_version from /health when it
reports one, else from the scored results (every SemIf result carries it), and
the scores must agree on a single one.

Rules: the rows are scored once (or read from `evaluate --out`), never twice;
the fit is fit.py's, every figure is metrics.py's, every plot is plots.py's.
A row's workload is its `workload` field, else --workload. The file written is
what the fit produced; loading and checking it is the server's job. Position
priors already in --out (`bench prior`), bound to the same model, revision and
prompt version, are kept (calibration_file.py says who owns which key).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common.report import fmt, markdown_table, note, now, write_json

from . import calibration_file, fit, metrics, plots, scoring
from . import rows as labelled
from .calibration_file import PRIORS, CalibrationError, binding


def _side(
    rows: Sequence[dict[str, Any]], method: str, split: str
) -> tuple[list[Any], list[Any], list[int]]:
    chosen = [row for row in rows if row["split"] == split and method in row["methods"]]
    records = [row["methods"][method] for row in chosen]
    return (
        [r["scores"] for r in records],
        [r["probabilities"] for r in records],
        [row["label"] for row in chosen],
    )


def fit_method(rows: Sequence[dict[str, Any]], method: str) -> dict[str, Any] | None:
    """T fitted on the fit rows, with the test rows' figures before (served) and after (tempered)."""
    fit_scores, _, fit_labels = _side(rows, method, "fit")
    test_scores, test_probabilities, test_labels = _side(rows, method, "test")
    if not fit_labels or not test_labels:
        return None
    temperature = fit.fit_temperature(fit_scores, fit_labels)
    return {
        "temperature": temperature,
        "fit_rows": len(fit_labels),
        "test_rows": len(test_labels),
        "before": metrics.summary(test_probabilities, test_labels),
        "after": metrics.summary(fit.calibrate(test_scores, temperature), test_labels),
    }


def fit_all(scored: dict[str, Any], default_workload: str) -> dict[str, dict[str, dict[str, Any]]]:
    """{workload: {method: fit_method(...)}} for every workload and method with rows on both sides."""
    by_workload: dict[str, list[dict[str, Any]]] = {}
    for row in scored["rows"]:
        by_workload.setdefault(labelled.workload_of(row, default_workload), []).append(row)
    fitted: dict[str, dict[str, dict[str, Any]]] = {}
    for workload, rows in by_workload.items():
        for method in scored["methods"]:
            outcome = fit_method(rows, method)
            if outcome is None:
                note(f"calibrate: {workload}/{method}: no fit or no test rows; no temperature")
            else:
                fitted.setdefault(workload, {})[method] = outcome
    if not fitted:
        raise CalibrationError("no workload has scored rows on both the fit and the test side")
    return fitted


def bound_file(
    scored: dict[str, Any], fitted: dict[str, dict[str, dict[str, Any]]], source: str
) -> dict[str, Any]:
    """The bound form: what was fitted, on what, for which model, revision and prompt."""
    versions = {
        record.get("prompt_version") for row in scored["rows"] for record in row["methods"].values()
    }

    def per(side, key):
        return {w: {m: o[side][key] for m, o in ms.items()} for w, ms in fitted.items()}

    any_method = [o for ms in fitted.values() for o in ms.values()]
    return {
        **binding(scored["health"], versions),
        "fitted": {
            "rows": max(o["fit_rows"] for o in any_method),
            "test_rows": max(o["test_rows"] for o in any_method),
            "date": now(),
            "data": source,
            "nll_before": per("before", "nll"),
            "nll_after": per("after", "nll"),
            "ece_before": per("before", "ece"),
            "ece_after": per("after", "ece"),
        },
        "workloads": {w: {m: o["temperature"] for m, o in ms.items()} for w, ms in fitted.items()},
    }


def kept_priors(existing: Any, bound: dict[str, Any], where: Path) -> dict[str, Any]:
    """`bound` with the position priors an existing file bound to the same model holds (`bench prior` wrote
    them; a refit of the temperatures must not drop them). A file bound to something else is replaced whole."""
    why = calibration_file.mismatch(existing, bound, where)
    if existing is None or PRIORS not in existing:
        return bound
    if why is not None:
        note(f"calibrate: {why}; replaced whole, its priors dropped")
        return bound
    fitted = calibration_file.fitted_of(existing)
    return {
        **bound,
        "fitted": {**bound["fitted"], **({PRIORS: fitted[PRIORS]} if PRIORS in fitted else {})},
        PRIORS: existing[PRIORS],
    }


def table(fitted: dict[str, dict[str, dict[str, Any]]]) -> str:
    def arrow(o, key):
        return f"{fmt(o['before'][key], 3)} -> {fmt(o['after'][key], 3)}"

    lines = [
        (
            w,
            m,
            o["fit_rows"],
            o["test_rows"],
            fmt(o["temperature"], 3),
            arrow(o, "nll"),
            arrow(o, "brier"),
            arrow(o, "ece"),
            fmt(o["after"]["accuracy"], 3),
        )
        for w, ms in fitted.items()
        for m, o in ms.items()
    ]
    head = (
        "workload",
        "method",
        "fit rows",
        "test rows",
        "T",
        "NLL (test)",
        "Brier (test)",
        "ECE (test)",
        "accuracy (test)",
    )
    return markdown_table(head, lines)


def draw(fitted: dict[str, dict[str, dict[str, Any]]], path: Path, model: Any) -> list[Path]:
    """One PNG per workload: a row of diagrams before, a row after (the path itself when one workload)."""
    written = []
    for workload, methods in fitted.items():
        target = (
            path if len(fitted) == 1 else path.with_name(f"{path.stem}-{workload}{path.suffix}")
        )
        grid = [
            [plots.Panel(f"{m}, before (T=1)", o["before"]) for m, o in methods.items()],
            [
                plots.Panel(f"{m}, after (T={o['temperature']:.3g})", o["after"])
                for m, o in methods.items()
            ],
        ]
        written.append(
            plots.reliability(
                grid, target, f"Held-out reliability, workload {workload!r} ({model})"
            )
        )
    return written


def _scored(args: argparse.Namespace) -> dict[str, Any]:
    if args.results is not None:
        return scoring.load_results(args.results)
    scored = scoring.score_from(args)
    if args.save_results is not None:
        write_json(
            args.save_results, {"tool": "calibrate", "data": args.data, "when": now(), **scored}
        )
    return scored


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench calibrate", description=__doc__.split("\n\n")[1]
    )
    scoring.add_arguments(p, "a saved `evaluate --out` JSON: no rescoring")
    p.add_argument("--out", type=Path, required=True, help="the calibration file to write")
    p.add_argument(
        "--plot", type=Path, help="reliability diagrams before/after on the test rows (PNG)"
    )
    p.add_argument("--report", type=Path, help="every fitted figure as JSON")
    p.add_argument(
        "--save-results",
        type=Path,
        help="with --url: also keep the scored rows (evaluate's format)",
    )
    return p


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    try:
        scored = _scored(args)
        fitted = fit_all(scored, args.workload)
        bound = kept_priors(
            calibration_file.read(args.out),
            bound_file(scored, fitted, args.data or " ".join(map(str, args.results))),
            args.out,
        )
    except (ValueError, OSError, TimeoutError, KeyError, scoring.ScoringError) as error:
        print(f"calibrate: {error}", file=sys.stderr)
        return 1
    print(table(fitted))
    calibration_file.write(args.out, bound)
    note(f"calibrate: wrote {args.out}")
    if args.report is not None:
        write_json(
            args.report,
            {"tool": "calibrate", "when": now(), "calibration": bound, "fitted": fitted},
        )
    if args.plot is not None:
        for path in draw(fitted, args.plot, scored["health"].get("model")):
            note(f"calibrate: wrote {path}")
    return 0
