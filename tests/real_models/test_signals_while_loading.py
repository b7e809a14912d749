"""A signal while the real tiny model loads, on a real process: SIGHUP never kills it (it is logged,
then applied once the server is ready, re-reading what changed meanwhile); SIGTERM still stops it at
once, as before it is ready it always has."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.request_bodies import ROW
from tests.served_process import Process, replace
from tests.wire_client import request

OLD = "old-" + "o" * 32
NEW = "new-" + "n" * 32
HELD = "SIGHUP before the server is ready"


def bearer(token: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", b"Bearer " + token.encode())]


async def launched(tiny_built: dict[str, str], tokens: Path) -> Process:
    replace(tokens, f"svc {OLD}\n")
    return await Process.launch(
        without=("SEMIF_API_TOKEN",),
        **tiny_built,
        SEMIF_API_TOKENS_FILE=str(tokens),
        SEMIF_LOG_FLUSH_S="0",
        OMP_NUM_THREADS="1",
    )


async def stopped(process: Process) -> int:
    if process.proc.returncode is None:
        process.proc.send_signal(signal.SIGTERM)
    return await process.exit_code(30)


@pytest.mark.parametrize("when", ["one second after start", "between settings and listening"])
async def test_a_sighup_while_starting_is_applied_once_ready_and_kills_nothing(
    tiny_built: dict[str, str], tmp_path: Path, when: str
) -> None:
    tokens = tmp_path / "tokens"
    process = await launched(tiny_built, tokens)
    try:
        if when == "one second after start":
            await asyncio.sleep(1.0)
        else:
            await asyncio.wait_for(process.wait_for_line("effective settings"), 60)
        replace(tokens, f"svc {NEW}\n")  # changed after startup read it: the SIGHUP asks for it
        process.proc.send_signal(signal.SIGHUP)
        await asyncio.wait_for(process.wait_for_line(HELD), 60)
        await asyncio.wait_for(process.wait_for_line("listening"), 60)
        served = await request(process.port, "POST", "/decide", ROW, bearer(NEW))
        assert served.status == 200, served.body
        assert (await request(process.port, "POST", "/decide", ROW, bearer(OLD))).status == 401
    finally:
        code = await stopped(process)
    assert code == 0, "".join(process.stderr)
    applied = [line for line in process.stderr if "SIGHUP: applying" in line or "reloaded" in line]
    assert len(applied) == 2 and "applying" in applied[0], (
        applied
    )  # once, before the listening line


@pytest.mark.parametrize("when", ["one second after start", "between settings and listening"])
async def test_a_sigterm_while_starting_still_stops_it_at_once(
    tiny_built: dict[str, str], tmp_path: Path, when: str
) -> None:
    process = await launched(tiny_built, tmp_path / "tokens")
    if when == "one second after start":
        await asyncio.sleep(1.0)
    else:
        await asyncio.wait_for(process.wait_for_line("effective settings"), 60)
    process.proc.send_signal(signal.SIGTERM)
    assert await process.exit_code(10) == -signal.SIGTERM
    assert not any("listening" in line for line in process.stderr)
