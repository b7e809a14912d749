"""The two FastAPI baselines the overhead benches run: uvicorn quiet (`baseline`) and with its
default access log (`baseline_logged`). The argv is checked as data; that the logged one really
writes a line per request, and the quiet one none, on real sockets against real uvicorn."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.common import procs
from bench.common.loadgen import call
from bench.load.peers import BASELINES, stacks

TOKEN = "t" * 40
ACCESS_LINE = '"POST /decide HTTP/1.1" 200'


def test_the_logged_baseline_runs_with_uvicorns_default_logging_and_the_quiet_one_without() -> None:
    logged, quiet = procs.uvicorn_argv(8000, access_log=True), procs.uvicorn_argv(8000)
    assert (
        "--no-access-log" not in logged and "--log-level" not in logged
    )  # uvicorn's defaults: info, access log on
    assert "--no-access-log" in quiet and quiet[quiet.index("--log-level") + 1] == "warning"
    assert [a for a in logged if a not in ("--no-access-log", "--log-level", "warning")] == [
        a for a in quiet if a not in ("--no-access-log", "--log-level", "warning")
    ]  # nothing else differs


def test_each_stack_says_whether_its_access_log_is_on() -> None:
    named = stacks(
        {"ours": {"SEMIF_ACCESS_LOG": "on", "SEMIF_METRICS": "on"}, "ours_off": {}},
        {"loop": "uvloop", "http": "httptools"},
        {"event_loop": "asyncio", "log_flush_s": 0.5},
    )
    assert named["baseline_logged"]["access_log"].startswith("on") and named["baseline"][
        "access_log"
    ].startswith("off")
    assert (named["ours"]["access_log"].startswith("on"), named["ours_off"]["access_log"]) == (
        True,
        "off",
    )
    assert (named["ours"]["loop"], named["ours"]["http"], named["baseline"]["http"]) == (
        "asyncio",
        "h11",
        "httptools",
    )


async def _decide_twice(server: procs.Running) -> list[int]:
    row = {
        "id": "r",
        "state": "s",
        "question": "q?",
        "options": [{"id": "a", "description": "A"}, {"id": "b", "description": "B"}],
    }
    return [(await call(server.target, "POST", "/decide", row)).status for _ in range(2)]


def test_the_logged_baseline_writes_an_access_line_per_request_and_the_quiet_one_none(
    tmp_path: Path,
) -> None:
    logs = {}
    for name, access_log in BASELINES.items():
        folder = tmp_path / name
        folder.mkdir()
        with procs.fastapi_baseline(
            procs.stub_env(), TOKEN, log_dir=folder, access_log=access_log
        ) as server:
            assert asyncio.run(_decide_twice(server)) == [200, 200]
            log = server.log
        logs[name] = log.read_text(errors="replace")
    assert logs["baseline_logged"].count(ACCESS_LINE) == 2, logs["baseline_logged"][-1000:]
    assert ACCESS_LINE not in logs["baseline"] and '"GET /health' not in logs["baseline"]
