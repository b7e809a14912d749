"""Every matplotlib call of the labelled tools: reliability diagrams and position priors to PNG.

Rules: input is the metrics module's reliability bins (or the priors as the
calibration file holds them), never raw rows, so a diagram shows exactly the
figures the tables print. The Agg backend is chosen
here, before pyplot loads, so the tools draw on a machine with no display.

A diagram per panel: bars of accuracy per confidence bin, the diagonal of
perfect calibration, the per-bin mean confidence as dots, the row count
printed on each non-empty bar, and NLL/Brier/ECE in the panel title.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)


@dataclass(frozen=True)
class Panel:
    """One reliability diagram: a title and a metrics.summary() result."""

    title: str
    summary: dict[str, Any]


def _draw(axis: Any, panel: Panel) -> None:
    bins, figures = panel.summary["bins"], panel.summary
    width = bins[0]["hi"] - bins[0]["lo"]
    filled = [b for b in bins if b["count"]]
    axis.bar(
        [b["lo"] for b in filled],
        [b["accuracy"] for b in filled],
        width=width,
        align="edge",
        color="#4c72b0",
        edgecolor="white",
        label="accuracy",
    )
    axis.plot(
        [b["confidence"] for b in filled],
        [b["accuracy"] for b in filled],
        "o",
        color="#dd8452",
        markersize=4,
        label="mean confidence",
    )
    for b in filled:
        axis.text(
            b["lo"] + width / 2,
            min(b["accuracy"], 0.92) + 0.02,
            str(b["count"]),
            ha="center",
            fontsize=7,
        )
    axis.plot([0, 1], [0, 1], "--", color="grey", linewidth=1, label="perfect calibration")
    axis.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence (top probability)", ylabel="accuracy")
    axis.set_title(
        f"{panel.title}\nacc {figures['accuracy']:.3f}  NLL {figures['nll']:.3f}  "
        f"Brier {figures['brier']:.3f}  ECE {figures['ece']:.3f}",
        fontsize=8,
    )


def _save(figure: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def reliability(grid: Sequence[Sequence[Panel]], path: str | Path, title: str) -> Path:
    """Write a grid of reliability diagrams (rows x columns of panels) as one PNG."""
    rows, columns = len(grid), max(len(row) for row in grid)
    figure, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 3.4 * rows), squeeze=False)
    for r, row in enumerate(grid):
        for c in range(columns):
            if c < len(row):
                _draw(axes[r][c], row[c])
            else:
                axes[r][c].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=3, fontsize=7, frameon=False)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout(rect=(0, 0.04, 1, 1))
    return _save(figure, path)


def priors(fitted: dict[str, dict[str, dict[str, Any]]], path: str | Path, title: str) -> Path:
    """One panel per (workload, option count): the fitted prior per position as bars, uniform as a line."""
    cells = [
        (w, n, e)
        for w, entries in fitted.items()
        for n, e in sorted(entries.items(), key=lambda item: int(item[0]))
    ]
    figure, axes = plt.subplots(1, len(cells), figsize=(3.0 * len(cells), 3.0), squeeze=False)
    for axis, (workload, n, entry) in zip(axes[0], cells):
        positions = range(int(n))
        axis.bar(positions, entry["prior"], color="#4c72b0", label="prior")
        axis.axhline(1 / int(n), linestyle="--", color="grey", linewidth=1, label="uniform")
        for k, p in zip(positions, entry["prior"]):
            axis.text(k, p + 0.01, f"{p:.2f}", ha="center", fontsize=7)
        axis.set(
            xticks=list(positions),
            xticklabels=[chr(ord("A") + k) for k in positions],
            ylim=(0, 1),
            xlabel="position",
            ylabel="prior",
        )
        axis.set_title(f"{workload}, {n} options ({entry['decisions']} decisions)", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=2, fontsize=7, frameon=False)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout(rect=(0, 0.06, 1, 1))
    return _save(figure, path)


def rows_curve(
    points: Sequence[dict[str, float]],
    methods: dict[str, dict[str, Any]],
    path: str | Path,
    title: str,
) -> Path:
    """Adaptive's accuracy against rows per decision over every threshold, with each method as a point
    (its 95 % interval as an error bar) and the fitted threshold's point marked."""
    figure, axis = plt.subplots(figsize=(5.5, 4.0))
    axis.plot(
        [p["rows_per_decision"] for p in points],
        [p["accuracy"] for p in points],
        color="#4c72b0",
        linewidth=1,
        label="adaptive, every threshold",
    )
    for name, f in methods.items():
        if not f.get("rows"):
            continue
        lo, hi = f["interval95"]
        axis.errorbar(
            f["rows_per_decision"],
            f["accuracy"],
            yerr=[[f["accuracy"] - lo], [hi - f["accuracy"]]],
            fmt="o",
            capsize=3,
            label=f"{name} ({f['accuracy']:.3f} at {f['rows_per_decision']:.2f} rows)",
        )
    axis.set(xlabel="rows scored per decision", ylabel="accuracy")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, loc="lower right")
    axis.set_title(title, fontsize=9)
    figure.tight_layout()
    return _save(figure, path)
