"""bench/load/wrk_report.py: CPU per request, the ratios by rps and by CPU, the verdicts and the section,
from made-up runs (no wrk, no server, no clock)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench.load import wrk_report
from bench.load.peers import BASELINES, LABELS, VARIANTS, stacks
from bench.load.wrk_report import (
    NAMES,
    lowest,
    markdown,
    per_request_us,
    pooled_us,
    summarise,
    verdict,
    verdicts,
    wrk_load,
)


def run(
    rps: float,
    cpu_s: float,
    requests: int,
    wrk_cpu_s: float = 0.1,
    wall_s: float = 2.0,
    failures: int = 0,
) -> dict[str, Any]:
    return {
        "rps": rps,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
        "non_2xx": failures,
        "socket_errors": 0,
        "requests": requests,
        "server_cpu_s": cpu_s,
        "wrk_cpu_s": wrk_cpu_s,
        "wall_s": wall_s,
    }


def cell(scale: dict[str, float] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Two rounds per server: 1000 requests each, 0.1 s of CPU (100 us/request) times the server's scale."""
    scale = scale or {}
    return {
        name: [run(500 / scale.get(name, 1.0), 0.1 * scale.get(name, 1.0), 1000) for _ in range(2)]
        for name in NAMES
    }


def test_every_server_of_both_benches_is_named_and_both_baselines_are_there() -> None:
    assert (
        set(BASELINES) == {"baseline", "baseline_logged"} and BASELINES["baseline_logged"] is True
    )
    assert (
        set(NAMES)
        == {"ours", "ours_metrics", "ours_off", "baseline", "baseline_logged"}
        <= set(LABELS)
    )


def test_cpu_per_request_is_pooled_over_rounds_not_averaged() -> None:
    runs = [run(1, 0.3, 1000), run(1, 0.1, 3000)]  # 300 us and 33 us per request
    assert pooled_us(runs, "server_cpu_s") == pytest.approx(
        100.0
    )  # 0.4 s / 4000, not (300 + 33) / 2
    assert (
        per_request_us(0.5, 0) is None
        and per_request_us(math.nan, 10) is None
        and per_request_us(None, 10) is None
    )


def test_a_cell_reports_cpu_per_request_and_wrks_busiest_share() -> None:
    rounds = cell({"baseline": 0.8})
    rounds["ours"][1] = run(500, 0.1, 1000, wrk_cpu_s=1.5, wall_s=2.0)
    figures = summarise(rounds)
    assert figures["cpu_us"]["baseline"] == pytest.approx(80.0) and figures["cpu_us"][
        "ours"
    ] == pytest.approx(100.0)
    assert figures["wrk_cpu_us"]["ours"] == pytest.approx(800.0)  # (0.1 + 1.5) s / 2000 requests
    assert figures["wrk_core_share"] == 0.75


def test_ratios_are_oriented_so_above_one_favours_the_first_named() -> None:
    # ours costs 1.25x the logged baseline's CPU and serves 0.8x its rps: both ratios 0.8
    ratios = summarise(cell({"ours": 1.25}))["ratios"]
    assert (
        ratios["on_vs_logged"]["rps"]["ratio"] == 0.8
        and ratios["on_vs_logged"]["cpu"]["ratio"] == 0.8
    )
    # ours_off cheaper than the quiet baseline: above 1
    assert summarise(cell({"baseline": 1.5}))["ratios"]["off_vs_baseline"]["cpu"]["ratio"] == 1.5
    assert set(ratios) == {
        "on_vs_logged",
        "on_vs_baseline",
        "off_vs_baseline",
        "metrics_vs_off",
        "on_vs_off",
    }


def test_per_round_ranges_pair_round_k_with_round_k() -> None:
    rounds = cell()
    rounds["ours"] = [run(400, 0.1, 1000), run(600, 0.2, 1000)]  # 100 then 200 us/request
    rounds["baseline_logged"] = [
        run(500, 0.1, 1000),
        run(400, 0.05, 1000),
    ]  # 100 then 50 us/request
    figure = summarise(rounds)["ratios"]["on_vs_logged"]
    assert figure["rps"]["range"] == [0.8, 1.5] and figure["rps"]["ratio"] == pytest.approx(
        1.111, abs=1e-3
    )
    assert (
        figure["cpu"]["range"] == [0.25, 1.0] and figure["cpu"]["ratio"] == 0.5
    )  # pooled: 75 / 150 us


