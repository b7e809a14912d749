"""SEMIF_PID_FILE on a real process, as nginx's pid file: written once the server is ready (what
`kill -HUP "$(cat FILE)"` reloads), removed at exit; startup refused while the file names another
live process; a stale file (its process gone, or this very process's pid, as PID 1 in a restarted
container) replaced."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

import pytest

from semif_serve.ops import pid_file
from tests.served_process import Process


async def stopped(process: Process) -> int:
    process.proc.send_signal(signal.SIGTERM)
    return await process.exit_code(10)


async def test_written_once_ready_read_by_kill_and_removed_at_exit(tmp_path: Path) -> None:
    path = tmp_path / "run" / "semif.pid"
    path.parent.mkdir()
    process = await Process.launch(SEMIF_PID_FILE=str(path), SEMIF_LOG_FLUSH_S="0")
    await asyncio.wait_for(process.wait_for_line("effective settings"), 30)
    await asyncio.wait_for(process.wait_for_line("listening"), 30)
    try:
        assert path.read_text() == f"{process.proc.pid}\n"
        assert os.listdir(path.parent) == ["semif.pid"]  # no partial file left beside it
        subprocess.run(["bash", "-c", f'kill -HUP "$(cat {path})"'], check=True)
        await asyncio.wait_for(
            process.wait_for_line("not reloadable"), 10
        )  # it reached this server
    finally:
        assert await stopped(process) == 0
    assert not path.exists()


async def test_a_file_naming_another_live_process_refuses_startup(tmp_path: Path) -> None:
    path = tmp_path / "semif.pid"
    path.write_text(f"{os.getpid()}\n")  # this test's process: alive, and not the server
    process = await Process.launch(SEMIF_PID_FILE=str(path))
    try:
        assert await process.exit_code(30) == 2
    finally:
        if process.proc.returncode is None:  # it started after all: the guard failed
            process.proc.kill()
    assert process.stderr == [
        f"semif-serve: SEMIF_PID_FILE {path} names process {os.getpid()}, which is running: "
        "another server uses this file (stop it, or give this one its own SEMIF_PID_FILE)\n"
    ]
    assert path.read_text() == f"{os.getpid()}\n"  # left to its owner


def gone_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("stale", ["a process that is gone", "this very process", "no pid"])
async def test_a_stale_file_is_replaced(tmp_path: Path, stale: str) -> None:
    path = tmp_path / "semif.pid"
    before = {
        "a process that is gone": f'echo {gone_pid()} > "$SEMIF_PID_FILE"',
        "this very process": 'echo $$ > "$SEMIF_PID_FILE"',  # `exec` keeps the pid: PID 1 restarted
        "no pid": 'echo oops > "$SEMIF_PID_FILE"',
    }[stale]
    process = await Process.launch(before=before, SEMIF_PID_FILE=str(path))
    await asyncio.wait_for(process.wait_for_line("listening"), 30)
    try:
        assert path.read_text() == f"{process.proc.pid}\n"
    finally:
        assert await stopped(process) == 0
    assert not path.exists()


def test_exit_leaves_a_file_that_names_another_process(tmp_path: Path) -> None:
    path = tmp_path / "semif.pid"
    path.write_text("1\n")
    pid_file.remove(str(path))
    assert path.read_text() == "1\n"
