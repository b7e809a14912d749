"""`python -m bench openloop`: open-loop Poisson load, one server after another, as a fleet offers it.

Rules: bench-only. Every request leaves at its scheduled time whatever the completions
(loadgen.open_loop), on its own connection, and is abandoned at `--timeout`; every
server of a shape is offered the very same arrivals (the seed, the shape and the rate
seed them). One server runs at a time, a fresh process for each rate (a backlog one
rate leaves, such as a peer still scoring requests its callers abandoned, never loads
the next), so one server alone has both cores; `url` is the exception, one server
shared by every cell, so each of its cells waits until its `in_progress` is 0, and the
report says so. At each rate the servers run one after another (rate by rate, not
server by server), so a drift in a shared machine's load falls on them alike. The load
generator checks itself: its own CPU share and how late its sends left against the
schedule; the verdict says whether it could have been the bottleneck. Figures are
reported as measured.

Theory: a *cell* is one server at one offered rate on one request shape. A shape
is a System One request of 1 question or of 21 (bench/data/speed21.json). Rates are
absolute (`2.5`) or multiples of the capacity (`1.5x`), measured once per shape on
the first server listed for it: one connection, one request at a time, requests
answered per second over at least 5 calls after a first, cold one that is discarded.
Servers (`--cell SHAPE/SERVERS/RATES`):

* `semif`: semif-serve as configured (SEMIF_MAX_WAIT_S unset, SEMIF_MAX_QUEUE 32);
* `semif-wait`: the same with SEMIF_MAX_WAIT_S=`--budget` (admission by a wait budget);
* `peer`: fastjev's own System One server (bench/load/peer_fastjev.py), same snapshot, CPU;
* `url`: a server already running at `--url` (its CPU and peak RSS with `--pid`); `--url`
  without `--cell` runs the default shapes and rates on it alone.

`semif` and `semif-wait` serve SmolLM2-135M-Instruct (`semif-serve small-model`), or the
stub with `--scorer stub` (what the test suite runs). Per cell: goodput, p50/p90/p99 of
the successes, the refused share and how fast refusals came back, timeouts, health
probes (a fresh connection every `--probe-every` s, failed past `--probe-timeout`),
whether every 200's answers equal the server's idle answer, and the server's CPU
(cores) and peak RSS. `--plot` draws p99 and goodput against offered load, one line per
server; `--md` splices the report into RESULTS.md's `openloop` section. SIGINT or SIGTERM
stops the run: every server it started is stopped, and what was measured is written.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import procs
from bench.common.loadgen import (
    Fate,
    OpenLoopRun,
    call,
    call_raw,
    encode,
    open_loop,
    percentile,
    poisson_arrivals,
    probe_health,
)
from bench.common.report import machine, markdown_table, note, splice, write_json
from bench.load import two_callers
from bench.load.servers import ALIAS, Live, Servers, measure_capacity, systemone_body

HERE = Path(__file__).resolve().parents[1]  # bench/
SERVERS = ("semif", "semif-wait", "peer", "url")
DEFAULT_CELLS = ("1/semif,semif-wait,peer/0.5x,0.9x,1.5x,2.5x,4x", "21/semif,semif-wait/1.5x,4x")
# The load generator could have been the bottleneck past either of these.
LOADGEN_CPU_MAX = 0.5  # share of one core over the window
LOADGEN_LAG_P99_MAX_S = 0.05  # sends behind schedule, p99
DRAIN_LIMIT_S = 600.0  # a shared server whose backlog lasts longer is reported as never drained
DRAIN_POLL_S = 0.5


# -- what comes back -----------------------------------------------------------------------------


def answers(body: bytes) -> Any:
    """The part of a System One response the scores live in, without its wall-clock `*_seconds` fields."""
    try:
        return timeless(json.loads(body).get("answers"))
    except (ValueError, AttributeError):
        return None


def timeless(value: Any) -> Any:
    """`value` without any `*_seconds` key at any depth (the only fields that vary by design)."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if not k.endswith("_seconds")}
    return [timeless(v) for v in value] if isinstance(value, list) else value


