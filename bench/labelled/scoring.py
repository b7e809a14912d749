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
refuses it with a 422; `--all-max-options` lowers the cap, since n! rows per decision
cost more than they tell on a slow model), nor "prior" for a row whose (workload, option count) has
no prior on the server (/health's `calibration.priors`, where the server would
answer 422), nor "adaptive" likewise; those rows are listed under `skipped`. The
methods that read the prior ("prior", "adaptive") are the only ones that send a
`workload` (the row's own, else --workload): it selects the prior, while on the
other methods it would ask for a temperature the file may not hold.

`derive=True` saves forward passes on a slow machine: each row is asked once,
under the largest method it needs, and the smaller methods are derived from
that answer's per-ordering results (SemIf's results, unchanged): "none" is the
identity ordering's result, and "rotations" (a subset of "all"'s permutations)
is combined by the server's own `averaging.combine`. The only difference from
asking each method separately is that those rows were scored together in one
`score_shared` call rather than each in its own (the contract's shared-vs-direct
gap, ~1e-6 on the CPU models measured). "prior" is not derived here: it is one row
of its own, asked separately, which is what it costs in service (bench/labelled/derived.py
derives it, and the methods built on it, offline from the rotations' results, which a derived
run keeps: the rotations record's `results`, each rotation's option ids and logits as scored).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common.loadgen import Connection, Target, call
from bench.common.report import Progress
from semif_serve.decisions.averaging import (
    MAX_ALL_OPTIONS,
    METHODS,
    ORDERINGS,
    combine,
    permutations,
)
from semif_serve.decisions.methods import named
from semif_serve.decisions.prior import METHOD as PRIOR
from semif_serve.decisions.views import as_json

from . import journal
from . import rows as labelled

Record = dict[str, Any]
DEFAULT_TIMEOUT = (
    600.0  # one "all" request over 4 options is 24 rows in one call: seconds on a loaded CPU
)
DEFAULT_WORKLOAD = "default"
ROTATIONS = "rotations"
NOT_ASKED = {
    method: "no prior on the server for its (workload, option count)"
    for method in ORDERINGS
    if named(method).needs_prior
}


def all_not_asked(max_options: int) -> str:
    """Why "all" skipped a row: the contract's cap, or the lower one the run chose."""
    if max_options >= MAX_ALL_OPTIONS:
        return f"more than {MAX_ALL_OPTIONS} options; the contract refuses 'all' there"
    return f"more than {max_options} options (--all-max-options)"


class ScoringError(RuntimeError):
    """The server answered something evaluation cannot use."""


@dataclass(frozen=True)
class Served:
    """What decides whether the server can answer a row under a method: the (workload, option
    count) pairs it holds a prior for (from /health), and the workload of a row that names none."""

    priors: frozenset[tuple[str, int]] = frozenset()
    workload: str = DEFAULT_WORKLOAD
    all_max_options: int = MAX_ALL_OPTIONS

    @classmethod
    def from_health(
        cls, health: dict[str, Any], workload: str, all_max_options: int = MAX_ALL_OPTIONS
    ) -> Served:
        listed = (health.get("calibration") or {}).get("priors") or {}
        return cls(
            frozenset((name, int(n)) for name, counts in listed.items() for n in counts),
            workload,
            min(all_max_options, MAX_ALL_OPTIONS),
        )

    def workload_of(self, row: labelled.Row) -> str:
        return labelled.workload_of(row, self.workload)

    def applicable(self, row: labelled.Row, method: str) -> bool:
        if method == "all":
            return len(row["options"]) <= self.all_max_options
        if named(method).needs_prior:
            return (self.workload_of(row), len(row["options"])) in self.priors
        return True

    def body(self, row: labelled.Row, method: str) -> dict[str, Any]:
        reads_prior = named(method).needs_prior
        return labelled.request(row, method, self.workload_of(row) if reads_prior else None)


def _option_ids(row: labelled.Row) -> list[str]:
    return [option["id"] for option in row["options"]]


