"""`python -m bench audit-check`: what audits would learn, offline, from decisions scored under rotations.

A test decision scored under its n rotations (an `evaluate --derive` run) is exactly what an audit
sees: the caller's-order row that `prior` served, then the other n-1. So the server's own arithmetic
(decisions/live_prior.py: `audited`, `Tally`) run over those rows, in random orders, says how many
audits the live prior needs to come within two standard errors of the prior over the whole set,
and what agreement it settles at. With --replay (a `bench replay --audits` run through a server on
some of the same decisions), the live prior and agreement the server reported after them are set
against the same arithmetic on the same decisions.

Rules a newcomer could break:
1. Nothing here re-derives a prior or an answer: live_prior.audited and Tally are the server's.
2. Labels are never read: audits have none.
3. "Within two standard errors" is every position at once, from that audit count on to the end
   of the order, with the live prior's own standard errors (as /v1/audit shows them).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common.loadgen import percentile
from bench.common.report import markdown_table, now, write_json
from semif_serve.decisions import live_prior
from semif_serve.decisions import prior as pride

from .derived import read_table
from .scoring import ROTATIONS, load_results

Case = tuple[str, list[dict[str, Any]]]  # a decision's id and its n rotations' results
Z_WITHIN = 2.0


def cases(paths: Sequence[Path]) -> dict[tuple[str, int], list[Case]]:
    """Every decision that kept its rotations' results, grouped by (workload, n)."""
    grouped: dict[tuple[str, int], list[Case]] = {}
    run = load_results(paths)
    for row in run["rows"]:
        rotations = row["methods"].get(ROTATIONS, {})
        if "results" in rotations:
            key = (row["workload"] or run["workload"], len(rotations["results"]))
            grouped.setdefault(key, []).append((row["id"], rotations["results"]))
    return grouped


def audit(case: Case, served: Sequence[float]) -> live_prior.Audited:
    """The server's audit of one decision (the caller's order is the first result's)."""
    row_id, results = case
    row = {"id": row_id, "options": [{"id": oid} for oid in results[0]["option_ids"]]}
    return live_prior.audited(row, results, served)


def tally(audits: Sequence[live_prior.Audited], served: Sequence[float]) -> live_prior.Tally:
    counted = live_prior.Tally(tuple(served))
    for one in audits:
        counted.add(one)
    return counted


def audits_to_settle(
    audits: Sequence[live_prior.Audited], served: Sequence[float], target: Sequence[float]
) -> int | None:
    """The fewest audits from which on the live prior stays within Z_WITHIN of its standard errors
    of `target` at every position (Rule 3); None if it never does before the end."""
    counted, settled_at = live_prior.Tally(tuple(served)), None
    for k, one in enumerate(audits, 1):
        counted.add(one)
        live, errors = counted.live() or [], counted.standard_errors()
        within = all(
            math.isfinite(e) and abs(v - t) <= Z_WITHIN * e for v, t, e in zip(live, target, errors)
        )
        settled_at = (settled_at or k) if within else None
    return settled_at


def convergence(
    group: Sequence[Case], served: Sequence[float], orders: int, seed: int
) -> dict[str, Any]:
    """Over random orders of the group: audits until the live prior settles on the whole set's prior."""
    audits = [audit(case, served) for case in group]
    whole = pride.workload_prior([one.prior for one in audits])
    draw, needed = random.Random(seed), []
    for _ in range(orders):
        shuffled = draw.sample(audits, len(audits))
        needed.append(audits_to_settle(shuffled, served, whole))
    found = [k for k in needed if k is not None]
    counted = tally(audits, served)
    return {
        "decisions": len(group),
        "whole_set_prior": whole,
        "served_prior": list(served),
        "agreement": counted.agreements / counted.count,
        "drift_last_window": counted.drift(),  # the last DRIFT_WINDOW decisions in file order
        "drift_threshold": live_prior.drift_threshold(len(served)),
        "orders": orders,
        "settled_in": len(found),
        "audits_median": statistics.median(found) if found else None,
        "audits_p90": percentile(found, 90) if found else None,
    }


def against_replay(
    replay: dict[str, Any], grouped: dict[tuple[str, int], list[Case]]
) -> dict[str, Any]:
    """The server's live prior and agreement after the replay's first set against live_prior's
    arithmetic on the same decisions (found by id in the rotations runs)."""
    by_id = {case[0]: case for group in grouped.values() for case in group}
    requests = replay["requests"]
    segment = requests[: replay.get("switch") or len(requests)]
    last = segment[-1]["audit"]
    used = [
        r for r in segment if r["id"] in by_id and r["status"] == 200 and not r.get("escalated")
    ]
    served = last["served_prior"]
    counted = tally([audit(by_id[r["id"]], served) for r in used], served)
    live, offline = last["live_prior"], counted.live() or []
    return {
        "decisions": len(used),
        "server_audits": last["audits"],
        "server_live_prior": live,
        "offline_live_prior": offline,
        "max_prior_gap": max(abs(a - b) for a, b in zip(live, offline)),
        "server_agreement": last["agreement"],
        "offline_agreement": counted.agreements / counted.count,
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench audit-check", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--results",
        type=Path,
        nargs="+",
        required=True,
        help="`evaluate --derive --out` runs that kept their rotations' results",
    )
    p.add_argument(
        "--calibration", type=Path, required=True, help="the served priors (`bench prior`'s file)"
    )
    p.add_argument(
        "--replay",
        type=Path,
        help="a `bench replay --audits --out` run on some of the same decisions",
    )
    p.add_argument(
        "--orders", type=int, default=200, help="random orders per (workload, n) (default 200)"
    )
    p.add_argument("--seed", type=int, default=46)
    p.add_argument("--out", type=Path, help="the figures as JSON")
    return p


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    table, grouped = read_table(args.calibration), cases(args.results)
    figures: dict[str, Any] = {}
    rows = []
    for (workload, n), group in sorted(grouped.items()):
        entry = table.get((workload, n))
        if entry is None or len(group) < pride.MIN_DECISIONS:
            continue
        found = convergence(group, entry.prior, args.orders, args.seed)
        figures[f"{workload}/{n}"] = found
        rows.append(
            [
                workload,
                n,
                found["decisions"],
                f"{found['agreement']:.3f}",
                f"{found['drift_last_window']:.2f} / {found['drift_threshold']:.2f}",
                found["audits_median"],
                found["audits_p90"],
                f"{found['settled_in']}/{args.orders}",
            ]
        )
    print(
        markdown_table(
            [
                "workload",
                "n",
                "decisions",
                "agreement",
                "drift / threshold (last 200)",
                "audits to 2 SE (median)",
                "(p90)",
                "orders settled",
            ],
            rows,
        )
    )
    if args.replay:
        replay = json.loads(args.replay.read_text(encoding="utf-8"))
        figures["replay"] = against_replay(replay, grouped)
        print(json.dumps(figures["replay"], indent=1))
    if args.out:
        write_json(args.out, {"tool": "audit-check", "when": now(), "figures": figures})
    return 0
