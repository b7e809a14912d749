"""`python -m bench load`'s overhead section with the second baseline (uvicorn with its default access
log): its ratio, its verdict and its columns, from made-up tallies (no server, no clock)."""

from __future__ import annotations

from collections import Counter

from bench.common.loadgen import Tally
from bench.load import load


def tally(rps: float, cpu_s: float = 0.1, status: int = 200) -> Tally:
    """One second of load: `rps` answers, all `status`."""
    answered = int(rps)
    return Tally(sent=answered, answered=answered, statuses=Counter({status: answered}),
                 latencies=[0.001] * answered, wall=1.0, client_cpu=0.2, server_cpu=cpu_s)


def rounds(logged: list[float], ours: float = 1000.0, **others: float) -> dict[str, list[Tally]]:
    servers = {"ours": ours, "ours_metrics": 1000.0, "ours_off": 1000.0, "baseline": 1000.0, **others}
    out = {name: [tally(rps) for _ in logged] for name, rps in servers.items()}
    out["baseline_logged"] = [tally(rps) for rps in logged]
    return out


def overhead(cells: dict[str, dict[str, object]]) -> dict[str, object]:
    return {"cells": cells, "uvicorn": {"loop": "uvloop", "http": "httptools", "uvicorn": "0.54.0", "fastapi": "0.163.2"},
            "ours": {"event_loop": "uvloop", "log_flush_s": 0.5}, "shared_work_us_per_request": {"decide-2": 50.0},
            "rounds": 2, "duration_s": 1.0, "concurrency": [8], "loadavg_before_after": [0.5, 0.6]}


def test_a_cell_compares_ours_with_the_logged_baseline_round_by_round() -> None:
    cell = load._cell(rounds([800.0, 1250.0]))
    assert cell["baseline_logged"]["rps"] == 1025.0
    assert cell["logged_ratio"] == round(2000 / 2050, 3) and cell["logged_ratio_range"] == [0.8, 1.25]
    assert cell["ratio"] == 1.0  # the quiet baseline's ratio is its own


def test_the_verdict_names_the_lowest_cell_against_the_logged_baseline() -> None:
    cells = {"decide-2@8": load._cell(rounds([900.0, 900.0])), "decide-2@32": load._cell(rounds([1050.0, 1050.0]))}
    line = next(v for v in load.verdicts({"overhead": overhead(cells)}) if "baseline_logged" in v)
    assert "MISSED (lowest 0.95x at decide-2@32" in line
    cells = {"decide-2@8": load._cell(rounds([1000.0, 1000.0]))}
    line = next(v for v in load.verdicts({"overhead": overhead(cells)}) if "baseline_logged" in v)
    assert ": MET (lowest 1.00x at decide-2@8" in line


def test_the_table_shows_the_logged_baseline_and_flags_its_failures() -> None:
    good = load._cell(rounds([500.0, 500.0]))
    bad = rounds([500.0, 500.0])
    bad["baseline_logged"][0] = tally(500.0, status=429)
    text = "\n".join(load.overhead_markdown(overhead({"decide-2@8": good, "decide-2@32": load._cell(bad)})))
    assert "ours / base-logged (per-round)" in text and "base-logged server CPU us/req" in text
    assert "--log-level info" in text and "--no-access-log" in text
    rows = [line for line in text.splitlines() if line.startswith("| decide-2")]
    assert "**2.00x** (2.00 - 2.00)" in rows[0] and "(!)" not in rows[0]
    assert "(!)" in rows[1]