def record(row: labelled.Row, method: str, answer: dict[str, Any]) -> Record:
    """What a served answer says about one row under one method, in the row's own option order."""
    ids = _option_ids(row)
    served_method = answer.get("combined", {}).get("method")
    if served_method != (None if method == "none" else method):
        raise ScoringError(
            f"row {row['id']!r}: asked for orderings {method!r}, the answer is combined by {served_method!r}"
        )
    extra: dict[str, Any] = {}
    if "combined" in answer:
        combined = answer["combined"]
        probabilities = list(combined["probabilities"])
        scores = [math.log(max(p, math.ulp(0.0))) for p in probabilities]
        top, agreement, count = (
            ids.index(combined["top"]),
            combined["agreement"],
            combined["orderings"],
        )
        prompt_version = answer["orderings"][0].get("prompt_version")
        if "prior" in combined:  # methods that read the prior: the prior divided out, as served
            extra = {"prior": list(combined["prior"])}
        if "escalated" in combined:  # adaptive: the rows it scored and whether it escalated
            extra |= {key: combined[key] for key in ("rows", "escalated", "threshold")}
            count = combined["rows"]  # what it cost, which its answer's orderings may not show
    else:
        probabilities, scores = list(answer["probabilities"]), list(answer["option_logits"])
        top = max(range(len(ids)), key=probabilities.__getitem__)
        agreement, count = None, 1
        prompt_version = answer.get("prompt_version")
    if answer.get("option_ids") != ids:
        raise ScoringError(
            f"row {row['id']!r} ({method}): the answer scores options {answer.get('option_ids')}, not {ids}"
        )
    return {
        "probabilities": probabilities,
        "scores": scores,
        "top": top,
        "agreement": agreement,
        "orderings": count,
        "prompt_version": prompt_version,
        **extra,
    }


def derive(
    row: labelled.Row,
    method: str,
    answer: dict[str, Any],
    wanted: Sequence[str],
    served: Served = Served(),
) -> dict[str, Record]:
    """Records for every wanted averaging method from one answer under `method`, a superset of their orderings."""
    if "combined" not in answer:
        return {method: record(row, method, answer)}
    count = len(row["options"])
    position = {order: k for k, order in enumerate(permutations(count, method))}
    if len(position) != len(answer["orderings"]):
        raise ScoringError(
            f"row {row['id']!r} ({method}): {len(answer['orderings'])} orderings, expected {len(position)}"
        )
    out = {method: record(row, method, answer)}
    if method == ROTATIONS:
        out[method]["results"] = kept(answer["orderings"])
    for smaller in wanted:
        if smaller == method or smaller not in METHODS or not served.applicable(row, smaller):
            continue
        results = [answer["orderings"][position[order]] for order in permutations(count, smaller)]
        out[smaller] = record(
            row,
            smaller,
            results[0] if smaller == "none" else dict(as_json(combine(row, smaller, results))),
        )
        if smaller == ROTATIONS:
            out[smaller]["results"] = kept(results)
    return out


