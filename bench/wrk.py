"""`python -m bench wrk`: the overhead cells measured with wrk, a C load generator, not ours.

Why a second generator: bench/loadgen.py is Python, and on a 2-core machine it can
take a fair share of a core; wrk (one thread, epoll) costs far less per request, so
the figures say more about the servers. Same servers, same requests, same stub as
`python -m bench load`'s overhead section: ours with metrics and the JSON access log
on (as deployed), with metrics only, with both off, and FastAPI on uvicorn[standard]
(uvloop + httptools). Each cell runs every server in turn, the order reversed every round, so
drift on a shared machine hits all three alike. wrk is a Debian package
(`apt-get install -y wrk`), needed for this benchmark only, never by the tests.

Writes bench/results/wrk.json and the marked `wrk` section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import datasets, procs
from .load import OPS_COST_LIMIT, STUB, VARIANTS, first_with, ours_stack, ours_words, sixteen_options, uvicorn_stack
from .report import machine, markdown_table, note, splice, write_json

HERE = Path(__file__).resolve().parent
SERVERS = (*VARIANTS, "baseline")
UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def requests() -> dict[str, tuple[str, str, Any]]:
    """Each cell's method, path and JSON body: the load bench's own."""
    spec = datasets.load_json(datasets.SPEED21)
    return {"health": ("GET", "/health", None),
            "decide-2": ("POST", "/decide", first_with(2)),
            "decide-16": ("POST", "/decide", sixteen_options()),
            "shared-21": ("POST", "/decide/shared", datasets.shared_body(spec["state"], spec["decisions"]))}


def script(method: str, body: Any, token: str) -> str:
    """A wrk Lua script sending one fixed request (a long-bracket string needs no escaping)."""
    if body is None:
        return 'wrk.method = "GET"\n'
    text = json.dumps(body)
    assert "]==]" not in text
    return (f'wrk.method = "{method}"\nwrk.body = [==[{text}]==]\n'
            'wrk.headers["Content-Type"] = "application/json"\n'
            f'wrk.headers["Authorization"] = "Bearer {token}"\n')


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(number) * UNITS[unit]


def parse(output: str) -> dict[str, Any]:
    """Requests/sec, p50/p99 and every failure wrk reports."""
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    latency = {q: _ms(v) for q, v in re.findall(r"^\s+(50|99)%\s+(\S+)$", output, re.M)}
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    return {"rps": rps, "p50_ms": latency.get("50"), "p99_ms": latency.get("99"),
            "non_2xx": int(non2xx.group(1)) if non2xx else 0,
            "socket_errors": sum(map(int, errors.groups())) if errors else 0}


def run_wrk(url: str, lua: Path, conns: int, duration: float, threads: int) -> dict[str, Any]:
    argv = ["wrk", f"-t{min(threads, conns)}", f"-c{conns}", f"-d{duration:g}s", "--latency", "-s", str(lua), url]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr[-500:]}")
    return parse(done.stdout)


def measure(args: argparse.Namespace, token: str) -> dict[str, Any]:
    cells: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="semif-wrk-"))
        servers = {name: stack.enter_context(procs.semif_serve({**STUB, **env}, token)) for name, env in VARIANTS.items()}
        servers["baseline"] = stack.enter_context(procs.fastapi_baseline(STUB, token))
        for endpoint, (method, path, body) in requests().items():
            lua = Path(scratch) / f"{endpoint}.lua"
            lua.write_text(script(method, body, token))
            for conns in args.concurrency:
                key = f"{endpoint}@{conns}"
                note(f"wrk: {key}, {args.rounds} rounds x {args.duration:g} s on each server")
                cells[key] = {name: [] for name in SERVERS}
                for index in range(args.rounds):
                    for name in SERVERS if index % 2 == 0 else SERVERS[::-1]:
                        cells[key][name].append(run_wrk(servers[name].url + path, lua, conns, args.duration, args.threads))
    return {"cells": {key: summarise(rounds) for key, rounds in cells.items()}}


def summarise(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Mean rps per server over its rounds, the ratios of the means, and per-round ranges."""
    mean = {name: sum(r["rps"] for r in runs) / len(runs) for name, runs in rounds.items()}

    def ratio(top: str, bottom: str) -> dict[str, Any]:
        per_round = [a["rps"] / b["rps"] for a, b in zip(rounds[top], rounds[bottom]) if b["rps"]]
        return {"ratio": round(mean[top] / mean[bottom], 3), "range": [round(min(per_round), 3), round(max(per_round), 3)]}

    return {"rps": {name: round(value, 1) for name, value in mean.items()},
            "p50_ms": {name: sorted(r["p50_ms"] for r in runs)[len(runs) // 2] for name, runs in rounds.items()},
            "p99_ms": {name: max(r["p99_ms"] for r in runs) for name, runs in rounds.items()},
            "failures": {name: sum(r["non_2xx"] + r["socket_errors"] for r in runs) for name, runs in rounds.items()},
            "on_vs_baseline": ratio("ours", "baseline"), "off_vs_baseline": ratio("ours_off", "baseline"),
            "metrics_vs_off": ratio("ours_metrics", "ours_off"), "on_vs_off": ratio("ours", "ours_off")}


def markdown(result: dict[str, Any]) -> str:
    info, stack = result["machine"], result["uvicorn"]
    rows = []
    for key, c in result["cells"].items():
        endpoint, conns = key.split("@")
        fmt = lambda r: f"**{r['ratio']:.2f}x** ({r['range'][0]:.2f} - {r['range'][1]:.2f})"  # noqa: E731
        cost = lambda r: f"{r['ratio']:.3f} ({r['range'][0]:.2f} - {r['range'][1]:.2f})"  # noqa: E731
        rows.append((endpoint, conns, f"{c['rps']['ours']:.0f}", f"{c['rps']['ours_off']:.0f}", f"{c['rps']['baseline']:.0f}",
                     fmt(c["on_vs_baseline"]), fmt(c["off_vs_baseline"]), cost(c["metrics_vs_off"]), cost(c["on_vs_off"]),
                     f"{c['p50_ms']['ours']:.2f} / {c['p50_ms']['baseline']:.2f}",
                     " / ".join(str(c["failures"][n]) for n in SERVERS)))
    table = markdown_table(("endpoint", "conns", "ours rps (ops on)", "ours rps (ops off)", "baseline rps",
                            "on / baseline (per-round)", "off / baseline (per-round)", "metrics only / off (per-round)",
                            "metrics + log / off (per-round)", "p50 ms ours / base", "failures on / metrics / off / base"), rows)
    every = result["cells"]
    low_key, low = min(every.items(), key=lambda kv: kv[1]["on_vs_baseline"]["ratio"])
    ops_key, ops = min(every.items(), key=lambda kv: kv[1]["metrics_vs_off"]["ratio"])
    log_key, log = min(every.items(), key=lambda kv: kv[1]["on_vs_off"]["ratio"])
    verdicts = [
        f"ours (metrics + JSON access log on) >= baseline in every cell: "
        f"{'MET' if low['on_vs_baseline']['ratio'] >= 1.0 else 'MISSED'} (lowest {low['on_vs_baseline']['ratio']:.2f}x at {low_key})",
        f"metrics cost <= {OPS_COST_LIMIT:.0%}: {'MET' if ops['metrics_vs_off']['ratio'] >= 1 - OPS_COST_LIMIT else 'MISSED'} "
        f"(worst metrics-only/off {ops['metrics_vs_off']['ratio']:.3f} at {ops_key})",
        f"metrics + JSON access log together (no budget set; shown plainly): worst on/off {log['on_vs_off']['ratio']:.3f} at {log_key}",
    ]
    return "\n".join([
        "## Measured with wrk: ours vs FastAPI on uvicorn[standard]", "",
        f"`python -m bench wrk` on `{info['uname_m']}`, {info['nproc']} CPUs, load average "
        f"{' / '.join(map(str, info['loadavg']))} (1/5/15 min) when it began, on a shared machine under load; "
        f"thread settings {info['threads']}. wrk {result['wrk_version']} with {result['threads']} thread(s), "
        f"{result['rounds']} rounds x {result['duration_s']:g} s per server per cell, order reversed every round; "
        f"rps is the mean over rounds. Baseline: FastAPI {stack['fastapi']} on one uvicorn {stack['uvicorn']} worker, "
        f"loop `{stack['loop']}`, HTTP `{stack['http']}`. {ours_words(result.get('ours'))}"
        "All four score with the product's own stub.", "",
        table, "", *[f"- {v}" for v in verdicts], ""])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench wrk", description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=2.0, help="seconds per server per round (default 2)")
    p.add_argument("--rounds", type=int, default=3, help="rounds per cell, order reversed each (default 3)")
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32])
    p.add_argument("--threads", type=int, default=1, help="wrk threads (default 1: the other core is the server's)")
    p.add_argument("--out", type=Path, default=HERE / "results" / "wrk.json")
    p.add_argument("--md", type=Path, default=HERE / "RESULTS.md", help="its `wrk` section is replaced")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if shutil.which("wrk") is None:
        print("wrk is not installed: apt-get install -y wrk (Debian)", file=sys.stderr)
        return 2
    version = subprocess.run(["wrk", "-v"], capture_output=True, text=True, check=False)
    result = {"machine": machine(), "uvicorn": uvicorn_stack(), "ours": ours_stack(), "rounds": args.rounds, "duration_s": args.duration,
              "threads": args.threads, "wrk_version": (version.stdout + version.stderr).split()[1] if version.stdout + version.stderr else "?",
              **measure(args, procs.token())}
    result["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    write_json(args.out, result)
    text = markdown(result)
    old = args.md.read_text(encoding="utf-8") if args.md.exists() else ""
    args.md.write_text(splice(old, "wrk", text), encoding="utf-8")
    print(text)
    return 0
