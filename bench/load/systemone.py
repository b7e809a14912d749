"""`python -m bench systemone`: /v1/systemone against /decide/shared with the same rows, side by side.

Rules: bench-only; a ratio is only ever two requests measured in the same run, alternated
(ABBA order over rounds) on the same server or the same kind of fresh server, because the
machine is shared and its load drifts. The rows are the same by construction: the
/decide/shared body is built from what `semif_serve.systemone.translate` makes of the
System One body. Two sections:

* stub: server CPU per request (the server process's utime + stime, all threads) under
  `wrk -t1 -c8`, a fresh stub server per run; wrk's speed cannot move CPU per request
  the way it moves requests per second. Target: /v1/systemone within 1.10x.
* small: SmolLM2-135M-Instruct on the CPU, one server, one request at a time (nothing
  queues, the client waits on the model), N timed requests per endpoint, alternated.
  Target: p50 of /v1/systemone within 1.02x of /decide/shared's.

Prints one JSON line per measurement, then the summary; `--out` writes it as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import datasets, procs
from bench.common.report import note, write_json
from bench.load import peers
from bench.load.wrk import run_wrk, script
from semif_serve.decisions import request_model
from semif_serve.systemone import translate

CONNECTIONS = 8
# /v1/systemone over /decide/shared on the same rows, at most: server CPU per request on the stub,
# and wall-clock p50 on SmolLM2.
STUB_CPU_SYSTEMONE_VS_SHARED_MAX = 1.10
SMALL_P50_SYSTEMONE_VS_SHARED_MAX = 1.02


def bodies() -> dict[str, tuple[str, dict[str, Any]]]:
    """The 21 speed criteria as 21 noul questions, and /decide/shared with the rows they translate to."""
    spec = datasets.load_json(datasets.SPEED21)
    questions = {
        d["id"]: {
            "type": "noul",
            "instructions": d["question"],
            "criteria": {"true": "Yes", "false": "No"},
        }
        for d in spec["decisions"]
    }
    systemone = {"model": "jev-latest", "state": spec["state"], "questions": questions}
    policy = translate.Policy(
        request_model.Limits(64, frozenset()), frozenset({"jev-latest"}), "none", None
    )
    rows = [
        d.row for d in translate.translate(json.dumps(systemone).encode(), policy).request.decisions
    ]
    return {
        "systemone": ("/v1/systemone", systemone),
        "shared": ("/decide/shared", datasets.shared_body(spec["state"], rows)),
    }


def alternated(rounds: int) -> list[str]:
    """ABBA: each round both endpoints, the order reversed every other round."""
    order = ["systemone", "shared"]
    return [name for r in range(rounds) for name in (order if r % 2 == 0 else order[::-1])]


def stub(rounds: int, seconds: int, token: str) -> dict[str, Any]:
    """CPU per request of each endpoint on a fresh stub server per run."""
    env = {**peers.STUB, **peers.OPS_ON}  # as deployed: metrics and the JSON access log on
    runs: dict[str, list[float]] = {"systemone": [], "shared": []}
    made = bodies()
    with tempfile.TemporaryDirectory() as tmp:
        for name in alternated(rounds):
            path, body = made[name]
            lua = Path(tmp) / f"{name}.lua"
            lua.write_text(script("POST", body, token))
            with procs.semif_serve(env, token) as server:
                run_wrk(server, path, lua, CONNECTIONS, 1, 1)  # warm-up
                figures = run_wrk(server, path, lua, CONNECTIONS, seconds, 1)
            if figures["non_2xx"] or figures["socket_errors"]:
                raise RuntimeError(
                    f"{name}: {figures['non_2xx']} non-2xx, {figures['socket_errors']} socket errors"
                )
            cpu = figures["server_cpu_s"] / figures["requests"] * 1e6
            runs[name].append(cpu)
            print(
                json.dumps(
                    {
                        "section": "stub",
                        "endpoint": name,
                        "requests": figures["requests"],
                        "rps": round(figures["rps"]),
                        "cpu_us_per_request": round(cpu, 1),
                        "wrk_cpu_s": round(figures["wrk_cpu_s"], 2),
                        "loadavg_1m": round(os.getloadavg()[0], 2),
                    }
                ),
                flush=True,
            )
    medians = {name: statistics.median(values) for name, values in runs.items()}
    ratio = medians["systemone"] / medians["shared"]
    bound = STUB_CPU_SYSTEMONE_VS_SHARED_MAX
    return {
        "runs": runs,
        "median_cpu_us": medians,
        "ratio": ratio,
        "target": bound,
        "met": ratio <= bound,
    }


def small(repeats: int, threads: int, token: str) -> dict[str, Any]:
    """Wall-clock per request of each endpoint on one SmolLM2 server, one request at a time."""
    note("systemone small: building (or finding) SmolLM2 with semif-serve small-model")
    settings = {**procs.small_model(), "OMP_NUM_THREADS": str(threads)}
    made = bodies()
    times: dict[str, list[float]] = {"systemone": [], "shared": []}
    overheads: dict[str, list[float]] = {"systemone": [], "shared": []}
    with (
        procs.semif_serve(settings, token, ready_timeout=600.0) as server,
        httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=300.0
        ) as client,
    ):

        def post(name: str) -> tuple[float, float]:
            """Wall-clock seconds of one request, and the part outside score_shared (its own timing)."""
            path, body = made[name]
            started = time.perf_counter()
            response = client.post(path, json=body)
            elapsed = time.perf_counter() - started
            response.raise_for_status()
            timing = response.json()["semif" if name == "systemone" else "timing"]
            scorer = (
                timing["timing"]["total_seconds"]
                if name == "systemone"
                else timing["total_seconds"]
            )
            print(
                json.dumps(
                    {
                        "section": "small",
                        "endpoint": name,
                        "seconds": round(elapsed, 4),
                        "outside_scorer_ms": round((elapsed - scorer) * 1e3, 2),
                    }
                ),
                flush=True,
            )
            return elapsed, elapsed - scorer

        for name in ("systemone", "shared"):  # one untimed warm-up each
            post(name)
        for name in alternated(repeats):
            seconds, outside = post(name)
            times[name].append(seconds)
            overheads[name].append(outside)
    p50 = {name: statistics.median(values) for name, values in times.items()}
    outside = {name: statistics.median(values) for name, values in overheads.items()}
    ratio, bound = p50["systemone"] / p50["shared"], SMALL_P50_SYSTEMONE_VS_SHARED_MAX
    return {
        "seconds": times,
        "p50_s": p50,
        "ratio": ratio,
        "target": bound,
        "met": ratio <= bound,
        "outside_scorer_s": overheads,
        "outside_scorer_p50_s": outside,
        # What /v1/systemone adds beyond the scorer, against /decide/shared's p50: the noise-free part of the ratio.
        "added_outside_scorer_fraction": (outside["systemone"] - outside["shared"]) / p50["shared"],
        "spread_s": {name: [min(v), max(v)] for name, v in times.items()},
        "n": repeats,
        "omp_num_threads": threads,
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench systemone", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--only", choices=("stub", "small"), help="one section (default: both)")
    parser.add_argument("--rounds", type=int, default=3, help="stub: runs per endpoint (default 3)")
    parser.add_argument(
        "--seconds", type=int, default=3, help="stub: whole seconds per wrk run (default 3)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=7,
        help="small: timed requests per endpoint (default 7, at least 5)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="small: OMP_NUM_THREADS for the server (default 1: two threads compete on a shared 2-core machine)",
    )
    parser.add_argument("--out", type=Path, help="write the summary here as JSON")
    args = parser.parse_args(argv)
    if args.repeats < 5:
        parser.error("--repeats must be at least 5 (the target is a p50 over N >= 5)")
    result: dict[str, Any] = {}
    token = procs.token()
    if args.only in (None, "stub"):
        result["stub"] = stub(args.rounds, args.seconds, token)
    if args.only in (None, "small"):
        result["small"] = small(args.repeats, args.threads, token)
    for section, figures in result.items():
        print(
            f"{section}: /v1/systemone / /decide/shared = {figures['ratio']:.3f} (target <= {figures['target']}): "
            f"{'met' if figures['met'] else 'NOT met'}"
        )
    if "small" in result:
        print(
            f"small: outside the scorer, /v1/systemone adds {result['small']['added_outside_scorer_fraction']:+.4%} "
            "of /decide/shared's p50"
        )
    if args.out is not None:
        write_json(args.out, result)
    return 0
