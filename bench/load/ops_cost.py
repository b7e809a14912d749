"""`python -m bench ops-cost`: CPU per request of the ops layer alone, in process, no HTTP.

What the wire calls for every request (`Operations.begin`, `headers`, `finish`) and
the engine for every scorer call (`scorer_call`), timed with `time.process_time`
for metrics and the JSON access log on and off, the least of 5 batches. It isolates
the cost the load benchmarks can only see through the noise of a shared machine;
the access log goes to a temporary file, as a server's stderr would.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import h11

from bench.common.report import machine, splice
from semif_serve.config import Settings
from semif_serve.engine.recent import RecentCalls
from semif_serve.engine.stub import StubScorer
from semif_serve.engine.worker import CallTiming, Engine
from semif_serve.http.exchange import Reply
from semif_serve.ops.logs import configure
from semif_serve.ops.operations import Operations
from semif_serve.service.head_policy import ROUTES, Service

REQUEST = h11.Request(
    method="POST",
    target="/decide",
    headers=[
        (b"host", b"x"),
        (b"authorization", b"Bearer " + b"t" * 40),
        (b"content-length", b"300"),
    ],
)


def cost(metrics: bool, access_log: bool, repeats: int, batches: int = 5) -> float:
    """Microseconds of CPU per request for one configuration."""
    settings = Settings(api_token="t" * 40, scorer="stub", metrics=metrics, access_log=access_log)
    service = Service(settings, Engine(StubScorer(settings)))
    ops = Operations(
        settings,
        ROUTES,
        lambda: service.admission.in_progress,
        service.engine.health,
        lambda: 1,
        lambda: 0.0,
        recent=RecentCalls(),
        dispatcher=service.engine.dispatcher,
    )
    reply = Reply(200, b"x" * 600, timing=CallTiming("direct", 1, 0.0, 0.0001, 0.0002))
    best = float("inf")
    for _ in range(batches):
        started = time.process_time()
        for _ in range(repeats):
            exchange = ops.begin(REQUEST)
            ops.headers(exchange, reply)
            ops.scorer_call(reply.timing)
            ops.finish(exchange, reply, "127.0.0.1:5555", 200, 800)
        best = min(best, (time.process_time() - started) / repeats)
    return best * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench ops-cost", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--repeats", type=int, default=20000)
    parser.add_argument(
        "--md",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "RESULTS.md",
        help="its `ops-cost` section is replaced",
    )
    args = parser.parse_args(argv)
    info = machine()
    lines = []
    with tempfile.TemporaryFile("w") as sink:
        configure("json")  # unbuffered: each access line written and flushed on its own
        logging.getLogger().handlers[0].setStream(sink)  # type: ignore[attr-defined]
        for metrics, access_log in ((False, False), (True, False), (False, True), (True, True)):
            lines.append(
                f"- metrics {'on' if metrics else 'off'}, access log {'on' if access_log else 'off'}: "
                f"{cost(metrics, access_log, args.repeats):.1f} us CPU per request"
            )
        # As served by default: access lines buffered (SEMIF_LOG_FLUSH_S > 0), written per 64 KiB here.
        configure("json", 0.5)
        logging.getLogger().handlers[0].setStream(sink)  # type: ignore[attr-defined]
        lines.append(
            f"- metrics on, access log on and buffered (the default SEMIF_LOG_FLUSH_S=0.5): "
            f"{cost(True, True, args.repeats):.1f} us CPU per request"
        )
    text = "\n".join(
        [
            "## The ops layer alone (in process)",
            "",
            f"`python -m bench ops-cost`: request id, headers, metrics and the JSON access line for one request "
            f"and one scorer call, no HTTP; least of 5 batches of {args.repeats}. {info['nproc']} CPUs, load average "
            f"{' / '.join(map(str, info['loadavg']))} (shared machine), thread settings {info['threads']}.",
            "",
            *lines,
            "",
        ]
    )
    print(text)
    if args.md.exists():
        args.md.write_text(
            splice(args.md.read_text(encoding="utf-8"), "ops-cost", text), encoding="utf-8"
        )
    return 0