# -- what is run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One shape on some servers at some rates (absolute, or `Nx` of the shape's capacity)."""

    questions: int
    servers: tuple[str, ...]
    rates: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Cell:
        try:
            shape, servers, rates = text.split("/")
            cell = cls(
                int(shape),
                tuple(s for s in servers.split(",") if s),
                tuple(r for r in rates.split(",") if r),
            )
            for rate in cell.rates:
                if float(rate.removesuffix("x")) <= 0:
                    raise ValueError(rate)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"a cell is SHAPE/SERVERS/RATES, e.g. 1/semif,peer/0.5x,2, got {text!r}"
            ) from None
        unknown = set(cell.servers) - set(SERVERS)
        if unknown or not cell.servers or not cell.rates:
            raise argparse.ArgumentTypeError(f"servers are {', '.join(SERVERS)}; got {text!r}")
        return cell

    def offered(self, capacity: float) -> list[tuple[float, float | None]]:
        """(rate per second, multiple of capacity or None) for each rate."""
        out = []
        for rate in self.rates:
            if rate.endswith("x"):
                out.append((float(rate[:-1]) * capacity, float(rate[:-1])))
            else:
                out.append((float(rate), float(rate) / capacity if capacity else None))
        return out


# -- one cell ------------------------------------------------------------------------------------


async def _offer(
    live: Live, raw: bytes, arrivals: list[float], args: argparse.Namespace
) -> tuple[OpenLoopRun, list[Any]]:
    """The arrivals, with health probes beside them until the last answer is in."""
    stop = asyncio.Event()
    prober = asyncio.ensure_future(
        probe_health(live.target, live.health, stop, args.probe_every, args.probe_timeout)
    )
    try:
        run = await open_loop(live.target, raw, arrivals, args.duration, args.timeout)
    finally:
        stop.set()
    return run, await prober


def idle_answer(live: Live, raw: bytes, timeout: float) -> Any:
    """The server's answers with nothing else in flight (it also warms a fresh server)."""
    response = asyncio.run(call_raw(live.target, raw, timeout))
    if response.status != 200:
        raise RuntimeError(f"idle request answered {response.status}: {response.body[:300]!r}")
    return answers(response.body)


def drain(live: Live) -> float | None:
    """Seconds until a shared server's health reports `in_progress` 0, so one cell's backlog never
    loads the next; None when its health reports no `in_progress` (RuntimeError past DRAIN_LIMIT_S)."""
    started = time.monotonic()
    while True:
        body = asyncio.run(call(live.target, "GET", live.health, timeout=10.0)).body
        try:
            in_progress = json.loads(body)["in_progress"]
        except (ValueError, KeyError, TypeError):
            return None
        waited = time.monotonic() - started
        if in_progress == 0:
            return waited
        if waited > DRAIN_LIMIT_S:
            raise RuntimeError(
                f"openloop: {live.target.url} still has {in_progress} in progress after {waited:.0f} s"
            )
        time.sleep(DRAIN_POLL_S)


