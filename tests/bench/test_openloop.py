"""`python -m bench openloop`: the same arrivals for every server, open-loop sends, the figures of a
cell counted from what came back, the load generator's own check, and a short run on the stub
as a user runs it (the command, its JSON, its plot and its RESULTS.md section). Its --help is
in test_commands with every command's."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import procs
from bench.common.loadgen import Fate, OpenLoopRun, Target, encode, open_loop, poisson_arrivals
from bench.load import openloop
from tests.bodies import ROW
from tests.wire_client import TOKEN as SERVER_TOKEN

TOKEN = "openloop-token-" + "0123456789abcdef" * 2


def test_arrivals_are_the_same_for_the_same_seed_and_poisson_at_the_rate() -> None:
    first, again, other = (
        poisson_arrivals(5.0, 400.0, seed) for seed in ("31/1/5", "31/1/5", "32/1/5")
    )
    assert first == again and first != other
    assert all(0 < t < 400.0 for t in first) and first == sorted(first)
    assert 1800 < len(first) < 2200  # 2000 expected; a Poisson count's sd is ~45
    gaps = [b - a for a, b in zip(first, first[1:])]
    share_short = sum(1 for g in gaps if g < 0.2) / len(
        gaps
    )  # exponential: P(gap < mean) = 1 - 1/e
    assert 0.58 < share_short < 0.68


def test_a_cell_is_parsed_with_its_rates_absolute_or_in_capacities() -> None:
    cell = openloop.Cell.parse("21/semif,peer/0.5x,3")
    assert cell == openloop.Cell(21, ("semif", "peer"), ("0.5x", "3"))
    assert cell.offered(2.0) == [(1.0, 0.5), (3.0, 1.5)]
    for bad in ("1/semif", "1/nginx/1x", "1/semif/0x", "one/semif/1x", "1//1x"):
        with pytest.raises(argparse.ArgumentTypeError):
            openloop.Cell.parse(bad)


def fate(
    status: int | None,
    latency: float,
    due: float = 1.0,
    lag: float = 0.001,
    outcome: str = "answered",
    body: bytes = b'{"answers": {"q": {"noul": 0.5, "semif": {"total_seconds": 1}}}}',
) -> Fate:
    return Fate(due, lag, status, latency, outcome, body, "3" if status == 429 else None)


def test_url_is_loopback_unless_remote_is_asked_for() -> None:
    """A fleet's replica can be measured, but only when the caller says another host is meant: the
    bearer token crosses the network then, so a typo never sends it there."""
    with pytest.raises(ValueError) as refused:
        Target.from_url("http://10.0.0.5:8000", TOKEN)
    assert (
        str(refused.value)
        == "--url must be http://127.0.0.1:PORT (loopback only, unless --remote), got 'http://10.0.0.5:8000'"
    )
    assert Target.from_url("http://10.0.0.5:8000", TOKEN, remote=True) == Target(
        "10.0.0.5", 8000, TOKEN
    )
    assert Target.from_url("http://127.0.0.1:8000", TOKEN) == Target("127.0.0.1", 8000, TOKEN)
    for url in ("https://10.0.0.5:8000", "http://10.0.0.5"):
        with pytest.raises(ValueError) as refused:
            Target.from_url(url, TOKEN, remote=True)
        assert str(refused.value) == f"--url must be http://HOST:PORT, got {url!r}"
    assert (
        openloop.parser().parse_args(["--url", "http://10.0.0.5:8000", "--remote"]).remote is True
    )
    assert openloop.parser().parse_args(["--url", "http://127.0.0.1:8000"]).remote is False


def test_a_cells_figures_count_every_request_once_and_goodput_within_the_window() -> None:
    fates = [
        fate(200, 0.5),
        fate(200, 1.0, due=9.5),
        fate(200, 0.7, body=b'{"answers": {"q": {"noul": 0.6}}}'),
        fate(429, 0.002),
        fate(None, 30.0, outcome="timeout"),
        fate(None, 0.1, outcome="error"),
        fate(503, 0.01),
    ]
    run = OpenLoopRun(len(fates), 10.0, fates, client_cpu=0.5, wall=20.0)
    figures = openloop.cell_figures(run, [], {"q": {"noul": 0.5, "semif": {}}}, questions=21)
    assert (figures["ok"], figures["refused"], figures["timeouts"], figures["errors"]) == (
        3,
        1,
        1,
        1,
    )
    assert figures["other_status"] == {"503": 1}
    assert figures["goodput_per_s"] == pytest.approx(
        0.2
    )  # the 200 due at 9.5 s came after the 10 s window
    assert figures["goodput_decisions_per_s"] == pytest.approx(4.2)
    assert figures["answers_equal_idle"] == 2  # wall-clock fields aside, one answer differs
    assert figures["retry_after_s"] == {"min": 3, "max": 3}
    assert figures["loadgen"]["kept_up"]  # 0.5 s of CPU over 20 s, 1 ms late
    late = OpenLoopRun(1, 10.0, [fate(200, 0.5, lag=0.2)], client_cpu=0.5, wall=20.0)
    assert not openloop.cell_figures(late, [], None, 1)["loadgen"]["kept_up"]


async def test_open_loop_sends_on_schedule_whatever_the_completions(start_server, fake) -> None:
    """A server slower than the arrivals does not slow the sends: each leaves at its time."""
    fake.delay = 0.3
    server = await start_server(fake)
    target = Target("127.0.0.1", server.port, SERVER_TOKEN)
    raw = encode(target, "POST", "/decide", ROW)
    arrivals = [0.05 * k for k in range(1, 9)]  # 8 in 0.4 s against 0.3 s per call
    run = await open_loop(target, raw, arrivals, 0.5, timeout=10.0)
    assert [f.status for f in run.fates] == [200] * 8
    # None waited for an answer before leaving: sends held for the answers would leave the last one 1.75 s
    # late (7 calls of 0.3 s after 0.05 s, due at 0.4 s); 0.8 s leaves a loaded loop room and still tells them apart.
    assert max(f.lag for f in run.fates) < 0.8
    assert run.fates[-1].latency > 1.0  # the last one queued behind the others


def test_a_short_run_on_the_stub_writes_its_json_plot_and_section(tmp_path: Path) -> None:
    md = tmp_path / "RESULTS.md"
    md.write_text("# results\n\nkept\n")
    out, plot = tmp_path / "openloop.json", tmp_path / "openloop.png"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "openloop",
            "--scorer",
            "stub",
            "--stub-delay-ms",
            "30",
            "--cell",
            "1/semif-wait/2x",
            "--duration",
            "1",
            "--capacity-s",
            "0.5",
            "--budget",
            "0.2",
            "--out",
            str(out),
            "--plot",
            str(plot),
            "--md",
            str(md),
        ],
        cwd=procs.ROOT,
        env={**os.environ, "SEMIF_API_TOKEN": TOKEN},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    shape = result["shapes"]["1"]
    (cell,) = shape["cells"]
    assert shape["budget_s"] == 0.2 and cell["server"] == "semif-wait" and cell["multiple"] == 2.0
    accounted = (
        cell["ok"]
        + cell["refused"]
        + cell["timeouts"]
        + cell["errors"]
        + sum(cell["other_status"].values())
    )
    assert cell["offered"] > 0 and accounted == cell["offered"]
    assert (
        cell["answers_equal_idle"] == cell["ok"]
    )  # the stub is deterministic: load changes no score
    assert (
        cell["health"]["probes"] > 0
        and cell["server_cpu_cores"] > 0
        and cell["server_peak_rss_mib"] > 0
    )
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = md.read_text()
    assert text.startswith("# results\n\nkept\n") and "<!-- openloop: begin -->" in text
    assert (
        "## Open loop: Poisson arrivals against semif-serve\n" in text
    )  # no peer ran, so none is named
    assert "### 1-question System One request" in text and any(
        v.startswith("loadgen: ") for v in result["verdicts"]
    )
