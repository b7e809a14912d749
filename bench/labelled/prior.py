"""`python -m bench prior (--url URL --data FILE.jsonl | --results RUN...) --out calibration.json [--split fit]`.

Fits PriDe's position prior (Zheng et al., ICLR 2024) through a running server:
each decision is asked once with `orderings: "rotations"` (its n cyclic
rotations in one request, the served orderings), its prior over positions is
read from the answer's per-ordering results, and each (workload, option count)
gets the mean of its decisions' priors. The priors go into the calibration file
under the binding (model, revision, prompt_version) the server reports, beside
any temperatures already there, in this shape:

    {"model", "revision", "prompt_version", "fitted": {..., "priors": {date, data, split, ...}},
     "workloads": {...},           # temperatures, left as they were (a new file has none)
     "priors": {workload: {"<n>": {"prior": [p_0, ..., p_{n-1}], "decisions": k, "threshold": t}}}}

From the same answers, with no extra pass, each (workload, n) also gets the escalation
threshold of method `adaptive` (bench/labelled/escalation.py): the lowest margin at which
the adaptive answer's top equals the rotations' top on at least --target of the decisions,
each decision judged with the prior of the others (leave one out). How it was fitted goes in
`fitted.priors.threshold`.

--results fits from a saved `evaluate --derive` run instead (its rows kept their rotations'
results), so a long scoring run can be resumed with `evaluate --journal` and fitted after.

Rules:
1. The arithmetic is the server package's (`semif_serve.decisions.prior`): `decision_prior`
   per answer, `entry` per (workload, n). Nothing here re-derives it, so what is
   fitted is what is served.
2. Labels are never read (a row may omit `label`), by the prior nor by the threshold.
   A row's workload is its `workload` field, else --workload.
3. A (workload, n) with fewer than `semif_serve.decisions.prior.MIN_DECISIONS` decisions is
   not fitted and not even scored; the command names each one and why, before
   it scores anything.
4. An existing --out is merged, never clobbered: its temperatures and `fitted`
   figures stay; the priors of every workload fitted now are replaced whole
   (all of a workload's option counts come from one fit), other workloads' are
   kept. A file bound to another model, revision or prompt version, or a plain
   `{workload: T}` file, is refused and left untouched. The new file is written
   beside the old and moved over it, so a failure never leaves half a file.
5. Progress (decisions scored of the total, elapsed seconds) goes to stderr;
   the table of priors to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common.loadgen import Target
from bench.common.report import Progress, fmt, markdown_table, note, now, write_json
from semif_serve.decisions import prior as pride
from semif_serve.decisions.averaging import permutations

from . import calibration_file, escalation, plots, scoring
from . import rows as labelled
from .calibration_file import PRIORS, CalibrationError, binding

Group = tuple[str, int]  # (workload, option count)
METHOD = "rotations"


def groups(items: Sequence[labelled.Row], default_workload: str) -> dict[Group, list[labelled.Row]]:
    """The rows by (workload, option count), in the order first seen."""
    out: dict[Group, list[labelled.Row]] = {}
    for row in items:
        out.setdefault(
            (labelled.workload_of(row, default_workload), len(row["options"])), []
        ).append(row)
    return out


def too_few(grouped: dict[Group, list[labelled.Row]]) -> dict[Group, str]:
    """Why each group that cannot be fitted is not: fewer decisions than a prior needs."""
    return {
        group: f"{len(items)} decision(s), fewer than the {pride.MIN_DECISIONS} a prior needs"
        for group, items in grouped.items()
        if len(items) < pride.MIN_DECISIONS
    }


def rotation_results(row: labelled.Row, answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The answer's per-ordering results, checked to be the row's n cyclic rotations in the served order."""
    ids = [option["id"] for option in row["options"]]
    expected = [[ids[i] for i in order] for order in permutations(len(ids), METHOD)]
    results = answer.get("orderings")
    if not isinstance(results, list) or [r.get("option_ids") for r in results] != expected:
        found = [r.get("option_ids") for r in results] if isinstance(results, list) else results
        raise scoring.ScoringError(
            f"row {row['id']!r}: the answer's orderings score {found}, not the {len(ids)} "
            f"rotations {expected}"
        )
    return results


Decision = dict[
    str, Any
]  # {prior, first, rotations_top, results}: what the fits need of one answer


def decision(row: labelled.Row, answer: dict[str, Any]) -> Decision:
    """One answer under rotations, as the fits read it: the decision's prior, the caller's-order row's
    logits, the index of the rotations' top in the row's order, and each rotation's scores."""
    results = rotation_results(row, answer)
    try:
        prior = pride.decision_prior(results)
    except ValueError as error:
        raise scoring.ScoringError(f"row {row['id']!r}: {error}") from None
    ids = [option["id"] for option in row["options"]]
    return {
        "prior": prior,
        "first": list(results[0]["option_logits"]),  # the identity rotation: the caller's order
        "rotations_top": ids.index(answer["combined"]["top"]),
        "results": scoring.kept(results),
    }


