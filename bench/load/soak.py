"""Soak: sustained overload on the stub, and proof nothing is lost, doubled or leaked.

Starts the server itself (stub scorer with a delay, loopback only) and keeps twice
SEMIF_MAX_QUEUE keep-alive clients busy for --seconds (or --max-requests, whichever
comes first): SEMIF_MAX_QUEUE are in progress at a time and the rest are refused 429
(which closes the connection, so that client reconnects). Every request carries its
own id: each must be answered exactly once, a 200 with its own id or a 429.

Reports requests sent and answered, statuses, the server's RSS (start, end, peak) and
open file descriptors (start, peak, end) from /proc. Exits 1 on a lost, duplicated
or mismatched answer, an unexpected status, a request still in progress at the end,
or file descriptors that do not return to their starting count (within --fd-slack).

    python -m bench soak --seconds 5
    python -m bench soak --out bench/results/soak.json
    python -m bench soak --seconds 20 --plot bench/evidence/soak/prometheus.png

With --plot, a real Prometheus (bench/common/prometheus.py: the shipped config and
rules) scrapes the server every --scrape-interval for the whole run, and what it saw,
queue saturation and refusals over time, is drawn into the PNG (bench/load/soak_plot.py),
so a soak can be looked at rather than read.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import datasets, procs, prometheus
from bench.common.loadgen import Connection, Response, Target, call, encode
from bench.common.report import Outcome, emit, note

RECOVERABLE = (TimeoutError, ConnectionError, asyncio.IncompleteReadError, ValueError)


@dataclass
class Ledger:
    """Every request id sent and every answer read, so loss and duplication are counted, not guessed."""

    sent: list[str] = field(default_factory=list)
    answers: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    mismatched: list[str] = field(default_factory=list)
    stray: int = 0
    connect_failures: int = 0
    ids: itertools.count = field(default_factory=itertools.count)

    def answer(self, rid: str, response: Response) -> None:
        self.answers[rid] += 1
        self.statuses[response.status] += 1
        if response.status == 200 and _echoed_id(response) != rid:
            self.mismatched.append(rid)

    @property
    def lost(self) -> list[str]:
        return [rid for rid in self.sent if self.answers[rid] == 0]

    @property
    def duplicated(self) -> list[str]:
        return [rid for rid, count in self.answers.items() if count > 1]


def _echoed_id(response: Response) -> Any:
    try:
        return response.json().get("id")
    except (ValueError, AttributeError):
        return None


@dataclass
class Process:
    """RSS and open file descriptors of one process, read from /proc."""

    pid: int

    def status(self, key: str) -> int:
        """A kB figure from /proc/<pid>/status (VmRSS, VmHWM)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise KeyError(key)

    def fds(self) -> int:
        return len(list(Path(f"/proc/{self.pid}/fd").iterdir()))


async def client(
    target: Target, row: dict[str, Any], ledger: Ledger, until: float, limit: int, timeout: float
) -> None:
    """One client: one request at a time, reconnecting whenever the server closes (after a 429)."""
    connection: Connection | None = None
    while time.monotonic() < until and len(ledger.sent) < limit:
        if connection is None or connection.closed:
            try:
                connection = await Connection.open(target)
            except RECOVERABLE:
                ledger.connect_failures += 1
                await asyncio.sleep(0.05)
                continue
        rid = f"soak-{next(ledger.ids)}"
        ledger.sent.append(rid)
        try:
            response = await connection.exchange(
                encode(target, "POST", "/decide", {**row, "id": rid}), timeout
            )
        except RECOVERABLE:
            await connection.close()
            continue
        ledger.answer(rid, response)
    if connection is not None:
        ledger.stray += bool(await connection.stray_bytes(0.2))
        await connection.close()


async def resting_fds(process: Process, samples: int = 10) -> int:
    """The server's fds at rest: the least of a few readings, once a closed warm-up connection is gone."""
    counts = []
    for _ in range(samples):
        counts.append(process.fds())
        await asyncio.sleep(0.05)
    return min(counts)


async def settle(process: Process, baseline: int, slack: int, wait: float) -> int:
    """Open fds once the server has closed the clients' connections (polled: there is no event to await)."""
    deadline = time.monotonic() + wait
    while (count := process.fds()) > baseline + slack and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return count


async def soak(target: Target, process: Process, args: argparse.Namespace) -> dict[str, Any]:
    """Drive the load and sample the server; the figures behind the verdict."""
    row = datasets.rows()[0]
    await call(target, "POST", "/decide", {**row, "id": "warm-up"})
    start = {"fds": await resting_fds(process), "rss_kib": process.status("VmRSS")}
    ledger, peak_fds = Ledger(), start["fds"]
    until = time.monotonic() + args.seconds
    clients = [
        asyncio.ensure_future(client(target, row, ledger, until, args.max_requests, args.timeout))
        for _ in range(2 * args.max_queue)
    ]
    while not all(task.done() for task in clients):
        peak_fds = max(peak_fds, process.fds())
        await asyncio.wait(clients, timeout=0.5)
    await asyncio.gather(*clients)
    health = (await call(target, "GET", "/health")).json()
    end_fds = await settle(process, start["fds"], args.fd_slack, wait=5.0)
    return {
        "seconds": args.seconds,
        "max_queue": args.max_queue,
        "delay_ms": args.delay_ms,
        "clients": 2 * args.max_queue,
        "sent": len(ledger.sent),
        "answered": sum(ledger.answers.values()),
        "statuses": {str(k): v for k, v in sorted(ledger.statuses.items())},
        "lost": len(ledger.lost),
        "duplicated": len(ledger.duplicated) + ledger.stray,
        "mismatched": len(ledger.mismatched),
        "connect_failures": ledger.connect_failures,
        "in_progress_at_end": health["in_progress"],
        "rss_kib": {
            "start": start["rss_kib"],
            "end": process.status("VmRSS"),
            "peak": process.status("VmHWM"),
        },
        "fds": {"start": start["fds"], "peak": peak_fds, "end": end_fds},
        "examples": {
            "lost": ledger.lost[:5],
            "duplicated": ledger.duplicated[:5],
            "mismatched": ledger.mismatched[:5],
        },
    }


