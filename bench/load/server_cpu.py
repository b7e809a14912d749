"""`python -m bench server-cpu`: server CPU per request under wrk, configurations alternated.

Rules: bench-only; measures one thing, the server process's own CPU (utime + stime, all
threads) per request answered, so a slower or faster load generator does not move it the
way it moves requests per second. Each configuration is a checkout (served from there,
so an older commit can run beside the current one; `procs.semif_serve(checkout=…)`) and
an access-log setting; every run starts a fresh server with the stub scorer, metrics on
and the JSON log (to a file, as every bench logs), warms it with 1 s of wrk, then reads
the CPU around `wrk -t1 -c8 -d{seconds}s` on one of `python -m bench wrk`'s requests
(`--request`, /health by default), through `wrk.run_wrk`. Configurations alternate in
each round (reversed every other round), since the machine is shared and its load
drifts. Prints one JSON line per run, then the median per configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.common import procs
from bench.load import peers
from bench.load.wrk import requests as wrk_requests
from bench.load.wrk import run_wrk, script

CONNECTIONS = 8


def run(
    label: str, root: Path, access_log: str, seconds: int, request: str, lua: Path, token: str
) -> dict[str, Any]:
    """One fresh server, one measured wrk run."""
    env = {**peers.STUB, **peers.OPS_ON, "SEMIF_ACCESS_LOG": access_log}
    path = wrk_requests()[request][1]
    with procs.semif_serve(env, token, checkout=root) as server:
        run_wrk(server, path, lua, CONNECTIONS, 1, 1)  # warm-up
        figures = run_wrk(server, path, lua, CONNECTIONS, seconds, 1)
    return {
        "config": label,
        "access_log": access_log,
        "request": request,
        "requests": figures["requests"],
        "rps": round(figures["rps"]),
        "non_2xx": figures["non_2xx"],
        "cpu_us_per_request": round(figures["server_cpu_s"] / figures["requests"] * 1e6, 1),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench server-cpu", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "configs",
        nargs="+",
        metavar="LABEL=ROOT:on|off",
        help="a checkout to serve from and its SEMIF_ACCESS_LOG, e.g. after=.:on",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--seconds", type=int, default=5, help="whole seconds per measured run, as wrk takes them"
    )
    parser.add_argument(
        "--request",
        choices=sorted(wrk_requests()),
        default="health",
        help="which of `python -m bench wrk`'s requests to send",
    )
    args = parser.parse_args(argv)
    configs = []
    for text in args.configs:
        label, rest = text.split("=", 1)
        root, access_log = rest.rsplit(":", 1)
        configs.append((label, Path(root).resolve(), access_log))
    method, _, body = wrk_requests()[args.request]
    token = procs.token()
    runs = []
    with tempfile.TemporaryDirectory(prefix="semif-cpu-") as scratch:
        lua = Path(scratch) / "request.lua"
        lua.write_text(script(method, body, token))
        for index in range(args.rounds):
            for label, root, access_log in configs if index % 2 == 0 else configs[::-1]:
                runs.append(run(label, root, access_log, args.seconds, args.request, lua, token))
                print(json.dumps(runs[-1]), flush=True)
    for label, _, access_log in configs:
        values = [
            item["cpu_us_per_request"]
            for item in runs
            if (item["config"], item["access_log"]) == (label, access_log)
        ]
        print(
            f"{label} access log {access_log}: median {statistics.median(values):.1f} us CPU per request {values}"
        )
    return 0