def test_unknown_cpu_gives_no_cpu_ratio_but_keeps_the_rps_one() -> None:
    rounds = cell()
    rounds["ours"] = [run(500, math.nan, 1000) for _ in range(2)]
    figure = summarise(rounds)["ratios"]["on_vs_logged"]
    assert figure["cpu"] == {"ratio": None, "range": None} and figure["rps"]["ratio"] == 1.0


def cells(**worst: dict[str, float]) -> dict[str, dict[str, Any]]:
    """health@8 even, plus one cell per keyword with those scales."""
    out = {"health@8": summarise(cell())}
    for key, scale in worst.items():
        out[key.replace("_at_", "@")] = summarise(cell(scale))
    return out


def test_a_verdict_is_met_only_when_the_lowest_cell_clears_the_bar_and_names_it() -> None:
    even = verdict(cells(), "on_vs_logged", 1.0, "peer")
    assert (
        even.startswith("peer: by rps MET (lowest 1.000x at health@8")
        and "by CPU per request MET" in even
    )
    one_low = cells(decide_at_32={"baseline_logged": 0.98})  # the logged baseline 2% faster there
    line = verdict(one_low, "on_vs_logged", 1.0, "peer")
    assert (
        "by rps MISSED (lowest 0.980x at decide@32" in line
        and "by CPU per request MISSED (lowest 0.980x at decide@32" in line
    )
    assert lowest(one_low, "on_vs_logged", "rps")[0] == "decide@32"  # type: ignore[index]
    other = verdict(one_low, "on_vs_baseline", 1.0, "peer")  # the quiet baseline did not move
    assert "by rps MET" in other and "by CPU per request MET" in other


def test_the_metrics_budget_is_five_percent() -> None:
    inside = verdicts(cells(decide_at_1={"ours_metrics": 1.04}))[2]
    outside = verdicts(cells(decide_at_1={"ours_metrics": 1.06}))[2]
    assert inside.startswith("metrics cost <= 5%") and "MISSED" not in inside
    assert "by rps MISSED (lowest 0.943x at decide@1" in outside


def test_verdicts_cover_each_target_and_say_plainly_what_has_no_budget() -> None:
    lines = verdicts(cells(shared_at_8={"ours": 1.1, "baseline": 0.9}))
    assert "baseline_logged" in lines[0] and "MISSED" in lines[0]
    assert "uvicorn with no access log" in lines[1] and "MISSED" in lines[1]
    assert "no budget" in lines[3] and "no budget" in lines[4] and "MET" not in lines[3] + lines[4]
    assert lines[5].startswith("wrk's own CPU")


def test_wrk_is_judged_by_its_busiest_run() -> None:
    quiet = cells()
    assert "not the bottleneck" in wrk_load(quiet) and "at most 5% of a core" in wrk_load(quiet)
    busy = cell()
    busy["baseline"][0] = run(500, 0.1, 1000, wrk_cpu_s=1.8, wall_s=2.0)
    verdict_line = wrk_load({"health@8": summarise(busy)})
    assert (
        "possibly the bottleneck" in verdict_line
        and "90% of a core in one run (health@8)" in verdict_line
    )


def test_the_section_names_every_stack_and_shows_both_measures() -> None:
    uvicorn = {"loop": "uvloop", "http": "httptools", "uvicorn": "0.54.0", "fastapi": "0.163.2"}
    result = {
        "machine": {"uname_m": "x86_64", "nproc": 2, "loadavg": [0.5, 0.6, 0.7], "threads": {}},
        "loadavg_after": [0.8, 0.7, 0.7],
        "wrk_version": "4.1.0",
        "threads": 1,
        "rounds": 2,
        "duration_s": 2.0,
        "stacks": stacks(VARIANTS, uvicorn, {"event_loop": "uvloop", "log_flush_s": 0.5}),
        "cells": cells(decide_at_8={"ours": 1.25}),
    }
    text = markdown(result)
    logged = next(line for line in text.splitlines() if line.startswith("| baseline_logged"))
    quiet = next(line for line in text.splitlines() if line.startswith("| baseline "))
    assert (
        "httptools" in logged
        and "uvloop" in logged
        and "| on (" in logged
        and "--log-level info" in logged
    )
    assert "| off (--no-access-log --log-level warning)" in quiet
    ours = next(line for line in text.splitlines() if line.startswith("| ours "))
    assert "h11" in ours and "on (JSON" in ours
    assert (
        "rps on / metrics / off / base-logged / base" in text
        and "server CPU us/req on / metrics" in text
    )
    assert "**0.80x** (0.80 - 0.80)" in text and "0.8 / 0.7 / 0.7 when it ended" in text
    assert text.count("MISSED") >= 2 and wrk_report.verdicts(result["cells"])[0] in text