def from_run(saved: dict[str, Any]) -> tuple[list[labelled.Row], dict[str, Decision], set[Any]]:
    """The decisions of a saved `evaluate --derive` run that kept their rotations (no forward pass):
    rows shaped for `groups`, each one's decision, and the prompt versions behind them."""
    rows, decided, versions = [], {}, set()
    for kept in saved["rows"]:
        record = kept["methods"].get(METHOD)
        if record is None or "results" not in record:
            continue
        results = record["results"]
        ids = list(results[0]["option_ids"])
        row = {"id": kept["id"], "options": [{"id": i} for i in ids], "split": kept["split"]}
        if kept.get("workload"):
            row["workload"] = kept["workload"]
        rows.append(row)
        decided[kept["id"]] = decision(
            row, {"orderings": results, "combined": {"top": ids[record["top"]]}}
        )
        versions.add(record.get("prompt_version"))
    if not rows:
        raise CalibrationError("the saved run kept no rotation results: run evaluate with --derive")
    return rows, decided, versions


async def score(
    target: Target,
    items: Sequence[labelled.Row],
    progress: Progress,
    concurrency: int,
    timeout: float,
) -> tuple[dict[str, Decision], set[Any]]:
    """Each row's decision (by id), and the prompt versions its results name."""
    versions: set[Any] = set()

    def handle(
        row: labelled.Row, method: str, answer: dict[str, Any]
    ) -> dict[tuple[str, str], Decision]:
        versions.update(result.get("prompt_version") for result in answer.get("orderings") or [])
        return {(row["id"], method): decision(row, answer)}

    out = await scoring.ask(
        target, [(row, METHOD) for row in items], handle, progress, concurrency, timeout
    )
    return {row_id: value for (row_id, _), value in out.items()}, versions


def fit(
    grouped: dict[Group, list[labelled.Row]], decided: dict[str, Decision], target: float
) -> tuple[dict[str, dict[str, dict[str, Any]]], dict[str, dict[str, float]]]:
    """{workload: {"<n>": {"prior", "decisions", "threshold"}}} for every group whose rows were scored,
    and per "workload/n" what the threshold does on the fit decisions (escalated share, same top)."""
    fitted: dict[str, dict[str, dict[str, Any]]] = {}
    figures: dict[str, dict[str, float]] = {}
    for (workload, n), items in grouped.items():
        chosen = [decided[row["id"]] for row in items]
        found = escalation.group_fit(chosen, target)
        fitted.setdefault(workload, {})[str(n)] = {
            **pride.entry([d["prior"] for d in chosen]),
            "threshold": found.pop("threshold"),
        }
        figures[f"{workload}/{n}"] = found
    return fitted, figures


def check(existing: Any, bound_to: dict[str, Any], where: Path) -> None:
    """Refuse an existing file the priors cannot join: plain, or bound to something else."""
    why = calibration_file.mismatch(existing, bound_to, where)
    if why is not None:
        raise CalibrationError(
            f"{why}; priors fitted here cannot go into it: write them to another file"
        )


def merged(
    existing: Any,
    bound_to: dict[str, Any],
    priors: dict[str, Any],
    facts: dict[str, Any],
    where: Path,
) -> dict[str, Any]:
    """The file to write: `existing` (None: a new file) with `priors` in, under `bound_to`."""
    check(existing, bound_to, where)
    if existing is None:
        return {**bound_to, "fitted": {PRIORS: facts}, PRIORS: priors}  # priors and no temperatures
    kept = {w: entries for w, entries in (existing.get(PRIORS) or {}).items() if w not in priors}
    return {
        **existing,
        "fitted": {**calibration_file.fitted_of(existing), PRIORS: facts},
        PRIORS: {**kept, **priors},
    }


