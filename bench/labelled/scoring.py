"""Asking a running server to choose, for every labelled row under every ordering method.

Rules: this is the only module here that talks HTTP, through the bench's one
client (bench.common.loadgen). It sends exactly the /decide fields a caller would
(never the label), keeps the server's probabilities untouched, and records per
row and method what the metrics and the temperature fit need, so calibration
can reuse a saved evaluation without rescoring. A non-200 answer stops the run
with the row, the method and the server's message: a silently dropped row
would bias every figure.

What is kept per row and method: `probabilities` (the served ones: native for
"none", `combined.probabilities` for averaged methods), `scores` (the vector a
temperature divides: `option_logits` for "none"; for averaged methods the log
of the combined probabilities, which equals the mean per-option log-softmax up
to a constant that softmax ignores), the served `top` as an index in the row's
own order, `agreement`, the number of orderings and the prompt_version the
scorer reported (a calibration file is bound to it).

"all" is not sent for rows with more than MAX_ALL_OPTIONS options (the contract
refuses it with a 422); those rows are listed under `skipped`.

`derive=True` saves forward passes on a slow machine: each row is asked once,
under the largest method it needs, and the smaller methods are derived from
that answer's per-ordering results (SemIf's results, unchanged): "none" is the
identity ordering's result, and "rotations" (a subset of "all"'s permutations)
is combined by the server's own `averaging.combine`. The only difference from
asking each method separately is that those rows were scored together in one
`score_shared` call rather than each in its own (the contract's shared-vs-direct
gap, ~1e-6 on the CPU models measured).
"""

from __future__ import annotations

import argparse
import asyncio
import math
from pathlib import Path
from typing import Any, Callable, Sequence

from semif_serve.averaging import MAX_ALL_OPTIONS, METHODS, combine, orderings

from bench.common.loadgen import Connection, Target, call
from bench.common.report import Progress
from . import rows as labelled

Record = dict[str, Any]
DEFAULT_TIMEOUT = 600.0  # one "all" request over 4 options is 24 rows in one call: seconds on a loaded CPU
DEFAULT_WORKLOAD = "default"


class ScoringError(RuntimeError):
    """The server answered something evaluation cannot use."""


def applicable(row: labelled.Row, method: str) -> bool:
    return not (method == "all" and len(row["options"]) > MAX_ALL_OPTIONS)


def _option_ids(row: labelled.Row) -> list[str]:
    return [option["id"] for option in row["options"]]


def record(row: labelled.Row, method: str, answer: dict[str, Any]) -> Record:
    """What a served answer says about one row under one method, in the row's own option order."""
    ids = _option_ids(row)
    if "combined" in answer:
        combined = answer["combined"]
        probabilities = list(combined["probabilities"])
        scores = [math.log(max(p, math.ulp(0.0))) for p in probabilities]
        top, agreement, count = ids.index(combined["top"]), combined["agreement"], combined["orderings"]
        prompt_version = answer["orderings"][0].get("prompt_version")
    else:
        probabilities, scores = list(answer["probabilities"]), list(answer["option_logits"])
        top = max(range(len(ids)), key=probabilities.__getitem__)
        agreement, count = None, 1
        prompt_version = answer.get("prompt_version")
    if answer.get("option_ids") != ids:
        raise ScoringError(f"row {row['id']!r} ({method}): the answer scores options {answer.get('option_ids')}, not {ids}")
    return {"probabilities": probabilities, "scores": scores, "top": top, "agreement": agreement,
            "orderings": count, "prompt_version": prompt_version}


def derive(row: labelled.Row, method: str, answer: dict[str, Any], wanted: Sequence[str]) -> dict[str, Record]:
    """Records for every wanted method from one answer under `method`, a superset of their orderings."""
    if "combined" not in answer:
        return {method: record(row, method, answer)}
    count = len(row["options"])
    position = {order: k for k, order in enumerate(orderings(count, method))}
    if len(position) != len(answer["orderings"]):
        raise ScoringError(f"row {row['id']!r} ({method}): {len(answer['orderings'])} orderings, expected {len(position)}")
    out = {method: record(row, method, answer)}
    for smaller in wanted:
        if smaller == method or not applicable(row, smaller):
            continue
        results = [answer["orderings"][position[order]] for order in orderings(count, smaller)]
        out[smaller] = record(row, smaller, results[0] if smaller == "none" else combine(row, smaller, results))
    return out


def largest(row: labelled.Row, wanted: Sequence[str]) -> str:
    """The method whose orderings include every other wanted one's, for this row."""
    return max((m for m in wanted if applicable(row, m)), key=METHODS.index)


