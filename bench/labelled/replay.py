"""`python -m bench replay`: labelled decisions replayed through a running server as traffic.

The rows of each --data set, in order (a second set after the first is a workload whose questions
change), go out one /decide each under the next of --orderings in turn, so every method meets the
same queue. Open loop at Poisson times (--rate, seeded: the same arrivals against every server), or
one after another (--rate 0). With --audits (one after another only), after each answer it waits
until its audit is counted (or none waits or runs: it was not drawn) and keeps GET /v1/audit's
entry for the row's (workload, n): the live prior, agreement and drift, audit by audit.

Rules a newcomer could break:
1. Labels are never sent: a row goes out as rows.request builds it, as `bench evaluate` sends it.
2. --workload renames every row's workload, so several sets stream under one name; the server
   must hold a prior for it (methods `prior` and `adaptive` read it).
3. Latency is the caller's: from the request leaving to its answer, on a fresh connection each
   (a fleet's callers), as bench/common/loadgen.py's open loop measures it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common.loadgen import Connection, Target, encode, open_loop, percentile, poisson_arrivals
from bench.common.report import markdown_table, now, write_json
from semif_serve.decisions.methods import ORDERINGS

from . import rows as labelled
from .scoring import DEFAULT_WORKLOAD, Served

BODY = Served()  # the request a row makes: its workload only where the method reads the prior

Record = dict[str, Any]
AUDIT_SETTLE_S = 0.3  # no audit waiting or running this long after an answer: none was drawn
AUDIT_WAIT_S = 120.0  # one audit of a large decision on a loaded CPU, with room
POLL_S = 0.1
LOG_WAIT_S = 10.0  # the access log's flush interval (0.5 s by default), with room


def stream(
    paths: Sequence[str],
    split: str | None,
    limits: Sequence[int],
    workload: str | None,
    options: int | None = None,
) -> list[list[labelled.Row]]:
    """Each set's rows (its first limit of the split; the last limit holds for the sets after it;
    only those with `options` options if given), renamed to `workload` if given."""
    sets = []
    for k, path in enumerate(paths):
        chosen = [
            row
            for row in labelled.of_split(labelled.load(path), split)
            if options is None or len(row["options"]) == options
        ]
        limit = limits[min(k, len(limits) - 1)] if limits else None
        sets.append([{**row, "workload": workload} if workload else row for row in chosen[:limit]])
    return sets


def answered(row: labelled.Row, orderings: str, status: int | None, payload: Any) -> Record:
    """What one reply says: the rows scored and whether it escalated (adaptive), or the error code."""
    record: Record = {
        "id": row["id"],
        "workload": labelled.workload_of(row, DEFAULT_WORKLOAD),
        "n": len(row["options"]),
        "orderings": orderings,
        "status": status,
    }
    if status == 200 and isinstance(payload, dict):
        combined = payload.get("combined") or {}
        record["rows"] = combined.get("rows", combined.get("orderings", 1))
        record["escalated"] = combined.get("escalated")
    elif isinstance(payload, dict):
        record["code"] = (payload.get("error") or {}).get("code")
    return record


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


async def paced(
    target: Target,
    rows: Sequence[labelled.Row],
    methods: Sequence[str],
    rate: float,
    seed: str,
    timeout: float,
) -> list[Record]:
    """Open loop: row k at the k-th Poisson arrival under methods[k % len(methods)]."""
    arrivals: list[float] = []
    horizon = len(rows) / rate
    while len(arrivals) < len(rows):  # a draw short of the rows gets a longer window, same seed
        arrivals = poisson_arrivals(rate, horizon, seed)[: len(rows)]
        horizon *= 1.5
    plan = [(row, methods[k % len(methods)]) for k, row in enumerate(rows)]
    raws = [
        encode(target, "POST", "/decide", BODY.body(row, method), request_id=f"{seed}-{k}")
        for k, (row, method) in enumerate(plan)
    ]
    run = await open_loop(target, raws, arrivals, arrivals[-1] + 1e-9, timeout)
    return [
        {
            **answered(row, method, fate.status, _json(fate.body)),
            "due": fate.due,
            "lag": fate.lag,
            "latency": fate.latency,
            "outcome": fate.outcome,
            "request_id": f"{seed}-{k}",
        }
        for k, ((row, method), fate) in enumerate(zip(plan, run.fates))
    ]


async def audit_entry(
    target: Target, connection: Connection, workload: str, n: int
) -> tuple[int, Record | None]:
    """The audits waiting or running, and /v1/audit's entry for (workload, n) (None: not audited yet)."""
    response = await connection.exchange(encode(target, "GET", "/v1/audit", bearer=True))
    if response.status != 200:
        raise RuntimeError(f"GET /v1/audit answered {response.status}: {response.body[:200]!r}")
    document = response.json()
    entry = next((e for e in document["audits"] if e["workload"] == workload and e["n"] == n), None)
    return document["pending"]["audits"] + document["pending"]["running"], entry


