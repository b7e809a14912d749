"""`python -m bench openloop --two-callers`: a bulk caller far over capacity beside an interactive one,
without and with a share of the queue per caller (SEMIF_MAX_QUEUE_PER_CALLER); with `--baseline
CHECKOUT`, each of those on that checkout's code first and on this one's next (before and after).

Rules: bench-only. One server at a time, a fresh one per run, named callers from a tokens file. Every
run offers the very same arrivals: the bulk caller at `--bulk` x the 1-question shape's capacity
(measured once, on the first server), the interactive caller at INTERACTIVE_X x, each request on its
own connection; the first run leaves the share at its default (SEMIF_MAX_QUEUE), the second sets it to
`--share`. What is compared is the interactive caller's goodput, p50, p99 and 429 share, and the
run's total goodput, side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import secrets
import tempfile
from pathlib import Path
from typing import Any

from bench.common import procs
from bench.common.loadgen import (
    OpenLoopRun,
    Target,
    encode,
    open_loop,
    percentile,
    poisson_arrivals,
)
from bench.common.report import markdown_table, note
from bench.load.servers import ALIAS, Live, Servers, measure_capacity, systemone_body

INTERACTIVE_X = 0.3
CALLERS = ("bulk", "interactive")
CODES = ("before", "after")  # the baseline checkout's code, this one's


def _tokens(directory: Path) -> tuple[str, dict[str, str]]:
    """A tokens file of the two callers (mode 0600), and their tokens."""
    tokens = {name: secrets.token_urlsafe(32) for name in CALLERS}
    path = directory / "tokens"
    path.write_text("".join(f"{name} {token}\n" for name, token in tokens.items()))
    path.chmod(0o600)
    return str(path), tokens


def _figures(run: OpenLoopRun) -> dict[str, Any]:
    """One caller's window: goodput (200s answered within it), the 200s' p50 and p99, its 429 share."""
    ok = [f for f in run.fates if f.status == 200]
    window = max(run.duration, 1e-9)
    return {
        "offered": run.offered,
        "ok": len(ok),
        "goodput_per_s": sum(1 for f in ok if f.done <= run.duration) / window,
        "p50_s": percentile([f.latency for f in ok], 50) if ok else math.nan,
        "p99_s": percentile([f.latency for f in ok], 99) if ok else math.nan,
        "refused_share": sum(1 for f in run.fates if f.status == 429) / run.offered
        if run.offered
        else 0.0,
        "timeouts_errors": sum(1 for f in run.fates if f.status is None),
        "lag_p99_s": percentile([f.lag for f in run.fates], 99) if run.fates else 0.0,
    }


async def _both(
    targets: dict[str, Target], body: dict[str, Any], arrivals: dict[str, list[float]], args: Any
) -> dict[str, OpenLoopRun]:
    runs = await asyncio.gather(
        *(
            open_loop(
                targets[name],
                encode(targets[name], "POST", "/v1/systemone", body),
                arrivals[name],
                args.duration,
                args.timeout,
            )
            for name in CALLERS
        )
    )
    return dict(zip(CALLERS, runs, strict=True))


def run(servers: Servers, args: argparse.Namespace) -> dict[str, Any]:
    """Capacity on a fresh server, then the two runs (share unset, share set), each on a fresh server;
    with a baseline, each run on the baseline's code, then on this checkout's."""
    body = systemone_body(1, ALIAS)
    result: dict[str, Any] = {"share": args.share, "queue": args.queue, "bulk_x": args.bulk}
    codes = [(CODES[0], args.baseline.resolve())] if args.baseline is not None else []
    codes.append((CODES[1], procs.ROOT))
    if args.baseline is not None:
        result["baseline"] = str(args.baseline)
    with tempfile.TemporaryDirectory(prefix="semif-two-callers-") as directory:
        path, tokens = _tokens(Path(directory))
        env = servers.ours_env(None) | {"SEMIF_API_TOKENS_FILE": path}
        for share, (code, checkout) in itertools.product((None, args.share), codes):
            shared = env | ({} if share is None else {"SEMIF_MAX_QUEUE_PER_CALLER": str(share)})
            with procs.semif_serve(
                shared, tokens["bulk"], ready_timeout=600.0, checkout=checkout
            ) as server:
                port = server.target.port
                targets = {name: Target(procs.HOST, port, tokens[name]) for name in CALLERS}
                if "capacity" not in result:
                    live = Live(targets["bulk"], "/health", ALIAS, None)
                    raw = encode(targets["bulk"], "POST", "/v1/systemone", body)
                    result["capacity"] = measure_capacity(live, raw, args.capacity_s, args.timeout)
                    capacity = result["capacity"]["requests_per_s"]
                    rates = {"bulk": args.bulk * capacity, "interactive": INTERACTIVE_X * capacity}
                    arrivals = {
                        name: poisson_arrivals(rate, args.duration, f"{args.seed}/two/{name}")
                        for name, rate in rates.items()
                    }
                    result["rates_per_s"] = rates
                runs = asyncio.run(_both(targets, body, arrivals, args))
            key = "without_share" if share is None else "with_share"
            result.setdefault(code, {})[key] = {name: _figures(runs[name]) for name in CALLERS}
            note(f"openloop: two callers, {code}, {key}: {result[code][key]}")
    return result


def markdown(two: dict[str, Any]) -> list[str]:
    """The two runs side by side, each caller a row."""

    def ms(seconds: float) -> str:
        return "-" if math.isnan(seconds) else f"{seconds * 1e3:.0f}"

    codes = [code for code in CODES if code in two]
    rows = [
        (
            *([code] if len(codes) > 1 else []),
            f"{'unset (= SEMIF_MAX_QUEUE)' if key == 'without_share' else two['share']}",
            name,
            f"{two['rates_per_s'][name]:.2f}",
            c["offered"],
            f"{c['goodput_per_s']:.2f}",
            f"{ms(c['p50_s'])} / {ms(c['p99_s'])}",
            f"{c['refused_share']:.0%}",
            c["timeouts_errors"],
            f"{c['lag_p99_s'] * 1e3:.1f}",
            f"{sum(each['goodput_per_s'] for each in two[code][key].values()):.2f}",
        )
        for key in ("without_share", "with_share")
        for code in codes
        for name in CALLERS
        for c in [two[code][key][name]]
    ]
    cap = two["capacity"]
    before = (
        f" Each run on `{two['baseline']}`'s code (`before`) and on this checkout's (`after`)."
        if len(codes) > 1
        else ""
    )
    return [
        "",
        "### Two callers: a bulk caller beside an interactive one",
        "",
        f"One server per run, named callers from a tokens file, SEMIF_MAX_QUEUE={two['queue']}; the same "
        f"arrivals in both runs: `bulk` at {two['bulk_x']:g}x capacity, `interactive` at "
        f"{INTERACTIVE_X:g}x (capacity {cap['requests_per_s']:.2f} requests/s, 1-question, one at a "
        f"time, call p50 {cap['call_p50_s'] * 1e3:.0f} ms). First run: SEMIF_MAX_QUEUE_PER_CALLER "
        f"unset; second: {two['share']}.{before}",
        "",
        markdown_table(
            (
                *(["code"] if len(codes) > 1 else []),
                "SEMIF_MAX_QUEUE_PER_CALLER",
                "caller",
                "offered /s",
                "sent",
                "goodput /s",
                "ok p50 / p99 ms",
                "429",
                "timeouts+errors",
                "loadgen lag p99 ms",
                "run's total goodput /s",
            ),
            rows,
        ),
    ]
