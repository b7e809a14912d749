"""The wrk bench's figures: per-cell summaries, the ratios, the verdicts and the RESULTS.md section.

Rules: pure functions of what bench/load/wrk.py measured (each run's parsed wrk report
plus the server's and wrk's CPU seconds); no process, no clock, no wrk here, so
every figure and verdict can be checked by a test from made-up runs.

Theory: per cell and server, rps is the mean over rounds, and CPU per request is
pooled (all CPU seconds over all requests completed), for the server process (all
threads) and for wrk. Each ratio compares two servers in the same cell and is
oriented so that above 1.0 means the first-named does better: by rps, top / bottom;
by CPU, bottom's CPU per request / top's (the throughput ratio the two would reach
if each were bound by its CPU alone, which on a shared machine moves far less than
rps). Every ratio comes with its per-round min - max, round k of one server against
round k of the other (the order was reversed every round). A verdict is MET only
when the lowest cell clears the bar, and names that cell.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bench.common.report import markdown_table
from bench.load.peers import BASELINES, LABELS, STACK_HEADERS, VARIANTS, stacks_rows

Run = Mapping[str, Any]  # one wrk run: parse() plus server_cpu_s, wrk_cpu_s, wall_s
NAMES = (*VARIANTS, *BASELINES)  # every server of a cell, in the order of the first round
# ratio name -> (top, bottom): above 1.0 means top does better
RATIOS: dict[str, tuple[str, str]] = {
    "on_vs_logged": ("ours", "baseline_logged"),
    "on_vs_baseline": ("ours", "baseline"),
    "off_vs_baseline": ("ours_off", "baseline"),
    "metrics_vs_off": ("ours_metrics", "ours_off"),
    "on_vs_off": ("ours", "ours_off"),
}
OPS_COST_LIMIT = 0.05  # metrics may cost at most 5% of throughput
PEER_FLOOR = 1.0  # the performance target: ours with metrics and access logs on at least 1.0x the peer in every cell
WRK_BUSY = 0.8  # wrk past this share of a core in any run may have been the limit, not the server


def per_request_us(cpu_s: float | None, requests: int) -> float | None:
    """CPU microseconds per completed request; None when either is unknown."""
    if not requests or cpu_s is None or not math.isfinite(cpu_s):
        return None
    return cpu_s / requests * 1e6


def pooled_us(runs: Sequence[Run], field: str) -> float | None:
    """`field` CPU seconds over all runs per request completed in all of them."""
    return per_request_us(sum(r[field] for r in runs), sum(r["requests"] for r in runs))


def _figure(value: float | None, per_round: Iterable[float | None]) -> dict[str, Any]:
    known = [v for v in per_round if v is not None]
    return {
        "ratio": None if value is None else round(value, 3),
        "range": [round(min(known), 3), round(max(known), 3)] if known else None,
    }


def _divide(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top is not None and bottom else None


def ratio(rounds: Mapping[str, Sequence[Run]], top: str, bottom: str) -> dict[str, dict[str, Any]]:
    """`top` against `bottom` in one cell, by rps and by CPU per request, each with its per-round range."""
    a, b = rounds[top], rounds[bottom]

    def mean(runs):
        return sum(r["rps"] for r in runs) / len(runs)

    by_rps = _figure(_divide(mean(a), mean(b)), (_divide(x["rps"], y["rps"]) for x, y in zip(a, b)))
    by_cpu = _figure(
        _divide(pooled_us(b, "server_cpu_s"), pooled_us(a, "server_cpu_s")),
        (
            _divide(pooled_us([y], "server_cpu_s"), pooled_us([x], "server_cpu_s"))
            for x, y in zip(a, b)
        ),
    )
    return {"rps": by_rps, "cpu": by_cpu}


def _rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def summarise(rounds: Mapping[str, Sequence[Run]]) -> dict[str, Any]:
    """One cell: per server its mean rps, CPU per request (its own and wrk's), latency and failures; the ratios."""
    runs = rounds.items()
    shares = [r["wrk_cpu_s"] / r["wall_s"] for _, rs in runs for r in rs if r.get("wall_s")]
    return {
        "rps": {name: round(sum(r["rps"] for r in rs) / len(rs), 1) for name, rs in runs},
        "cpu_us": {name: _rounded(pooled_us(rs, "server_cpu_s")) for name, rs in runs},
        "wrk_cpu_us": {name: _rounded(pooled_us(rs, "wrk_cpu_s")) for name, rs in runs},
        "wrk_core_share": round(max(shares), 3) if shares else None,
        "p50_ms": {name: sorted(r["p50_ms"] for r in rs)[len(rs) // 2] for name, rs in runs},
        "p99_ms": {name: max(r["p99_ms"] for r in rs) for name, rs in runs},
        "failures": {name: sum(r["non_2xx"] + r["socket_errors"] for r in rs) for name, rs in runs},
        "ratios": {
            name: ratio(rounds, top, bottom)
            for name, (top, bottom) in RATIOS.items()
            if top in rounds and bottom in rounds
        },
    }


# -- verdicts ------------------------------------------------------------------------------


def lowest(
    cells: Mapping[str, Mapping[str, Any]], name: str, measure: str
) -> tuple[str, dict[str, Any]] | None:
    """The cell where ratio `name` by `measure` ("rps" or "cpu") is lowest, with that figure."""
    known = [
        (key, c["ratios"][name][measure])
        for key, c in cells.items()
        if name in c["ratios"] and c["ratios"][name][measure]["ratio"] is not None
    ]
    return min(known, key=lambda kv: kv[1]["ratio"]) if known else None


def _lowest_words(found: tuple[str, dict[str, Any]]) -> str:
    key, figure = found
    spread = (
        f", per-round {figure['range'][0]:.2f} - {figure['range'][1]:.2f}"
        if figure["range"]
        else ""
    )
    return f"lowest {figure['ratio']:.3f}x at {key}{spread}"


def verdict(cells: Mapping[str, Mapping[str, Any]], name: str, floor: float, label: str) -> str:
    """`label: by rps MET|MISSED (lowest ...); by CPU per request MET|MISSED (lowest ...)`."""
    parts = []
    for measure, words in (("rps", "by rps"), ("cpu", "by CPU per request")):
        found = lowest(cells, name, measure)
        if found is None:
            parts.append(f"{words} not measured")
        else:
            parts.append(
                f"{words} {'MET' if found[1]['ratio'] >= floor else 'MISSED'} ({_lowest_words(found)})"
            )
    return f"{label}: {'; '.join(parts)}"


def shown(cells: Mapping[str, Mapping[str, Any]], name: str, label: str) -> str:
    """A ratio with no budget, stated plainly: its lowest cell by rps and by CPU."""
    parts = [
        f"{words} {_lowest_words(found)}"
        for measure, words in (("rps", "by rps"), ("cpu", "by CPU"))
        if (found := lowest(cells, name, measure)) is not None
    ]
    return f"{label}: {'; '.join(parts) or 'not measured'}"


def wrk_load(cells: Mapping[str, Mapping[str, Any]]) -> str:
    """Whether wrk itself could have been the limit: its busiest run and its CPU per request against the servers'."""
    shares = [
        (key, c["wrk_core_share"])
        for key, c in cells.items()
        if c.get("wrk_core_share") is not None
    ]
    wrk = [v for c in cells.values() for v in c["wrk_cpu_us"].values() if v is not None]
    server = [v for c in cells.values() for v in c["cpu_us"].values() if v is not None]
    if not shares or not wrk or not server:
        return "wrk's own CPU: not measured"
    key, busiest = max(shares, key=lambda kv: kv[1])
    judged = (
        "not the bottleneck"
        if busiest < WRK_BUSY
        else f"possibly the bottleneck (over {WRK_BUSY:.0%} of a core)"
    )
    return (
        f"wrk's own CPU: {judged}; at most {busiest:.0%} of a core in one run ({key}), "
        f"{min(wrk):.0f} - {max(wrk):.0f} us per request against the servers' {min(server):.0f} - {max(server):.0f} us"
    )


def verdicts(cells: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The performance targets, each MET or MISSED with its lowest cell, and what has no budget, plainly."""
    return [
        verdict(
            cells,
            "on_vs_logged",
            PEER_FLOOR,
            "ours (metrics + JSON access log on) >= baseline_logged "
            "(uvicorn with its default access log) in every cell, the like-for-like comparison",
        ),
        verdict(
            cells,
            "on_vs_baseline",
            PEER_FLOOR,
            "ours (metrics + JSON access log on) >= baseline "
            "(uvicorn with no access log) in every cell",
        ),
        verdict(
            cells,
            "metrics_vs_off",
            1 - OPS_COST_LIMIT,
            f"metrics cost <= {OPS_COST_LIMIT:.0%} "
            f"(ours metrics only / ours off >= {1 - OPS_COST_LIMIT:.2f}) in every cell",
        ),
        shown(
            cells,
            "off_vs_baseline",
            "ours with both off against baseline (no budget; shown plainly)",
        ),
        shown(
            cells,
            "on_vs_off",
            "metrics + JSON access log together against both off (no budget; shown plainly)",
        ),
        wrk_load(cells),
    ]


# -- the RESULTS.md section ----------------------------------------------------------------------


def _each(values: Mapping[str, float | None], names: Sequence[str], digits: int = 0) -> str:
    return " / ".join("-" if values.get(n) is None else f"{values[n]:.{digits}f}" for n in names)


def _peer(figure: Mapping[str, Any]) -> str:
    if figure["ratio"] is None:
        return "-"
    spread = f" ({figure['range'][0]:.2f} - {figure['range'][1]:.2f})" if figure["range"] else ""
    return f"**{figure['ratio']:.2f}x**{spread}"


def _cost(figure: Mapping[str, Any]) -> str:
    if figure["ratio"] is None:
        return "-"
    spread = f" ({figure['range'][0]:.2f} - {figure['range'][1]:.2f})" if figure["range"] else ""
    return f"{figure['ratio']:.3f}{spread}"


def _ratio_cells(cell: Mapping[str, Any], measure: str) -> list[str]:
    ratios = cell["ratios"]
    out = []
    for name in RATIOS:
        render = _cost if name in ("metrics_vs_off", "on_vs_off") else _peer
        out.append(render(ratios[name][measure]) if name in ratios else "-")
    return out


RATIO_HEADERS = ("on / base-logged", "on / base", "off / base", "metrics only / off", "on / off")


def tables(cells: Mapping[str, Mapping[str, Any]]) -> tuple[str, str]:
    """The throughput table and the CPU-per-request table, one row per cell."""
    names = [n for n in NAMES if any(n in c["rps"] for c in cells.values())]
    by_rps, by_cpu = [], []
    for key, c in cells.items():
        endpoint, conns = key.split("@")
        by_rps.append(
            (
                endpoint,
                conns,
                _each(c["rps"], names),
                *_ratio_cells(c, "rps"),
                _each(c["p50_ms"], names, 2),
                _each(c["failures"], names),
            )
        )
        share = "-" if c.get("wrk_core_share") is None else f"{c['wrk_core_share']:.0%}"
        wrk = [v for v in c["wrk_cpu_us"].values() if v is not None]
        by_cpu.append(
            (
                endpoint,
                conns,
                _each(c["cpu_us"], names),
                *_ratio_cells(c, "cpu"),
                f"{min(wrk):.0f} - {max(wrk):.0f} ({share})" if wrk else "-",
            )
        )
    order = " / ".join(LABELS.get(n, n) for n in names)
    rps = markdown_table(
        (
            "endpoint",
            "conns",
            f"rps {order}",
            *[f"{h} (rps)" for h in RATIO_HEADERS],
            f"p50 ms {order}",
            f"failures {order}",
        ),
        by_rps,
    )
    cpu = markdown_table(
        (
            "endpoint",
            "conns",
            f"server CPU us/req {order}",
            *[f"{h} (CPU)" for h in RATIO_HEADERS],
            "wrk CPU us/req (max core share)",
        ),
        by_cpu,
    )
    return rps, cpu


def markdown(result: Mapping[str, Any]) -> str:
    """The marked `wrk` section of RESULTS.md."""
    info = result["machine"]
    rps, cpu = tables(result["cells"])
    stack_table = (
        markdown_table(STACK_HEADERS, stacks_rows(result["stacks"])) if result.get("stacks") else ""
    )
    return "\n".join(
        [
            "## Measured with wrk: ours vs FastAPI on uvicorn[standard], access logs on and off",
            "",
            f"`python -m bench wrk` on `{info['uname_m']}`, {info['nproc']} CPUs, load average "
            f"{' / '.join(map(str, info['loadavg']))} (1/5/15 min) when it began and "
            f"{' / '.join(map(str, result.get('loadavg_after', [])))} when it ended, on a shared machine under load; "
            f"thread settings {info['threads']}. wrk {result['wrk_version']} with {result['threads']} thread(s), "
            f"{result['rounds']} rounds x {result['duration_s']:g} s per server per cell, order reversed every round; "
            "every server scores with the product's own stub and logs to a file. rps is the mean over rounds; "
            "CPU per request is the server process's utime + stime (all threads, /proc/PID/stat) around each wrk run "
            "over the requests wrk completed, pooled over rounds, and wrk's own the same from its rusage. "
            "Ratios above 1.0 mean the first-named does better: by rps, its rps over the other's; by CPU, the other's "
            "CPU per request over its own. In brackets, the per-round min - max.",
            "",
            stack_table,
            "",
            "Throughput:",
            "",
            rps,
            "",
            "CPU per request:",
            "",
            cpu,
            "",
            *[f"- {v}" for v in verdicts(result["cells"])],
            "",
        ]
    )