async def health(target: Target) -> dict[str, Any]:
    response = await call(target, "GET", "/health", timeout=10.0)
    if response.status != 200:
        raise ScoringError(f"/health answered {response.status}")
    return response.json()


Job = tuple[labelled.Row, str]
Handler = Callable[[labelled.Row, str, dict[str, Any]], dict[tuple[str, str], Any]]


async def _worker(target: Target, jobs: asyncio.Queue[Job], out: dict[tuple[str, str], Any], progress: Progress,
                  timeout: float, body: Callable[[labelled.Row, str], dict[str, Any]], handle: Handler) -> None:
    """Send queued (row, method) jobs on one keep-alive connection; `handle` turns each answer into entries of `out`."""
    connection = await Connection.open(target)
    try:
        while not jobs.empty():
            row, method = jobs.get_nowait()
            response = await connection.request(target, "POST", "/decide", body(row, method), timeout)
            if response.status != 200:
                raise ScoringError(f"/decide {row['id']!r} ({method}) answered {response.status}: {response.body[:300]!r}")
            out.update(handle(row, method, response.json()))
            progress.tick()
            if connection.closed:
                connection = await Connection.open(target)
    finally:
        await connection.close()


async def ask(target: Target, jobs: Sequence[Job], handle: Handler, progress: Progress, concurrency: int = 2,
              timeout: float = DEFAULT_TIMEOUT, body: Callable[[labelled.Row, str], dict[str, Any]] = labelled.request,
              ) -> dict[tuple[str, str], Any]:
    """POST every (row, method) to /decide on `concurrency` connections; what `handle` made of the answers.

    The first non-200 answer stops the run (ScoringError naming the row and method)."""
    queue: asyncio.Queue[Job] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    out: dict[tuple[str, str], Any] = {}
    workers = [asyncio.create_task(_worker(target, queue, out, progress, timeout, body, handle))
               for _ in range(max(1, concurrency))]
    try:
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
    return out


async def score(target: Target, items: Sequence[labelled.Row], methods: Sequence[str] = METHODS,
                concurrency: int = 2, timeout: float = DEFAULT_TIMEOUT, derive_smaller: bool = False) -> dict[str, Any]:
    """Every applicable (row, method), method by method; the server's /health and the per-row records."""
    facts = await health(target)
    skipped: dict[str, list[str]] = {method: [row["id"] for row in items if not applicable(row, method)] for method in methods}
    if derive_smaller:
        jobs = [(row, largest(row, methods)) for row in items if any(applicable(row, m) for m in methods)]
    else:
        jobs = [(row, method) for method in methods for row in items if applicable(row, method)]
    wanted = list(methods)

    def handle(row: labelled.Row, method: str, answer: dict[str, Any]) -> dict[tuple[str, str], Record]:
        records = derive(row, method, answer, wanted) if derive_smaller else {method: record(row, method, answer)}
        return {(row["id"], m): r for m, r in records.items()}

    progress = Progress("evaluate: requests answered", len(jobs), every=5.0)
    out = await ask(target, jobs, handle, progress, concurrency, timeout)
    scored = [{"id": row["id"], "label": row["label"], "split": labelled.split_of(row),
               "workload": row.get("workload"), "options": len(row["options"]),
               "methods": {m: out[row["id"], m] for m in methods if (row["id"], m) in out}} for row in items]
    return {"health": facts, "methods": list(methods), "derived": derive_smaller, "rows": scored, "skipped": skipped}


def add_arguments(parser: argparse.ArgumentParser, results_help: str) -> None:
    """Where the scores come from (a server or a saved run) and how rows are scored (evaluate and calibrate share them)."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--url", help="http://127.0.0.1:PORT of a running server (token from SEMIF_API_TOKEN); needs --data")
    source.add_argument("--results", type=Path, help=results_help)
    parser.add_argument("--data", help="labelled JSONL {id, state, question, options, label[, split, workload]}")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--workload", default=DEFAULT_WORKLOAD, help="workload of rows that name none (default: default)")
    parser.add_argument("--concurrency", type=int, default=2, help="requests in flight (default 2)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per request")
    parser.add_argument("--derive", action="store_true",
                        help="ask each row once under its largest method and derive the smaller ones from its "
                             "orderings (fewer forward passes; see bench/labelled/scoring.py)")


def score_from(args: argparse.Namespace) -> dict[str, Any]:
    """Load args.data and score it through args.url as the options say (ValueError/RowError on bad input)."""
    if args.data is None:
        raise ValueError("--url needs --data")
    items = labelled.load(args.data)
    return asyncio.run(score(Target.from_url(args.url), items, args.methods, args.concurrency, args.timeout, args.derive))