def _finished(entry: Record | None) -> int:
    return sum((entry or {}).get("outcomes", {}).values())


async def settled(
    target: Target, connection: Connection, workload: str, n: int, before: int
) -> Record | None:
    """Waits until the audit this answer may have queued is done: its (workload, n) counts one more
    outcome, or no audit waited or ran for AUDIT_SETTLE_S (not sampled); its entry then."""
    deadline = time.perf_counter() + AUDIT_WAIT_S
    empty_since: float | None = None
    while time.perf_counter() < deadline:
        pending, entry = await audit_entry(target, connection, workload, n)
        if _finished(entry) > before:
            return entry
        empty_since = (empty_since or time.perf_counter()) if pending == 0 else None
        if empty_since is not None and time.perf_counter() - empty_since >= AUDIT_SETTLE_S:
            return entry
        await asyncio.sleep(POLL_S)
    raise TimeoutError(f"the audit queue did not settle within {AUDIT_WAIT_S:.0f} s")


AUDIT_KEYS = (
    "audits",
    "live_prior",
    "standard_errors",
    "served_prior",
    "agreement",
    "drift",
    "drift_threshold",
    "drift_window",
    "outcomes",
)


async def one_by_one(
    target: Target,
    rows: Sequence[labelled.Row],
    methods: Sequence[str],
    audits: bool,
    seed: str,
    timeout: float,
) -> list[Record]:
    """Each row after the last one's answer (and, with `audits`, after its audit)."""
    records: list[Record] = []
    connection = await Connection.open(target)
    try:
        for k, row in enumerate(rows):
            method = methods[k % len(methods)]
            workload, n = labelled.workload_of(row, DEFAULT_WORKLOAD), len(row["options"])
            before = (
                _finished((await audit_entry(target, connection, workload, n))[1]) if audits else 0
            )
            started = time.perf_counter()
            raw = encode(
                target, "POST", "/decide", BODY.body(row, method), request_id=f"{seed}-{k}"
            )
            response = await connection.exchange(raw, timeout)
            record = {
                **answered(row, method, response.status, _json(response.body)),
                "latency": time.perf_counter() - started,
                "request_id": f"{seed}-{k}",
            }
            if audits:
                entry = await settled(target, connection, workload, n, before)
                record["audit"] = {key: (entry or {}).get(key) for key in AUDIT_KEYS}
            records.append(record)
            print(
                f"replay: {k + 1}/{len(rows)} {row['id']} {method} {response.status}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        await connection.close()
    return records


ACCESS = re.compile(r"request_id=(\S+) .*?queued_s=(\S+) scoring_s=(\S+)")


def logged(path: Path, records: Sequence[Record]) -> str:
    """The server's log once it holds every record's line (the server flushes its access log every
    SEMIF_LOG_FLUSH_S), or as it is after LOG_WAIT_S."""
    deadline = time.monotonic() + LOG_WAIT_S
    while True:
        text = path.read_text(encoding="utf-8")
        if time.monotonic() > deadline or all(
            f"request_id={r['request_id']} " in text for r in records
        ):
            return text
        time.sleep(POLL_S)


def with_server_times(records: Sequence[Record], access_log: str) -> list[Record]:
    """Each record with the server's own queued and scoring seconds from its access log, found by
    the request id the replay sent (a line without them, a refusal, leaves None)."""
    times: dict[str, tuple[float | None, float | None]] = {}
    for match in ACCESS.finditer(access_log):
        queued, scoring = (None if v == "None" else float(v) for v in match.group(2, 3))
        times[match.group(1)] = (queued, scoring)
    return [
        {**r, **dict(zip(("queued_s", "scoring_s"), times.get(r["request_id"], (None, None))))}
        for r in records
    ]


def _mean_of(records: Sequence[Record], key: str) -> str:
    values = [r[key] for r in records if r.get(key) is not None]
    return f"{sum(values) / len(values):.2f}" if values else "-"


def latency_table(records: Sequence[Record]) -> list[list[Any]]:
    """Per method: answered, not, p50, p95, p99 and max seconds, rows per decision, and the mean
    scorer seconds where the access log gave them."""
    table = []
    for method in dict.fromkeys(r["orderings"] for r in records):
        mine = [r for r in records if r["orderings"] == method]
        ok = [r for r in mine if r["status"] == 200]
        seconds = [r["latency"] for r in ok]
        table.append(
            [
                method,
                len(ok),
                len(mine) - len(ok),
                *(f"{percentile(seconds, q):.2f}" if seconds else "-" for q in (50, 95, 99)),
                f"{max(seconds):.2f}" if seconds else "-",
                f"{sum(r['rows'] for r in ok) / len(ok):.2f}" if ok else "-",
                _mean_of(ok, "scoring_s"),
            ]
        )
    return table


def drift_crossing(records: Sequence[Record], switch: int) -> Record | None:
    """After the stream's switch (row index), the first answer whose audit drift exceeds its
    threshold: how many audits after the switch it took."""
    if switch <= 0 or switch >= len(records):
        return None
    at_switch = (records[switch - 1].get("audit") or {}).get("audits") or 0
    for record in records[switch:]:
        audit = record.get("audit") or {}
        drift, threshold = audit.get("drift"), audit.get("drift_threshold")
        if drift is not None and threshold is not None and drift > threshold:
            return {
                "id": record["id"],
                "audits_after_switch": audit["audits"] - at_switch,
                "drift": drift,
                "threshold": threshold,
            }
    return {"audits_after_switch": None, "note": "drift stayed below its threshold"}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench replay", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--url", required=True, help="http://127.0.0.1:PORT (token from SEMIF_API_TOKEN)"
    )
    p.add_argument(
        "--data", nargs="+", required=True, help="labelled JSONL sets, streamed in order"
    )
    p.add_argument("--split", choices=("fit", "test"), help="one side of each set's split")
    p.add_argument(
        "--limit",
        type=int,
        nargs="+",
        default=[],
        help="the first N rows of each set (one N per set, or one for all)",
    )
    p.add_argument("--options", type=int, help="only the rows with this many options")
    p.add_argument("--workload", help="rename every row's workload (several sets under one name)")
    p.add_argument(
        "--orderings",
        nargs="+",
        default=["prior"],
        choices=ORDERINGS,
        help="methods, taken in turn request by request (default: prior)",
    )
    p.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="Poisson arrivals per second; 0 (default): one after another",
    )
    p.add_argument("--seed", default="replay", help="seeds the arrivals")
    p.add_argument(
        "--audits",
        action="store_true",
        help="after each answer wait for its audit and keep /v1/audit's entry (--rate 0)",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds a request may take")
    p.add_argument(
        "--access-log",
        type=Path,
        help="the server's log: each request's queued and scoring seconds, by the id the replay sent",
    )
    p.add_argument("--out", type=Path, help="every request and the summary as JSON")
    return p


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    if args.audits and args.rate > 0:
        parser().error("--audits waits for each audit, so it needs --rate 0")
    target = Target.from_url(args.url)
    sets = stream(args.data, args.split, args.limit, args.workload, args.options)
    rows = [row for chosen in sets for row in chosen]
    if args.rate > 0:
        records = asyncio.run(
            paced(target, rows, args.orderings, args.rate, args.seed, args.timeout)
        )
    else:
        records = asyncio.run(
            one_by_one(target, rows, args.orderings, args.audits, args.seed, args.timeout)
        )
    if args.access_log:
        records = with_server_times(records, logged(args.access_log, records))
    headers = [
        "orderings",
        "answered",
        "not answered",
        "p50 s",
        "p95 s",
        "p99 s",
        "max s",
        "rows/decision",
        "scorer s (mean)",
    ]
    table = latency_table(records)
    print(markdown_table(headers, table))
    first_set = len(sets[0])
    crossing = drift_crossing(records, first_set) if args.audits and len(sets) > 1 else None
    if crossing is not None:
        print(f"drift after the switch: {json.dumps(crossing)}")
    if args.out:
        write_json(
            args.out,
            {
                "tool": "replay",
                "when": now(),
                "args": {k: str(v) for k, v in vars(args).items()},
                "latency": [dict(zip(headers, line)) for line in table],
                "switch": first_set,
                "drift_crossing": crossing,
                "requests": records,
            },
        )
    return 0 if all(r["status"] == 200 for r in records) else 1