def table(priors: dict[str, dict[str, dict[str, Any]]], skipped: dict[Group, str]) -> str:
    lines = [
        (
            w,
            n,
            e["decisions"],
            " / ".join(fmt(p, 3) for p in e["prior"]),
            fmt(1 / int(n), 3),
            fmt(e["threshold"], 4),
        )
        for w, entries in priors.items()
        for n, e in sorted(entries.items(), key=lambda item: int(item[0]))
    ]
    text = markdown_table(
        ("workload", "options", "decisions", "prior by position", "uniform", "threshold"), lines
    )
    return "\n".join(
        [text, *(f"not fitted: {w}, {n} options: {why}" for (w, n), why in skipped.items())]
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench prior",
        description=__doc__.split("\n\n")[1].replace(", in this shape:", "."),
        epilog=f"A (workload, option count) with fewer than {pride.MIN_DECISIONS} decisions is "
        "not fitted; the command says which. Token from SEMIF_API_TOKEN.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--url", help="http://127.0.0.1:PORT of a running server; needs --data")
    source.add_argument(
        "--results",
        type=Path,
        nargs="+",
        help="fit from saved `evaluate --derive` runs (--out JSON or --journal JSONL) that scored "
        "the rotations, with no forward pass",
    )
    p.add_argument(
        "--data",
        type=Path,
        help="JSONL of decisions {id, state, question, options[, workload, split]}; a label is not read",
    )
    p.add_argument(
        "--out",
        required=True,
        type=Path,
        help="the calibration file to write; an existing one is merged (its temperatures kept)",
    )
    p.add_argument(
        "--workload",
        default=scoring.DEFAULT_WORKLOAD,
        help="workload of rows that name none (default: default)",
    )
    p.add_argument(
        "--split",
        choices=labelled.SPLITS,
        help="fit on one side of the split only (default: every row)",
    )
    p.add_argument(
        "--target",
        type=float,
        default=escalation.DEFAULT_TARGET,
        help="share of fit decisions whose adaptive top must equal the rotations' top "
        f"(default {escalation.DEFAULT_TARGET})",
    )
    p.add_argument("--plot", type=Path, help="a bar chart of the priors against uniform (PNG)")
    p.add_argument(
        "--report", type=Path, help="every decision's prior and the fitted entries as JSON"
    )
    p.add_argument("--concurrency", type=int, default=2, help="requests in flight (default 2)")
    p.add_argument(
        "--timeout", type=float, default=scoring.DEFAULT_TIMEOUT, help="seconds per request"
    )
    p.add_argument(
        "--progress-every",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="at most one progress line per this many seconds (default 5; 0: every decision)",
    )
    return p


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    if not 0 < args.target <= 1:
        print(f"prior: --target must be in (0, 1], got {args.target}", file=sys.stderr)
        return 2
    try:
        existing = calibration_file.read(args.out)
        if args.results is not None:
            saved = scoring.load_results(args.results)
            facts, data = saved["health"], saved["data"]
            found, decided, versions = from_run(saved)
            items = labelled.of_split(found, args.split)
        else:
            if args.data is None:
                raise ValueError("--url needs --data")
            target, data = Target.from_url(args.url), str(args.data)
            items = labelled.of_split(labelled.load(args.data, labelled=False), args.split)
            facts = asyncio.run(scoring.health(target))
        if existing is not None:  # before any scoring: a refused file costs no forward pass
            check(existing, binding(facts, set()), args.out)
        grouped = groups(items, args.workload)
        skipped = too_few(grouped)
        for (workload, n), why in skipped.items():
            note(f"prior: {workload}, {n} options: not fitted: {why}")
        chosen = {group: rows for group, rows in grouped.items() if group not in skipped}
        if not chosen:
            raise CalibrationError(
                "no (workload, option count) has enough decisions; nothing fitted, nothing written"
            )
        todo = [row for rows in chosen.values() for row in rows]
        if args.results is None:
            note(
                f"prior: scoring {len(todo)} decisions under their rotations ({sum(len(r['options']) for r in todo)} rows) "
                f"in {len(chosen)} group(s)"
            )
            progress = Progress("prior: decisions scored", len(todo), every=args.progress_every)
            decided, versions = asyncio.run(
                score(target, todo, progress, args.concurrency, args.timeout)
            )
        priors, escalating = fit(chosen, decided, args.target)
        fit_facts = {
            "date": now(),
            "data": data,
            "split": args.split,
            "decisions": len(todo),
            "min_decisions": pride.MIN_DECISIONS,
            "not_fitted": {f"{w}/{n}": why for (w, n), why in skipped.items()},
            "threshold": {
                "signal": escalation.SIGNAL,
                "fit": escalation.FIT_METHOD,
                "target": args.target,
                "on_fit_decisions": escalating,
            },
        }
        document = merged(existing, binding(facts, versions), priors, fit_facts, args.out)
    except (ValueError, OSError, TimeoutError, scoring.ScoringError) as error:
        print(f"prior: {error}", file=sys.stderr)
        return 1
    print(table(priors, skipped))
    for group, found in escalating.items():
        if found["adaptive_same_top"] < args.target:
            note(
                f"prior: {group}: adaptive reaches {found['adaptive_same_top']:.3f} of the rotations' "
                f"tops at most (half turns that confirm a wrong top), below --target {args.target}: "
                "its threshold 1.0 escalates every decision"
            )
    calibration_file.write(args.out, document)
    note(
        f"prior: wrote {args.out}"
        + ("" if existing is None else " (merged: temperatures and other workloads kept)")
    )
    if args.report is not None:
        write_json(
            args.report,
            {
                "tool": "prior",
                "when": now(),
                "health": facts,
                "fitted": fit_facts,
                "priors": priors,
                "decisions": {
                    row["id"]: {
                        "workload": labelled.workload_of(row, args.workload),
                        "options": len(row["options"]),
                        **decided[row["id"]],
                    }
                    for row in todo
                },
            },
        )
        note(f"prior: wrote {args.report}")
    if args.plot is not None:
        drawn = plots.priors(
            priors,
            args.plot,
            f"Position prior per workload and option count ({facts.get('model')})",
        )
        note(f"prior: wrote {drawn}")
    return 0
