"""`python -m bench wrk`: the overhead cells measured with wrk, a C load generator, not ours.

Rules: this module runs wrk against servers bench.load.peers starts and reads what wrk
prints and what each process spent; it computes no ratio and renders nothing
(bench/load/wrk_report.py does, from the figures alone).

Why wrk: a Python load generator on a 2-core machine can take a fair share of a
core; wrk (one thread, epoll) costs far less per request, so the figures say more
about the servers (it retired `python -m bench load`'s overhead section, which
drove the same cells in Python). The stub with no delay: ours with metrics and the
JSON access log on (as deployed), with metrics only, with both off, and FastAPI on
uvicorn[standard] (uvloop + httptools) twice, with uvicorn's default access log (`baseline_logged`) and
without one (`baseline`). Each cell runs every server in turn, the order reversed
every round, so drift on a shared machine hits all five alike.

Theory: around each wrk run the server's CPU (utime + stime of its process, all
threads, from /proc/PID/stat) is read before and after, and wrk's own CPU is the
growth of this process's reaped-children usage (wrk is the only child reaped in
between); divided by the requests wrk completed, they give CPU per request, which
on a shared machine moves far less than requests per second. wrk is a Debian
package (`apt-get install -y wrk`), needed for this benchmark only, never by the tests.

Writes bench/results/wrk.json and the marked `wrk` section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import datasets, procs
from bench.common.report import machine, note, splice, write_json
from bench.load import peers
from bench.load.wrk_report import NAMES as SERVERS
from bench.load.wrk_report import markdown, summarise

HERE = Path(__file__).resolve().parents[1]  # bench/
UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def sixteen_options() -> datasets.Row:
    """A 16-option row (SemIf's maximum), built from the first row's state."""
    base = datasets.rows()[0]
    options = [{"id": f"o{k:02d}", "description": f"Option number {k}"} for k in range(16)]
    return {
        "id": "sixteen",
        "state": base["state"],
        "question": "Which option fits best?",
        "options": options,
    }


def requests() -> dict[str, tuple[str, str, Any]]:
    """Each cell's method, path and JSON body, built from bench/data (`python -m bench server-cpu` sends them too)."""
    spec = datasets.load_json(datasets.SPEED21)
    return {
        "health": ("GET", "/health", None),
        "decide-2": ("POST", "/decide", datasets.first_with(2)),
        "decide-16": ("POST", "/decide", sixteen_options()),
        "shared-21": (
            "POST",
            "/decide/shared",
            datasets.shared_body(spec["state"], spec["decisions"]),
        ),
    }


def script(method: str, body: Any, token: str) -> str:
    """A wrk Lua script sending one fixed request (a long-bracket string needs no escaping)."""
    if body is None:
        return 'wrk.method = "GET"\n'
    text = json.dumps(body)
    assert "]==]" not in text
    return (
        f'wrk.method = "{method}"\nwrk.body = [==[{text}]==]\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f'wrk.headers["Authorization"] = "Bearer {token}"\n'
    )


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(number) * UNITS[unit]


def parse(output: str) -> dict[str, Any]:
    """Requests/sec, p50/p99, every failure wrk reports and the requests it completed."""
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    latency = {q: _ms(v) for q, v in re.findall(r"^\s+(50|99)%\s+(\S+)$", output, re.M)}
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    done = re.search(r"^\s*(\d+) requests in ", output, re.M)
    return {
        "rps": rps,
        "p50_ms": latency.get("50"),
        "p99_ms": latency.get("99"),
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": sum(map(int, errors.groups())) if errors else 0,
        "requests": int(done.group(1)) if done else 0,
    }


def _children_cpu() -> float:
    """User + system CPU of this process's reaped children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_wrk(
    server: procs.Running, path: str, lua: Path, conns: int, duration: int, threads: int
) -> dict[str, Any]:
    """One wrk run against `server`, with the CPU the server and wrk spent on it."""
    argv = [
        "wrk",
        f"-t{min(threads, conns)}",
        f"-c{conns}",
        f"-d{duration:g}s",
        "--latency",
        "-s",
        str(lua),
        server.url + path,
    ]
    server_before, wrk_before, started = server.cpu_seconds(), _children_cpu(), time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 30, check=False)
    wall, wrk_cpu, server_cpu = (
        time.monotonic() - started,
        _children_cpu() - wrk_before,
        server.cpu_seconds() - server_before,
    )
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr[-500:]}")
    return {**parse(done.stdout), "server_cpu_s": server_cpu, "wrk_cpu_s": wrk_cpu, "wall_s": wall}


def measure(args: argparse.Namespace, token: str) -> dict[str, Any]:
    cells: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="semif-wrk-"))
        servers = peers.start(stack, token)
        for endpoint, (method, path, body) in requests().items():
            lua = Path(scratch) / f"{endpoint}.lua"
            lua.write_text(script(method, body, token))
            for conns in args.concurrency:
                key = f"{endpoint}@{conns}"
                note(
                    f"wrk: {key}, {args.rounds} rounds x {args.duration:g} s on each of {len(SERVERS)} servers"
                )
                cells[key] = {name: [] for name in SERVERS}
                for index in range(args.rounds):
                    for name in SERVERS if index % 2 == 0 else SERVERS[::-1]:
                        cells[key][name].append(
                            run_wrk(servers[name], path, lua, conns, args.duration, args.threads)
                        )
    # Each run's own figures stay in the JSON beside the summary, so a report can be recomputed.
    return {"cells": {key: {**summarise(rounds), "runs": rounds} for key, rounds in cells.items()}}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench wrk", description=__doc__.splitlines()[0])
    p.add_argument(
        "--duration",
        type=int,
        default=2,
        help="whole seconds per server per round, as wrk takes them (default 2)",
    )
    p.add_argument(
        "--rounds", type=int, default=3, help="rounds per cell, order reversed each (default 3)"
    )
    p.add_argument(
        "--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32]
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="wrk threads (default 1: the other core is the server's)",
    )
    p.add_argument("--out", type=Path, default=HERE / "results" / "wrk.json")
    p.add_argument(
        "--md", type=Path, default=HERE / "RESULTS.md", help="its `wrk` section is replaced"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if shutil.which("wrk") is None:
        print("wrk is not installed: apt-get install -y wrk (Debian)", file=sys.stderr)
        return 2
    version = subprocess.run(["wrk", "-v"], capture_output=True, text=True, check=False)
    uvicorn, ours = peers.uvicorn_stack(), peers.ours_stack()
    result = {
        "machine": machine(),
        "uvicorn": uvicorn,
        "ours": ours,
        "stacks": peers.stacks(peers.VARIANTS, uvicorn, ours),
        "rounds": args.rounds,
        "duration_s": args.duration,
        "threads": args.threads,
        "wrk_version": (version.stdout + version.stderr).split()[1]
        if version.stdout + version.stderr
        else "?",
        **measure(args, procs.token()),
    }
    result["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    write_json(args.out, result)
    text = markdown(result)
    old = args.md.read_text(encoding="utf-8") if args.md.exists() else ""
    args.md.write_text(splice(old, "wrk", text), encoding="utf-8")
    print(text)
    return 0
