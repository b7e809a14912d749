"""What Prometheus saw of a run, drawn: queue saturation and refusals over time (matplotlib).

Rules: reads only through Prometheus' HTTP API (bench/prometheus.py) and draws one PNG;
it knows nothing of the load that made the series. Saturation is the shipped recording
rule itself (an instant ratio, no window); the per-second rates are taken from the raw
counters over four scrape intervals, because the rules' 1m windows would smear a run of
a few seconds into a ramp.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a display
import matplotlib.pyplot as plt  # noqa: E402

from bench.common.prometheus import Prometheus  # noqa: E402

SATURATION = "instance:semif_requests_in_progress_per_max_queue:ratio"
THRESHOLD = 0.9  # SemifQueueSaturated's


def series(prom: Prometheus, expr: str, start: float, end: float, step: float, label: str) -> dict[str, list[tuple[float, float]]]:
    """A range query as {legend: [(seconds since start, value)]}, legend from one label."""
    return {sample["metric"].get(label, expr): [(float(t) - start, float(v)) for t, v in sample["values"]]
            for sample in prom.query_range(expr, start, end, step)}


def seen(prom: Prometheus, start: float, end: float, interval: float) -> dict[str, Any]:
    """Saturation, answers per second by status and refusals per second by code (only codes that occurred)."""
    window = f"{max(4 * interval, 2):g}s"
    return {
        "saturation": series(prom, SATURATION, start, end, interval, "instance"),
        "answers": series(prom, f"sum by (status) (rate(semif_http_requests_total{{route=~\"/decide|/decide/shared\"}}[{window}]))",
                          start, end, interval, "status"),
        "refusals": series(prom, f"sum by (code) (rate(semif_refusals_total[{window}])) > 0", start, end, interval, "code"),
        "window": window,
    }


def draw(figures: dict[str, Any], path: Path, title: str) -> Path:
    """Two panels over one time axis: saturation against the alert threshold; answers and refusals per second."""
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 6), constrained_layout=True)
    for legend, points in figures["saturation"].items():
        top.plot(*zip(*points), label=f"in progress / SEMIF_MAX_QUEUE ({legend})", color="tab:blue")
    top.axhline(THRESHOLD, color="tab:red", linestyle="--", linewidth=1, label="SemifQueueSaturated threshold (0.9)")
    top.set_ylim(-0.05, 1.1)
    top.set_ylabel("queue saturation")
    top.legend(loc="lower right", fontsize=8)
    top.set_title(title, fontsize=10)
    for status, points in sorted(figures["answers"].items()):
        bottom.plot(*zip(*points), label=f"POST answered {status}", linewidth=1.5)
    for code, points in sorted(figures["refusals"].items()):
        bottom.plot(*zip(*points), label=f"refused {code}", linestyle=":", linewidth=2)
    bottom.set_ylabel(f"per second (rate over {figures['window']})")
    bottom.set_xlabel("seconds since the load began (Prometheus' samples)")
    bottom.legend(loc="upper right", fontsize=8)
    for axis in (top, bottom):
        axis.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
