"""What Prometheus saw of a run, drawn: queue saturation and refusals over time (matplotlib).

Rules: reads series only through Prometheus' HTTP API (bench/common/prometheus.py) and draws one PNG;
it knows nothing of the load that made the series. Saturation is the shipped recording
rule itself (an instant ratio, no window), drawn against the bound SemifQueueSaturated sets
on it in the shipped rules file; the per-second rates are taken from the raw
counters over four scrape intervals, because the rules' 1m windows would smear a run of
a few seconds into a ramp.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a display
import matplotlib.pyplot as plt  # noqa: E402

from bench.common import prometheus  # noqa: E402

SATURATION = "instance:semif_requests_in_progress_per_max_queue:ratio"
SATURATED = "SemifQueueSaturated"


def threshold() -> float:
    """SemifQueueSaturated's bound, read from its rule (`SATURATION >= N`), so the line drawn is the one that fires."""
    expr = prometheus.alert(SATURATED)["expr"].strip()
    found = re.fullmatch(rf"{re.escape(SATURATION)}\s*>=?\s*([0-9.]+)", expr)
    if found is None:
        raise ValueError(f"{SATURATED} is no longer `{SATURATION} >= N`: {expr}")
    return float(found.group(1))


def series(
    prom: prometheus.Prometheus,
    expr: str,
    span: tuple[float, float, float],
    origin: float,
    label: str,
) -> dict[str, list[tuple[float, float]]]:
    """A range query over span (start, end, step) as {legend: [(seconds since origin, value)]}."""
    return {
        sample["metric"].get(label, label): [
            (float(t) - origin, float(v)) for t, v in sample["values"]
        ]
        for sample in prom.query_range(expr, *span)
    }


def seen(prom: prometheus.Prometheus, origin: float, end: float, interval: float) -> dict[str, Any]:
    """Saturation, scored requests per second and refusals per second by code (only codes that occurred),
    from a few scrapes before `origin` (the load's start) to `end`."""
    window = f"{round(max(4 * interval, 2) * 1000)}ms"
    span = (origin - 4 * interval, end, interval)
    return {
        "saturation": series(prom, SATURATION, span, origin, "instance"),
        "scored": series(
            prom,
            f'sum(rate(semif_http_requests_total{{route=~"/decide|/decide/shared", status="200"}}[{window}]))',
            span,
            origin,
            "answered 200",
        ),
        "refusals": series(
            prom, f"sum by (code) (rate(semif_refusals_total[{window}])) > 0", span, origin, "code"
        ),
        "window": window,
    }


def peaks(figures: dict[str, Any]) -> dict[str, Any]:
    """The highest saturation and refusal rate per code Prometheus saw: the drawing's numbers, for the JSON."""
    top = [value for points in figures["saturation"].values() for _, value in points]
    return {
        "saturation": max(top, default=None),
        "refusals_per_s": {
            code: round(max(value for _, value in points), 1)
            for code, points in figures["refusals"].items()
        },
        "rate_window": figures["window"],
    }


def draw(figures: dict[str, Any], path: Path, title: str) -> Path:
    """Two panels over one time axis: saturation against the alert threshold; answers and refusals per second."""
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 6), constrained_layout=True)
    for legend, points in figures["saturation"].items():
        top.plot(*zip(*points), label=f"in progress / SEMIF_MAX_QUEUE ({legend})", color="tab:blue")
    bound = threshold()
    top.axhline(
        bound,
        color="tab:red",
        linestyle="--",
        linewidth=1,
        label=f"{SATURATED} threshold ({bound:g})",
    )
    top.set_ylim(-0.05, 1.1)
    top.set_ylabel("queue saturation")
    top.legend(loc="lower right", fontsize=8)
    top.set_title(title, fontsize=10)
    for points in figures["scored"].values():
        bottom.plot(
            *zip(*points), label="scoring requests answered 200", color="tab:green", linewidth=1.5
        )
    for code, points in sorted(figures["refusals"].items()):
        bottom.plot(*zip(*points), label=f"refused {code}", linestyle="--", linewidth=1.5)
    bottom.set_yscale("symlog", linthresh=1.0)  # a few scored per second beside hundreds refused
    bottom.set_ylabel(f"per second (rate over {figures['window']})")
    bottom.set_xlabel("seconds since the soak began (Prometheus' samples)")
    bottom.legend(loc="lower center", fontsize=8)
    for axis in (top, bottom):
        axis.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