def run_cell(
    servers: Servers,
    name: str,
    questions: int,
    rate: float,
    multiple: float | None,
    budget_s: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One server, fresh, at one rate: idle answer, the arrivals, then its figures."""
    arrivals = poisson_arrivals(rate, args.duration, f"{args.seed}/{questions}/{rate:.6f}")
    with servers.start(name, budget_s) as live:
        drained = drain(live) if name == "url" else None
        raw = encode(live.target, "POST", "/v1/systemone", systemone_body(questions, live.model))
        reference = idle_answer(live, raw, args.timeout)
        cpu_before = procs.cpu_seconds(live.pid) if live.pid else math.nan
        load_before = os.getloadavg()[0]
        run, probes = asyncio.run(_offer(live, raw, arrivals, args))
        cpu = (procs.cpu_seconds(live.pid) - cpu_before) if live.pid else math.nan
        rss = procs.peak_rss_bytes(live.pid) if live.pid else math.nan
        budget_metrics = wait_metrics(live) if name == "semif-wait" else None
    figures = cell_figures(run, probes, reference, questions) | {
        "wait_budget_metrics": budget_metrics
    }
    figures |= {
        "server": name,
        "questions": questions,
        "rate_per_s": rate,
        "multiple": multiple,
        "server_cpu_cores": cpu / run.wall if run.wall else math.nan,
        "server_peak_rss_mib": rss / 2**20,
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "shared": name == "url",
        "drained_s": drained,
    }
    note(f"openloop: {name} {questions}q at {rate:.2f}/s: {one_line(figures)}")
    return figures


def wait_metrics(live: Live) -> dict[str, Any]:
    """The budget's own account from /metrics: busy refusals by reason, and the estimate's error (from its
    buckets: prometheus_client writes no `_sum` for a histogram with negative buckets)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = asyncio.run(
        call_raw(live.target, encode(live.target, "GET", "/metrics"), 10.0)
    ).body.decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    count = samples.get(("semif_wait_estimate_error_seconds_count", ()), 0.0)

    def bucket(le):
        return samples.get(("semif_wait_estimate_error_seconds_bucket", (("le", le),)), 0.0)

    return {
        "busy_refusals": {
            reason: samples.get(("semif_busy_refusals_total", (("reason", reason),)), 0.0)
            for reason in ("queue", "wait")
        },
        "estimate_error_n": count,
        "estimate_error_within_half_s_share": (bucket("0.5") - bucket("-0.5")) / count
        if count
        else None,
        "estimate_error_within_1s_share": (bucket("1.0") - bucket("-1.0")) / count
        if count
        else None,
        "estimate_low_share": (count - bucket("0.0")) / count if count else None,
    }


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    return {f"p{q}_s": percentile(values, q) for q in (50, 90, 99)}


def cell_figures(
    run: OpenLoopRun, probes: Sequence[Any], reference: Any, questions: int
) -> dict[str, Any]:
    """What one window offered and got back, and whether the load generator kept its schedule."""
    fates: list[Fate] = run.fates
    ok = [f for f in fates if f.status == 200]
    in_window = [
        f for f in ok if f.done <= run.duration
    ]  # goodput: answered within the window, steady state
    refused = [f for f in fates if f.status == 429]
    window = max(run.duration, 1e-9)
    lags = [f.lag for f in fates]
    loadgen_cpu = run.client_cpu / run.wall if run.wall else 0.0
    lag_p99 = percentile(lags, 99) if lags else 0.0
    probe_latencies = [p.latency for p in probes]
    retry = [
        int(f.retry_after) for f in refused if f.retry_after is not None and f.retry_after.isdigit()
    ]
    return {
        "offered": run.offered,
        "window_s": run.duration,
        "ok": len(ok),
        "goodput_per_s": len(in_window) / window,
        "goodput_decisions_per_s": len(in_window) * questions / window,
        "latency_ok": _quantiles([f.latency for f in ok]),
        "refused": len(refused),
        "refused_share": len(refused) / run.offered if run.offered else 0.0,
        "refusal_latency": _quantiles([f.latency for f in refused]),
        "retry_after_s": {"min": min(retry), "max": max(retry)} if retry else None,
        "timeouts": sum(1 for f in fates if f.outcome == "timeout"),
        "errors": sum(1 for f in fates if f.outcome == "error"),
        "other_status": dict(
            sorted(
                (str(s), sum(1 for f in fates if f.status == s))
                for s in {f.status for f in fates if f.status not in (None, 200, 429)}
            )
        ),
        "answers_equal_idle": sum(1 for f in ok if answers(f.body) == reference),
        "health": {
            "probes": len(probes),
            "failed": sum(1 for p in probes if p.failed),
            **_quantiles(probe_latencies),
            "max_s": max(probe_latencies, default=math.nan),
        },
        "loadgen": {
            "cpu_share": loadgen_cpu,
            "lag_p50_s": percentile(lags, 50) if lags else 0.0,
            "lag_p99_s": lag_p99,
            "lag_max_s": max(lags, default=0.0),
            "kept_up": loadgen_cpu <= LOADGEN_CPU_MAX and lag_p99 <= LOADGEN_LAG_P99_MAX_S,
        },
    }


def one_line(c: dict[str, Any]) -> str:
    return (
        f"{c['ok']}/{c['offered']} ok, goodput {c['goodput_per_s']:.2f}/s, p99 {c['latency_ok']['p99_s']:.2f} s, "
        f"refused {c['refused_share']:.0%}, timeouts {c['timeouts']}, health p99 {c['health']['p99_s'] * 1e3:.0f} ms "
        f"({c['health']['failed']} failed), loadgen cpu {c['loadgen']['cpu_share']:.0%} lag p99 "
        f"{c['loadgen']['lag_p99_s'] * 1e3:.1f} ms"
    )


# -- the whole run -------------------------------------------------------------------------------


def run(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """Every cell, into `result` (and its JSON) as each ends, so an interrupted run keeps what it measured."""
    servers = Servers(args, procs.token())
    for cell in args.cell:
        first = cell.servers[0]
        with servers.start(first) as live:
            raw = encode(
                live.target, "POST", "/v1/systemone", systemone_body(cell.questions, live.model)
            )
            capacity = measure_capacity(live, raw, args.capacity_s, args.timeout)
        note(
            f"openloop: {cell.questions}q capacity on {first}: {capacity['requests_per_s']:.2f} requests/s"
        )
        budget_s = budget_seconds(args.budget, capacity["call_p50_s"])
        cells: list[dict[str, Any]] = []
        result["shapes"][str(cell.questions)] = {
            "capacity": capacity | {"measured_on": first},
            "budget_s": budget_s,
            "cells": cells,
        }
        for rate, multiple in cell.offered(capacity["requests_per_s"]):
            for (
                name
            ) in cell.servers:  # the servers side by side at each rate: the machine's load drifts
                cells.append(
                    run_cell(servers, name, cell.questions, rate, multiple, budget_s, args)
                )
                write_json(args.out, result)  # so far: a run cut short keeps what it measured
    if args.two_callers:
        result["two_callers"] = two_callers.run(servers, args)
        write_json(args.out, result)


def finish(result: dict[str, Any]) -> None:
    """What the report adds once the cells are over (all of them, or those before a signal)."""
    ran = {c["server"] for shape in result["shapes"].values() for c in shape["cells"]}
    if "peer" in ran:
        from bench.load.peer_fastjev import versions

        result["peer"] = versions()
    result["uptime_after"] = uptime()
    result["verdicts"] = verdicts(result)


def budget_seconds(budget: str, call_s: float) -> float:
    """SEMIF_MAX_WAIT_S for a shape: `N` seconds, or `Nc`, N calls of the shape at its idle call time (0.1 s steps)."""
    if budget.endswith("c"):
        return max(0.1, round(float(budget[:-1]) * call_s, 1))
    return float(budget)


def uptime() -> str:
    """`uptime`'s line: the load this shared machine carried."""
    with contextlib.suppress(OSError):
        load = open("/proc/loadavg").read().split()[:3]
        return f"{time.strftime('%H:%M:%S', time.gmtime())} UTC load average: {', '.join(load)}"
    return "unknown"


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "cells": [f"{c.questions}/{','.join(c.servers)}/{','.join(c.rates)}" for c in args.cell],
        "url": args.url,
        "duration_s": args.duration,
        "seed": args.seed,
        "timeout_s": args.timeout,
        "budget": args.budget,
        "queue": args.queue,
        "scorer": args.scorer,
        "threads": args.threads or "torch default",
        "probe_every_s": args.probe_every,
        "probe_timeout_s": args.probe_timeout,
        "two_callers": {"bulk_x": args.bulk, "share": args.share, "baseline": str(args.baseline)}
        if args.two_callers
        else None,
    }


def verdicts(result: dict[str, Any]) -> list[str]:
    """The load generator's own check, and the budget's promise: admitted p99 within budget + one call."""
    out = []
    cells = [c for shape in result["shapes"].values() for c in shape["cells"]]
    slow = [
        f"{c['server']} {c['questions']}q {c['rate_per_s']:.2f}/s"
        for c in cells
        if not c["loadgen"]["kept_up"]
    ]
    if cells:  # none when --two-callers ran alone: its table shows its own lag
        worst_cpu = max((c["loadgen"]["cpu_share"] for c in cells), default=0.0)
        worst_lag = max((c["loadgen"]["lag_p99_s"] for c in cells), default=0.0)
        out.append(
            f"loadgen: {'NOT the bottleneck' if not slow else 'MAY HAVE BEEN the bottleneck in ' + '; '.join(slow)} "
            f"(its CPU at most {worst_cpu:.0%} of one core, sends at most {worst_lag * 1e3:.1f} ms behind "
            f"schedule at p99; limits {LOADGEN_CPU_MAX:.0%}, {LOADGEN_LAG_P99_MAX_S * 1e3:.0f} ms)"
        )
    for questions, shape in result["shapes"].items():
        call, budget = shape["capacity"]["call_p50_s"], shape["budget_s"]
        by = {(c["server"], c["rate_per_s"]): c for c in shape["cells"]}
        for c in shape["cells"]:
            if c["server"] != "semif-wait":
                continue
            p99 = c["latency_ok"]["p99_s"]
            bound = budget + call
            held = not math.isnan(p99) and p99 <= bound
            today = by.get(("semif", c["rate_per_s"]))
            versus = (
                f", goodput {c['goodput_per_s']:.2f}/s against {today['goodput_per_s']:.2f}/s with the budget unset"
                if today
                else ""
            )
            out.append(
                f"budget {questions}q at {c['rate_per_s']:.2f}/s: admitted p99 {p99:.2f} s "
                f"{'within' if held else 'OVER'} budget + one call ({budget:g} + {call:.2f} s){versus}"
            )
    return out


# -- the report ------------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return "-" if seconds is None or math.isnan(seconds) else f"{seconds * 1e3:.0f}"


def _known(value: float, spec: str) -> str:
    return "-" if math.isnan(value) else format(value, spec)


def _drained(cell: dict[str, Any]) -> str:
    if not cell["shared"]:
        return "-"
    return "unknown: no in_progress" if cell["drained_s"] is None else f"{cell['drained_s']:.1f} s"


def table(shape: dict[str, Any], questions: str) -> str:
    rows = []
    for c in shape["cells"]:
        lat, ref, health = c["latency_ok"], c["refusal_latency"], c["health"]
        multiple = "-" if c["multiple"] is None else f"{c['multiple']:.2f}x"
        rows.append(
            (
                c["server"],
                f"{c['rate_per_s']:.2f} ({multiple})",
                c["offered"],
                f"{c['goodput_per_s']:.2f}"
                + (f" ({c['goodput_decisions_per_s']:.1f})" if questions != "1" else ""),
                f"{_ms(lat['p50_s'])} / {_ms(lat['p90_s'])} / {_ms(lat['p99_s'])}",
                f"{c['refused_share']:.0%}",
                f"{_ms(ref['p50_s'])} / {_ms(ref['p99_s'])}",
                c["timeouts"] + c["errors"],
                f"{c['answers_equal_idle']}/{c['ok']}",
                f"{_ms(health['p50_s'])} / {_ms(health['p99_s'])} / {_ms(health['max_s'])}",
                f"{health['failed']}/{health['probes']}",
                _known(c["server_cpu_cores"], ".2f"),  # NaN: `url` without --pid
                _known(c["server_peak_rss_mib"], ".0f"),
                f"{c['loadgen']['cpu_share']:.0%} / {c['loadgen']['lag_p99_s'] * 1e3:.1f}",
                " / ".join(f"{x:.1f}" for x in c["loadavg_1m"]),
                _drained(c),
            )
        )
    headers = (
        "server",
        "offered /s (x capacity)",
        "sent",
        "goodput /s" + (" (decisions/s)" if questions != "1" else ""),
        "ok p50 / p90 / p99 ms",
        "refused",
        "refusal p50 / p99 ms",
        "timeouts+errors",
        "answers = idle",
        "health p50 / p99 / max ms",
        "health failed",
        "server CPU (cores)",
        "peak RSS MiB",
        "loadgen CPU / lag p99 ms",
        "load 1m before / after",
        "drained (shared server)",
    )
    return markdown_table(headers, rows)


def budget_table(cells: list[dict[str, Any]]) -> str:
    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.0%}"

    rows = [
        (
            f"{c['rate_per_s']:.2f}",
            int(m["busy_refusals"]["queue"]),
            int(m["busy_refusals"]["wait"]),
            int(m["estimate_error_n"]),
            share(m["estimate_error_within_half_s_share"]),
            share(m["estimate_error_within_1s_share"]),
            share(m["estimate_low_share"]),
        )
        for c in cells
        for m in [c["wait_budget_metrics"]]
    ]
    return markdown_table(
        (
            "offered /s",
            "busy: queue",
            "busy: wait",
            "estimates checked",
            "within ±0.5 s",
            "within ±1 s",
            "estimate low (waited longer)",
        ),
        rows,
    )


