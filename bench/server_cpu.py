"""`python -m bench.server_cpu`: server CPU per request under wrk, configurations alternated.

Rules: bench-only; measures one thing, the server process's own CPU (utime + stime from
/proc/PID/stat) per request answered, so a slower or faster load generator does not move it
the way it moves requests per second. Each configuration is a checkout (ROOT, served with
PYTHONPATH=ROOT, so an older commit can run beside the current one) and an access-log
setting; every run starts a fresh server with the stub scorer, metrics on and the JSON log,
stderr to /dev/null, warms it with 1 s of wrk, then reads the CPU around `wrk -t1 -c8
-d{seconds}s` on one of `python -m bench wrk`'s requests (`--request`, /health by default).
Configurations alternate in each round (reversed every other round), since
the machine is shared and its load drifts. Prints one JSON line per run, then the median
per configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from .procs import free_port
from .wrk import requests as wrk_requests, script

TOKEN = "t0ken-0123456789abcdef0123456789abcdef"


def _ticks(pid: int) -> int:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _wrk(url: str, lua: str, seconds: float) -> tuple[int, float, int]:
    """Requests answered, requests/s and non-2xx responses of one wrk run."""
    out = subprocess.run(["wrk", "-t1", "-c8", f"-d{seconds:g}s", "-s", lua, url], capture_output=True, text=True,
                         timeout=seconds + 30, check=True).stdout
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return (int(re.search(r"(\d+) requests in", out).group(1)),  # type: ignore[union-attr]
            float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
            int(bad.group(1)) if bad else 0)


def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the server did not start") from None
            time.sleep(0.2)


def run(label: str, root: str, access_log: str, seconds: float, request: str, lua: str) -> dict[str, Any]:
    """One fresh server, one measured wrk run."""
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("SEMIF_")}
    env.update(PYTHONPATH=root, SEMIF_SCORER="stub", SEMIF_STUB_DELAY_MS="0", SEMIF_MAX_QUEUE="64",
               SEMIF_METRICS="on", SEMIF_ACCESS_LOG=access_log, SEMIF_LOG_FORMAT="json", SEMIF_API_TOKEN=TOKEN,
               SEMIF_HOST="127.0.0.1", SEMIF_PORT=str(port))
    process = subprocess.Popen([sys.executable, "-m", "semif_serve"], env=env, cwd=root,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port, process)
        url = f"http://127.0.0.1:{port}{wrk_requests()[request][1]}"
        _wrk(url, lua, 1)
        before = _ticks(process.pid)
        requests, rps, bad = _wrk(url, lua, seconds)
        cpu = (_ticks(process.pid) - before) / os.sysconf("SC_CLK_TCK")
        return {"config": label, "access_log": access_log, "request": request, "requests": requests, "rps": round(rps), "non_2xx": bad,
                "cpu_us_per_request": round(cpu / requests * 1e6, 1), "loadavg_1m": round(os.getloadavg()[0], 2)}
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.server_cpu", description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+", metavar="LABEL=ROOT:on|off",
                        help="a checkout to serve from and its SEMIF_ACCESS_LOG, e.g. after=.:on")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--request", choices=sorted(wrk_requests()), default="health",
                        help="which of `python -m bench wrk`'s requests to send")
    args = parser.parse_args(argv)
    method, _, body = wrk_requests()[args.request]
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:
        lua.write(script(method, body, TOKEN))
    configs = []
    for text in args.configs:
        label, rest = text.split("=", 1)
        root, access_log = rest.rsplit(":", 1)
        configs.append((label, os.path.abspath(root), access_log))
    runs = []
    for index in range(args.rounds):
        for label, root, access_log in configs if index % 2 == 0 else configs[::-1]:
            runs.append(run(label, root, access_log, args.seconds, args.request, lua.name))
            print(json.dumps(runs[-1]), flush=True)
    for label, _, access_log in configs:
        values = [item["cpu_us_per_request"] for item in runs if (item["config"], item["access_log"]) == (label, access_log)]
        print(f"{label} access log {access_log}: median {statistics.median(values):.1f} us CPU per request {values}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
