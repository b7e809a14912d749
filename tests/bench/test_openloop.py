"""`python -m bench openloop`: the same arrivals for every server, open-loop sends, the figures of a
cell counted from what came back, the load generator's own check, and a short run on the stub
as a user runs it (the command, its JSON, its plot and its RESULTS.md section). Its --help is
in test_commands with every command's."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from bench.common import procs
from bench.common.loadgen import (
    Fate,
    OpenLoopRun,
    Target,
    call,
    encode,
    open_loop,
    poisson_arrivals,
)
from bench.load import openloop, servers
from tests.request_bodies import ROW
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


def openloop_argv(*arguments: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "bench", "openloop", *arguments, "--out", str(out)]


def run_openloop(*arguments: str, out: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """`python -m bench openloop` as a user runs it, with the test's token."""
    return subprocess.run(
        openloop_argv(*arguments, out=out),
        cwd=procs.ROOT,
        env={**os.environ, "SEMIF_API_TOKEN": TOKEN},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_short_run_on_the_stub_writes_its_json_plot_and_section(tmp_path: Path) -> None:
    md = tmp_path / "RESULTS.md"
    md.write_text("# results\n\nkept\n")
    out, plot = tmp_path / "openloop.json", tmp_path / "openloop.png"
    done = run_openloop(
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
        "--plot",
        str(plot),
        "--md",
        str(md),
        out=out,
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


def test_url_alone_runs_the_default_shapes_and_rates_on_that_server_shared(tmp_path: Path) -> None:
    """`--url` with no `--cell` measures that server, and only it: the default shapes and rates, each
    cell on the one server (said in the report), capacity over at least 5 calls after a cold one."""
    out = tmp_path / "openloop.json"
    with procs.semif_serve(procs.stub_env(delay_ms=20), TOKEN) as server:
        done = run_openloop(
            *("--url", server.url, "--duration", "0.5", "--capacity-s", "0.1"), out=out, timeout=300
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "started on" not in done.stderr  # it started no server of its own
    result = json.loads(out.read_text())
    expected = {
        str(cell.questions): [("url", float(rate[:-1])) for rate in cell.rates]
        for cell in map(openloop.Cell.parse, openloop.DEFAULT_CELLS)
    }
    assert {
        shape: [(c["server"], c["multiple"]) for c in figures["cells"]]
        for shape, figures in result["shapes"].items()
    } == expected
    for figures in result["shapes"].values():
        assert figures["capacity"]["n"] >= servers.CAPACITY_CALLS
        assert figures["capacity"]["measured_on"] == "url"
        assert all(
            c["shared"] and c["drained_s"] > 0 for c in figures["cells"]
        )  # it asked, at least once
    assert f"`url` ({server.url}): one server shared by the capacity run and all its cells" in (
        done.stdout
    )
    assert "a fresh server" not in done.stdout


def test_a_shared_servers_backlog_drains_before_the_next_cell() -> None:
    """Requests still queued from one cell (their callers gone) would load the next; drain waits them out."""
    with procs.semif_serve(procs.stub_env(delay_ms=300), TOKEN) as server:
        live = servers.Live(server.target, "/health", servers.ALIAS, server.process.pid)
        raw = encode(server.target, "POST", "/decide", ROW)
        backlog = [
            socket.create_connection((server.target.host, server.target.port)) for _ in "1234"
        ]
        try:
            for connection in backlog:
                connection.sendall(raw)
            in_progress = 0
            while in_progress == 0:  # until the server has read them
                health = asyncio.run(call(server.target, "GET", "/health"))
                in_progress = json.loads(health.body)["in_progress"]
            waited = openloop.drain(live)
            health = asyncio.run(call(server.target, "GET", "/health"))
            assert json.loads(health.body)["in_progress"] == 0 and waited is not None
        finally:
            for connection in backlog:
                connection.close()


MARK = "OPENLOOP_TEST_RUN"  # in the environment of every process one run started


def marked(run: str) -> list[int]:
    """The processes still running with MARK=run in their environment."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):  # gone, a zombie, or another user's
            if process.environ().get(MARK) == run:
                found.append(process.pid)
    return found


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_it_stops_its_servers_and_keeps_what_it_measured(
    stop: signal.Signals, tmp_path: Path
) -> None:
    """A background job of a script (SIGINT ignored, as bash starts one) stopped by either signal: it
    exits within seconds, every server it started is gone, and the cells it finished are written."""
    out, log = tmp_path / "openloop.json", tmp_path / "stderr"
    argv = openloop_argv(
        *("--scorer", "stub", "--stub-delay-ms", "30", "--cell", "1/semif/0.5x,1x,1.5x,2x,2.5x,3x"),
        *("--duration", "2", "--capacity-s", "0.2"),
        out=out,
    )
    script = f"{shlex.join(argv)} 2>{shlex.quote(str(log))} & echo $!; wait $!"
    shell = subprocess.Popen(
        ["bash", "-c", script],
        cwd=procs.ROOT,
        env={**os.environ, "SEMIF_API_TOKEN": TOKEN, MARK: str(tmp_path)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert shell.stdout is not None
    pid = int(shell.stdout.readline())
    try:
        deadline = time.monotonic() + 120
        while "openloop: semif 1q at" not in (log.read_text() if log.exists() else ""):
            assert shell.poll() is None and time.monotonic() < deadline, (
                log.read_text() if log.exists() else "no stderr"
            )
            time.sleep(0.1)
        os.kill(pid, stop)
        shell.wait(20)  # within seconds: 2 s of grace for the server it was running, then SIGKILL
    finally:
        if shell.poll() is None:
            os.kill(pid, signal.SIGKILL)
            shell.wait()
    stderr = log.read_text()
    assert shell.returncode == 128 + stop, stderr[-3000:]
    started = [int(found) for found in re.findall(r"started on \S+ \(pid (\d+)\)", stderr)]
    assert len(started) >= 2  # the capacity run's server and at least one cell's
    assert [each for each in started if Path(f"/proc/{each}").exists()] == []
    assert marked(str(tmp_path)) == []  # nor one whose start the signal cut short
    result = json.loads(out.read_text())
    assert result["stopped"] == stop.name and result["verdicts"]
    assert 1 <= len(result["shapes"]["1"]["cells"]) < 6
    assert f"**Stopped by {stop.name}**" in shell.stdout.read()


async def test_capacity_leaves_out_the_cold_first_call_and_times_at_least_five(
    start_server, fake
) -> None:
    """A cold first call (a fresh server, a new shape) would set the rate alone in a short run."""
    fake.gate = threading.Event()
    server = await start_server(fake)
    target = Target("127.0.0.1", server.port, SERVER_TOKEN)
    raw = encode(target, "POST", "/v1/systemone", servers.systemone_body(1, servers.ALIAS))
    calls = asyncio.ensure_future(servers._serial_calls(target, raw, 0.0, timeout=30.0))
    await fake.wait_entered()
    await asyncio.sleep(0.5)  # the first call is held: cold
    fake.gate.set()
    cold, latencies, _wall = await calls
    assert cold >= 0.5 and len(latencies) == servers.CAPACITY_CALLS
    assert len(fake.calls) == servers.CAPACITY_CALLS + 1  # the cold call was made, and left out


def test_an_interrupt_while_a_server_drains_kills_it_rather_than_leaving_it(tmp_path: Path) -> None:
    """A signal that lands while a server is being stopped (SIGTERM sent, its drain waited for) must
    not leave it running: it is killed at once, and the interrupt goes on. A real process stops a
    real one that outlives SIGTERM (it notes the SIGTERM in a file), and gets SIGINT meanwhile."""
    termed = tmp_path / "termed"
    server = (
        "import pathlib, signal, time; "
        f"signal.signal(signal.SIGTERM, lambda *_: pathlib.Path({str(termed)!r}).touch()); "
        "print(flush=True); time.sleep(120)"
    )
    # The stopper restores Python's SIGINT handler: a suite run as a script's background job
    # starts with SIGINT ignored, which its children inherit (openloop installs its own).
    stopper = f"""
import signal, subprocess, sys
from bench.common import procs
signal.signal(signal.SIGINT, signal.default_int_handler)
server = subprocess.Popen([sys.executable, "-c", {server!r}], stdout=subprocess.PIPE, start_new_session=True)
server.stdout.readline()
print(server.pid, flush=True)
try:
    procs._stop(server, grace=60.0)
except KeyboardInterrupt:
    print(server.poll(), flush=True)
"""
    process = subprocess.Popen(
        [sys.executable, "-c", stopper], cwd=procs.ROOT, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    pid = int(process.stdout.readline())
    try:
        deadline = time.monotonic() + 60
        while not termed.exists():
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        assert process.stdout.readline().strip() == str(-signal.SIGKILL)
        assert process.wait(30) == 0 and time.monotonic() - started < 30  # not the 60 s grace
        assert not Path(f"/proc/{pid}").exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)  # the server, had the guard failed


def test_a_child_whose_handle_was_lost_is_found_and_killed(tmp_path: Path) -> None:
    """A signal handler raising inside Popen loses the handle of a child that exists; stop_children
    still finds it (run in a process of its own: here it would kill the suite's own servers)."""
    finder = f"""
import os, subprocess, sys
from bench.common import procs
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                         env={{**os.environ, {MARK!r}: {str(tmp_path)!r}}}, start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
pid = child.pid
del child  # the handle is gone, as after a raise inside Popen
print(pid, procs.stop_children(), flush=True)
"""
    try:
        done = subprocess.run(
            [sys.executable, "-c", finder],
            cwd=procs.ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        pid, killed = done.stdout.split(maxsplit=1)
        assert killed.strip() == f"[{pid}]" and marked(str(tmp_path)) == []
    finally:
        for left in marked(str(tmp_path)):  # had the guard failed
            os.kill(left, signal.SIGKILL)


def test_the_two_caller_cell_compares_the_interactive_caller_without_and_with_a_share(
    tmp_path: Path,
) -> None:
    """A bulk caller at 3x capacity fills the queue: without a share most of the interactive caller's
    requests are 429; with SEMIF_MAX_QUEUE_PER_CALLER the bulk caller is held to its share and the
    interactive one is admitted. The same arrivals in every run; the section shows them side by side,
    each run on a baseline checkout's code (here this one's own, as `before`) and on this one's."""
    md, out = tmp_path / "RESULTS.md", tmp_path / "openloop.json"
    done = run_openloop(
        *("--two-callers", "--scorer", "stub", "--stub-delay-ms", "100"),
        *("--duration", "6", "--capacity-s", "1", "--queue", "16", "--share", "4"),
        *("--baseline", str(Path(__file__).resolve().parents[2])),
        "--md",
        str(md),
        out=out,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    two = json.loads(out.read_text())["two_callers"]
    assert not json.loads(out.read_text())["shapes"]  # --two-callers alone runs no other cell
    without, with_share = two["after"]["without_share"], two["after"]["with_share"]
    for run in (without, with_share, two["before"]["without_share"], two["before"]["with_share"]):
        assert run["bulk"]["offered"] == without["bulk"]["offered"] > 0  # the same arrivals
        assert run["interactive"]["offered"] == without["interactive"]["offered"] > 0
    assert without["interactive"]["refused_share"] > 0.3
    assert with_share["interactive"]["refused_share"] < without["interactive"]["refused_share"] / 2
    assert with_share["bulk"]["refused_share"] > without["bulk"]["refused_share"]
    text = md.read_text()
    assert "### Two callers: a bulk caller beside an interactive one" in text
    assert "| 4 " in text and "| unset (= SEMIF_MAX_QUEUE) " in text
    assert "| before | unset" in text and "| after  | 4 " in text