def markdown(
    result: dict[str, Any], plot: Path | None, md_dir: Path | None, section: str = "openloop"
) -> str:
    info, s = result["machine"], result["settings"]
    named = "" if section == "openloop" else f" (`{section}`)"
    ran = {c["server"] for shape in result["shapes"].values() for c in shape["cells"]}
    ours = ran | ({"semif"} if "two_callers" in result else set())
    against = " and ".join(
        {"semif": "semif-serve", "peer": "the peer server", "url": f"the server at {s['url']}"}[k]
        for k in ("semif", "peer", "url")
        if k in ours or (k == "semif" and "semif-wait" in ran)
    )  # only what ran
    started = sorted(ran - {"url"})
    lines = [
        f"## Open loop{named}: Poisson arrivals against {against or 'no server'}",
        "",
        f"`python -m bench openloop` on `{info['uname_m']}`, {info['nproc']} CPUs, Python {info['python']}, "
        f"{info['date']}; `uptime` before: {result['uptime_before']}; after: {result['uptime_after']}. "
        + (
            f"**Stopped by {result['stopped']}**: only the cells below ran. "
            if result.get("stopped")
            else ""
        )
        + (f"Each cell of {', '.join(started)}: a fresh server. " if started else "")
        + (
            f"`url` ({s['url']}): one server shared by the capacity run and all its cells, not a fresh "
            "one; each of its cells started once its health reported `in_progress` 0, so the backlog of "
            "the cell before had drained (how long that took: `drained` below). "
            if "url" in ran
            else ""
        )
        + f"Each cell: {s['duration_s']:g} s of Poisson arrivals (seed {s['seed']}; the same "
        f"arrivals for every server of a shape), each request on its own connection, abandoned at "
        f"{s['timeout_s']:g} s"
        + (
            f"; health probed every {s['probe_every_s']:g} s on a fresh connection, failed past "
            f"{s['probe_timeout_s']:g} s."
            if result["shapes"]
            else "."
        )
        + (
            f" SEMIF_MAX_QUEUE={s['queue']}; `semif-wait`: SEMIF_MAX_WAIT_S={s['budget']} "
            "(`Nc`: N calls of the shape at its idle call time); "
            f"scorer {s['scorer']}, torch threads: {s['threads']}."
            if started
            else ""
        ),
    ]
    if "peer" in result:
        p = result["peer"]
        lines += [
            "",
            f"Peer: fastjev {p['fastjev']}'s own System One server (`fastjev.server.main`, its FastAPI app, "
            f"one uvicorn worker) with the model loaded on the CPU by bench/load/peer_fastjev.py; it ran on "
            f"FastAPI {p['fastapi']} and uvicorn {p['uvicorn']} from the bench environment (fastjev's `api` "
            f"extra pins {p['fastjev_api_extra_pins']}).",
        ]
    for questions, shape in result["shapes"].items():
        cap = shape["capacity"]
        lines += [
            "",
            f"### {questions}-question System One request",
            "",
            f"Capacity (one at a time, on {cap['measured_on']}): {cap['requests_per_s']:.2f} requests/s "
            f"(call p50 {cap['call_p50_s'] * 1e3:.0f} ms, n = {cap['n']} after a cold first call of "
            f"{cap['cold_call_s'] * 1e3:.0f} ms, left out)"
            + (
                f"; semif-wait's SEMIF_MAX_WAIT_S: {shape['budget_s']:g} s."
                if "semif-wait" in ran
                else "."
            ),
            "",
            table(shape, questions),
        ]
        accounts = [c for c in shape["cells"] if c.get("wait_budget_metrics")]
        if accounts:
            lines += [
                "",
                "semif-wait's own account (its /metrics after the window): 429 busy by reason, and its "
                "estimate against each admitted request's actual wait (admission to the end of its call).",
                "",
                budget_table(accounts),
            ]
    if "two_callers" in result:
        lines += two_callers.markdown(result["two_callers"])
    if plot is not None:
        where = os.path.relpath(plot, md_dir) if md_dir is not None else str(plot)
        lines += ["", f"![p99 and goodput against offered load]({where})"]
    if result["verdicts"]:
        lines += ["", "Verdicts:", "", *[f"- {v}" for v in result["verdicts"]]]
    return "\n".join(lines) + "\n"