def kept(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a derived run keeps of each rotation's result: its option ids, logits and probabilities as scored."""
    return [
        {key: r[key] for key in ("option_ids", "option_logits", "probabilities")} for r in results
    ]


def largest(row: labelled.Row, wanted: Sequence[str], served: Served = Served()) -> str:
    """The averaging method whose orderings include every other wanted one's, for this row."""
    return max((m for m in wanted if m in METHODS and served.applicable(row, m)), key=METHODS.index)


async def health(target: Target) -> dict[str, Any]:
    response = await call(target, "GET", "/health", timeout=10.0)
    if response.status != 200:
        raise ScoringError(f"/health answered {response.status}")
    return response.json()


Job = tuple[labelled.Row, str]
ScoredRow = dict[str, Any]  # {id, label, split, workload, options, methods: {method: Record}}
RowSink = Callable[[ScoredRow], None] | None
Handler = Callable[[labelled.Row, str, dict[str, Any]], dict[tuple[str, str], Any]]


async def _worker(
    target: Target,
    jobs: asyncio.Queue[Job],
    out: dict[tuple[str, str], Any],
    progress: Progress,
    timeout: float,
    body: Callable[[labelled.Row, str], dict[str, Any]],
    handle: Handler,
) -> None:
    """Send queued (row, method) jobs on one keep-alive connection; `handle` turns each answer into entries of `out`."""
    connection = await Connection.open(target)
    try:
        while not jobs.empty():
            row, method = jobs.get_nowait()
            response = await connection.request(
                target, "POST", "/decide", body(row, method), timeout
            )
            if response.status != 200:
                raise ScoringError(
                    f"/decide {row['id']!r} ({method}) answered {response.status}: {response.body[:300]!r}"
                )
            out.update(handle(row, method, response.json()))
            progress.tick()
            if connection.closed:
                connection = await Connection.open(target)
    finally:
        await connection.close()


async def ask(
    target: Target,
    jobs: Sequence[Job],
    handle: Handler,
    progress: Progress,
    concurrency: int = 2,
    timeout: float = DEFAULT_TIMEOUT,
    body: Callable[[labelled.Row, str], dict[str, Any]] = labelled.request,
) -> dict[tuple[str, str], Any]:
    """POST every (row, method) to /decide on `concurrency` connections; what `handle` made of the answers.

    The first non-200 answer stops the run (ScoringError naming the row and method)."""
    queue: asyncio.Queue[Job] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    out: dict[tuple[str, str], Any] = {}
    workers = [
        asyncio.create_task(_worker(target, queue, out, progress, timeout, body, handle))
        for _ in range(max(1, concurrency))
    ]
    try:
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
    return out


async def score(
    target: Target,
    items: Sequence[labelled.Row],
    methods: Sequence[str] = METHODS,
    concurrency: int = 2,
    timeout: float = DEFAULT_TIMEOUT,
    derive_smaller: bool = False,
    workload: str = DEFAULT_WORKLOAD,
    all_max_options: int = MAX_ALL_OPTIONS,
    resume: Callable[[dict[str, Any]], tuple[dict[str, ScoredRow], RowSink]] | None = None,
) -> dict[str, Any]:
    """Every applicable (row, method), row by row; the server's /health and the per-row records.

    `resume`, given /health, returns the rows already answered (not asked again) and where to hand
    each newly answered row as soon as all its methods are in (the journal)."""
    facts = await health(target)
    served = Served.from_health(facts, workload, all_max_options)
    previous, sink = resume(facts) if resume is not None else ({}, None)
    skipped = {
        method: [row["id"] for row in items if not served.applicable(row, method)]
        for method in methods
    }
    averaged = [m for m in methods if m in METHODS]
    jobs: list[Job] = []
    for row in items:  # row by row: a run cut short has whole rows, in the data's order
        if row["id"] in previous:
            continue
        if derive_smaller:
            if any(served.applicable(row, m) for m in averaged):
                jobs.append((row, largest(row, averaged, served)))
            jobs += [(row, m) for m in methods if m not in METHODS and served.applicable(row, m)]
        else:
            jobs += [(row, m) for m in methods if served.applicable(row, m)]
    pending = Counter(row["id"] for row, _ in jobs)
    out: dict[tuple[str, str], Record] = {}

    def entry(row: labelled.Row) -> ScoredRow:
        return {
            "id": row["id"],
            "label": row["label"],
            "split": labelled.split_of(row),
            "workload": row.get("workload"),
            "options": len(row["options"]),
            "methods": {m: out[row["id"], m] for m in methods if (row["id"], m) in out},
        }

    def handle(
        row: labelled.Row, method: str, answer: dict[str, Any]
    ) -> dict[tuple[str, str], Record]:
        derived = derive_smaller and method in METHODS
        records = (
            derive(row, method, answer, averaged, served)
            if derived
            else {method: record(row, method, answer)}
        )
        out.update({(row["id"], m): r for m, r in records.items()})
        pending[row["id"]] -= 1
        if sink is not None and not pending[row["id"]]:
            sink(entry(row))
        return {}

    progress = Progress("evaluate: requests answered", len(jobs), every=5.0)
    await ask(target, jobs, handle, progress, concurrency, timeout, served.body)
    scored = [previous[row["id"]] if row["id"] in previous else entry(row) for row in items]
    return {
        "health": facts,
        "methods": list(methods),
        "derived": derive_smaller,
        "workload": workload,
        "all_max_options": served.all_max_options,
        "rows": scored,
        "skipped": skipped,
    }


def load_results(paths: Sequence[Path]) -> dict[str, Any]:
    """Saved runs (`evaluate --out`) as one: the rows of each, in order, so that runs over disjoint rows
    (one per split, say) are reported and fitted together. They must come from the same model, revision,
    methods and options, and share no row (ValueError otherwise)."""
    runs = [
        journal.as_run(Path(path))
        if Path(path).suffix == ".jsonl"
        else json.loads(Path(path).read_text(encoding="utf-8"))
        for path in paths
    ]
    first, path0 = runs[0], paths[0]
    same = ("methods", "derived", "workload", "all_max_options")
    for run, path in zip(runs[1:], paths[1:]):
        for key in same:
            if run.get(key) != first.get(key):
                raise ValueError(f"{path}: {key} {run.get(key)!r}, {path0} has {first.get(key)!r}")
        for key in ("model", "revision"):
            if run["health"].get(key) != first["health"].get(key):
                raise ValueError(
                    f"{path}: {key} {run['health'].get(key)!r}, {path0} has {first['health'].get(key)!r}"
                )
    ids = [row["id"] for run in runs for row in run["rows"]]
    doubled = sorted({i for i in ids if ids.count(i) > 1})
    if doubled:
        raise ValueError(f"rows saved in more than one of the runs: {', '.join(doubled)}")
    splits = {run.get("split") for run in runs}
    return {
        **{key: first[key] for key in ("health", *same) if key in first},
        "split": splits.pop() if len(splits) == 1 else None,
        "rows": [row for run in runs for row in run["rows"]],
        "skipped": {
            method: [i for run in runs for i in run["skipped"].get(method, [])]
            for method in first["skipped"]
        },
        "data": first.get("data", str(path0)),
    }


def add_arguments(parser: argparse.ArgumentParser, results_help: str) -> None:
    """Where the scores come from (a server or a saved run) and how rows are scored (evaluate and calibrate share them)."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--url",
        help="http://127.0.0.1:PORT of a running server (token from SEMIF_API_TOKEN); needs --data",
    )
    source.add_argument(
        "--results",
        type=Path,
        nargs="+",
        help=f"{results_help}; several runs over disjoint rows are read as one",
    )
    parser.add_argument(
        "--data", help="labelled JSONL {id, state, question, options, label[, split, workload]}"
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=ORDERINGS,
        default=list(METHODS),
        help=f"ordering methods to ask for (default: {' '.join(METHODS)}); '{PRIOR}' needs the "
        "server to hold a prior for the row's workload and option count",
    )
    parser.add_argument(
        "--workload",
        default=DEFAULT_WORKLOAD,
        help="workload of rows that name none (default: default)",
    )
    parser.add_argument(
        "--all-max-options",
        type=int,
        default=MAX_ALL_OPTIONS,
        help=f"ask 'all' only on rows with at most this many options (default and most: "
        f"{MAX_ALL_OPTIONS}, the contract's cap)",
    )
    parser.add_argument("--concurrency", type=int, default=2, help="requests in flight (default 2)")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per request"
    )
    parser.add_argument(
        "--derive",
        action="store_true",
        help="ask each row once under its largest averaging method and derive the smaller ones from "
        "its orderings (fewer forward passes; see bench/labelled/scoring.py); 'prior' is always "
        "asked on its own",
    )


def score_from(
    args: argparse.Namespace,
    split: str | None = None,
    limit: int | None = None,
    resume: Callable[[dict[str, Any]], tuple[dict[str, ScoredRow], RowSink]] | None = None,
) -> dict[str, Any]:
    """Load args.data (one side of the split, when given; its first `limit` rows, when given) and score it
    through args.url as the options say (ValueError/RowError on bad input)."""
    if args.data is None:
        raise ValueError("--url needs --data")
    items = labelled.of_split(labelled.load(args.data), split)[:limit]
    return asyncio.run(
        score(
            Target.from_url(args.url),
            items,
            args.methods,
            args.concurrency,
            args.timeout,
            args.derive,
            args.workload,
            args.all_max_options,
            resume,
        )
    )