def verdict(figures: dict[str, Any], fd_slack: int) -> Outcome:
    """Pass when every request was answered once, only 200/429, nothing left in progress, no fd growth."""
    problems = [
        f"{figures[name]} {name}"
        for name in ("lost", "duplicated", "mismatched", "connect_failures")
        if figures[name]
    ]
    if set(figures["statuses"]) - {"200", "429"}:
        problems.append(f"unexpected statuses {figures['statuses']}")
    if figures["in_progress_at_end"]:
        problems.append(f"{figures['in_progress_at_end']} still in progress")
    growth = figures["fds"]["end"] - figures["fds"]["start"]
    if growth > fd_slack:
        problems.append(f"{growth} more open fds than at the start")
    rss = figures["rss_kib"]
    table = [
        ("requests sent / answered", f"{figures['sent']} / {figures['answered']}"),
        ("statuses", ", ".join(f"{k}: {v}" for k, v in figures["statuses"].items())),
        (
            "lost / duplicated / mismatched",
            f"{figures['lost']} / {figures['duplicated']} / {figures['mismatched']}",
        ),
        ("server RSS start / end / peak (KiB)", f"{rss['start']} / {rss['end']} / {rss['peak']}"),
        (
            "server fds start / peak / end",
            f"{figures['fds']['start']} / {figures['fds']['peak']} / {figures['fds']['end']}",
        ),
    ]
    criterion = (
        f"every request answered exactly once (200 with its id, or 429); fd growth <= {fd_slack}"
    )
    text = (
        "; ".join(problems)
        if problems
        else f"{figures['sent']} requests, each answered exactly once; fds back to start"
    )
    return Outcome("soak", not problems, text, criterion, figures, table)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench soak", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--seconds", type=float, default=60.0, help="how long to offer load (default 60)"
    )
    parser.add_argument(
        "--max-requests",
        type=int,
        default=500_000,
        help="stop after this many requests (default 500000)",
    )
    parser.add_argument(
        "--max-queue",
        type=int,
        default=8,
        help="SEMIF_MAX_QUEUE for the server; 2x this many clients (default 8)",
    )
    parser.add_argument("--delay-ms", type=int, default=20, help="SEMIF_STUB_DELAY_MS (default 20)")
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds one request may take (default 30)"
    )
    parser.add_argument(
        "--fd-slack", type=int, default=4, help="fd growth tolerated as noise (default 4)"
    )
    parser.add_argument("--out", type=Path, help="write the outcome as JSON")
    parser.add_argument(
        "--plot", type=Path, help="write what a real Prometheus saw (saturation, refusals) as a PNG"
    )
    parser.add_argument(
        "--scrape-interval",
        type=float,
        default=0.5,
        help="Prometheus' scrape interval with --plot, s (default 0.5)",
    )
    return parser


@contextlib.contextmanager
def watched(
    server: procs.Running, args: argparse.Namespace
) -> Iterator[Callable[[], dict[str, Any]] | None]:
    """With --plot: Prometheus scraping the server for the whole run; yields what draws its view afterwards."""
    if args.plot is None:
        yield None
        return
    from bench.load import soak_plot  # matplotlib only when a plot is asked for

    interval = args.scrape_interval
    with prometheus.running(
        [f"{procs.HOST}:{server.target.port}"], interval=f"{round(interval * 1000)}ms"
    ) as prom:
        prom.wait_scraped(1)
        began = time.time()

        def plot() -> dict[str, Any]:
            time.sleep(4 * interval)  # the last samples, and a few of the server at rest
            seen = soak_plot.seen(prom, began, time.time(), interval)
            title = (
                f"soak: {2 * args.max_queue} clients, SEMIF_MAX_QUEUE={args.max_queue}, "
                f"{args.delay_ms} ms per call, {args.seconds:g} s (Prometheus every {interval:g} s)"
            )
            return {
                "plot": str(soak_plot.draw(seen, args.plot, title)),
                "peaks": soak_plot.peaks(seen),
            }

        yield plot


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    env = {
        **procs.stub_env(args.delay_ms, args.max_queue),
        **({"SEMIF_METRICS": "on"} if args.plot else {}),
    }
    with procs.semif_serve(env, procs.token()) as server, watched(server, args) as plot:
        note(f"soak: {2 * args.max_queue} clients against {server.url} for {args.seconds:g} s")
        figures = asyncio.run(soak(server.target, Process(server.process.pid), args))
        if plot is not None:
            figures["prometheus"] = plot()
            note(
                f"soak: what Prometheus saw is drawn in {figures['prometheus']['plot']}: {figures['prometheus']['peaks']}"
            )
    return emit(verdict(figures, args.fd_slack), args.out)