def draw(result: dict[str, Any], path: Path) -> None:
    """p99 of successes and goodput against offered load, one line per server, one column per shape."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = result["shapes"]
    fig, axes = plt.subplots(2, len(shapes), figsize=(6 * len(shapes), 7), squeeze=False)
    for column, (questions, shape) in enumerate(shapes.items()):
        p99_ax, good_ax = axes[0][column], axes[1][column]
        for name in dict.fromkeys(c["server"] for c in shape["cells"]):
            style = {"marker": "o", "label": name, "color": f"C{SERVERS.index(name)}"}
            cells = sorted(
                (c for c in shape["cells"] if c["server"] == name), key=lambda c: c["rate_per_s"]
            )
            rates = [c["rate_per_s"] for c in cells]
            p99_ax.plot(rates, [c["latency_ok"]["p99_s"] for c in cells], **style)
            good_ax.plot(rates, [c["goodput_per_s"] for c in cells], **style)
        capacity = shape["capacity"]["requests_per_s"]
        if any(c["server"] == "semif-wait" for c in shape["cells"]):
            p99_ax.axhline(
                shape["budget_s"] + shape["capacity"]["call_p50_s"],
                color="grey",
                linestyle="--",
                linewidth=1,
                label="budget + one call",
            )
        good_ax.axhline(
            capacity, color="grey", linestyle=":", linewidth=1, label="capacity (one at a time)"
        )
        p99_ax.set(
            title=f"{questions}-question requests: p99 of successes", ylabel="seconds", yscale="log"
        )
        good_ax.set(
            title=f"{questions}-question requests: goodput",
            xlabel="offered load (requests/s)",
            ylabel="200 answers per second (within the window)",
        )
        good_ax.set_ylim(bottom=0)
        for ax in (p99_ax, good_ax):
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(
        f"Open-loop Poisson load ({result['machine']['date']}, {result['uptime_before']})",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- entry point -------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench openloop", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "--cell",
        type=Cell.parse,
        action="append",
        help="SHAPE/SERVERS/RATES, repeatable: SHAPE 1 or 21 questions; SERVERS of semif, semif-wait, peer, "
        "url; RATES per second, or Nx of the shape's capacity. Default: "
        + " and ".join(DEFAULT_CELLS)
        + "; with --url, the same shapes and rates on `url` alone",
    )
    p.add_argument(
        "--duration", type=float, default=40.0, help="seconds of arrivals per cell (default 40)"
    )
    p.add_argument("--seed", default="31", help="seeds the arrivals (default 31)")
    p.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="a caller abandons its request after this (default 30 s)",
    )
    p.add_argument(
        "--budget",
        type=_budget,
        default="3c",
        help="SEMIF_MAX_WAIT_S of semif-wait: seconds, or Nc: N calls of the shape at its idle call time "
        "(default 3c)",
    )
    p.add_argument(
        "--queue",
        type=int,
        default=32,
        help="SEMIF_MAX_QUEUE of ours (default 32, the server's own)",
    )
    p.add_argument(
        "--scorer",
        choices=("small", "stub"),
        default="small",
        help="ours serve SmolLM2 (small, default) or the stub (the test suite's short run)",
    )
    p.add_argument(
        "--stub-delay-ms", type=int, default=50, help="the stub's delay per call (default 50)"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="OMP_NUM_THREADS for every server (default 1: two threads contend on a shared 2-core machine; "
        "0: torch's own choice)",
    )
    p.add_argument(
        "--capacity-s",
        type=float,
        default=10.0,
        help="seconds of the capacity run per shape (default 10)",
    )
    p.add_argument(
        "--probe-every",
        type=float,
        default=0.25,
        help="seconds between health probes (default 0.25)",
    )
    p.add_argument(
        "--probe-timeout", type=float, default=2.0, help="a probe fails past this (default 2 s)"
    )
    p.add_argument(
        "--two-callers",
        action="store_true",
        help="also (alone, without --cell) run the two-caller cell: a bulk caller at --bulk x capacity "
        "beside an interactive one at 0.3x, without and with SEMIF_MAX_QUEUE_PER_CALLER=--share",
    )
    p.add_argument(
        "--bulk", type=float, default=3.0, help="the bulk caller's multiple of capacity (default 3)"
    )
    p.add_argument(
        "--share",
        type=int,
        default=8,
        help="SEMIF_MAX_QUEUE_PER_CALLER in the two-caller cell's second run (default 8)",
    )
    p.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of older code (e.g. a `git worktree` of main): the two-caller cell runs each "
        "setting on it first, then on this checkout, with the same arrivals (before and after)",
    )
    p.add_argument(
        "--url",
        help="server `url`: one already running, http://127.0.0.1:PORT (loopback unless --remote)",
    )
    p.add_argument(
        "--remote",
        action="store_true",
        help="let --url name another host (a replica in the fleet); --pid is for a local server only",
    )
    p.add_argument("--pid", type=int, help="server `url`'s process, for its CPU and peak RSS")
    p.add_argument(
        "--health", default="/health", help="server `url`'s health path (default /health)"
    )
    p.add_argument(
        "--model-name",
        default=ALIAS,
        help=f"server `url`'s model name in the body (default {ALIAS})",
    )
    p.add_argument(
        "--out", type=Path, default=HERE / "results" / "openloop.json", help="the JSON results"
    )
    p.add_argument("--plot", type=Path, help="draw the plot here (PNG)")
    p.add_argument("--md", type=Path, help="splice the report into this markdown file's --section")
    p.add_argument(
        "--section", default="openloop", help="the marked section --md rewrites (default openloop)"
    )
    return p


def _budget(text: str) -> str:
    try:
        if float(text.removesuffix("c")) > 0:
            return text
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(
        f"a budget is seconds (2.5) or calls (3c), above 0; got {text!r}"
    )


class Stopped(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived: stop now, stop every server started, keep what was measured.

    A KeyboardInterrupt, so procs stops its servers without waiting for a drain."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)


def _stop_on(signum: int, _frame: object) -> None:
    """Both signals, handled explicitly: a background job of a script starts with SIGINT ignored,
    and SIGTERM's default would leave the servers behind. Once only: the cleanup runs uncut."""
    for each in (signal.SIGINT, signal.SIGTERM):
        signal.signal(each, signal.SIG_IGN)
    raise Stopped(signum)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.cell is None and args.two_callers:
        args.cell = []  # the two-caller cell alone
    if args.cell is None:
        args.cell = [Cell.parse(text) for text in DEFAULT_CELLS]
        if args.url:  # the server named, in the place of those the defaults would start
            args.cell = [Cell(c.questions, ("url",), c.rates) for c in args.cell]
    if any("url" in c.servers for c in args.cell) and not args.url:
        parser().error("server `url` needs --url")
    result: dict[str, Any] = {
        "machine": machine(),
        "uptime_before": uptime(),
        "settings": settings_of(args),
        "shapes": {},
    }
    previous = {each: signal.signal(each, _stop_on) for each in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            run(args, result)
        except Stopped as stopped:
            result["stopped"] = str(stopped)
            strays = procs.stop_children()  # a server whose start the signal cut short
            note(
                f"openloop: stopped by {stopped}; every server it started is stopped"
                + (
                    f" (killed, its start cut short: pid {', '.join(map(str, strays))})"
                    if strays
                    else ""
                )
            )
        finish(result)
        write_json(args.out, result)
        if args.plot is not None:
            draw(result, args.plot)
        report = markdown(result, args.plot, args.md.parent if args.md else None, args.section)
        if args.md is not None:
            old = args.md.read_text(encoding="utf-8") if args.md.exists() else ""
            args.md.write_text(splice(old, args.section, report), encoding="utf-8")
        print(report)
    finally:
        for each, handler in previous.items():
            signal.signal(each, handler)
    return 128 + signal.Signals[result["stopped"]] if "stopped" in result else 0
