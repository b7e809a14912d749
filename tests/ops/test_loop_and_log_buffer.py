"""The perf levers: the event loop the process runs (uvloop from the `fast` extra, or asyncio) and
the buffered access log. On a real socket and a real process: each loop serves /health and
/decide and the startup line names it; buffered access lines reach stderr within the flush
interval while the server idles, and none is lost at SIGTERM. The handler's buffering rules
themselves (what waits, what forces a write, the size limit) are checked on a StringIO."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import io
import json
import logging
import os
import signal
from collections.abc import AsyncIterator

import pytest

from semif_serve import config
from semif_serve.ops.logs import ACCESS_LOGGER, BufferedStreamHandler
from tests.request_bodies import ROW
from tests.served_process import Process
from tests.wire_client import TOKEN, request

AUTH = [(b"authorization", b"Bearer " + TOKEN.encode())]


@contextlib.asynccontextmanager
async def served(**env: str) -> AsyncIterator[Process]:
    """A server process that is killed if the test fails before it exits by itself."""
    process = await Process.start(**env)
    try:
        yield process
    finally:
        if process.proc.returncode is None:
            process.proc.kill()
            await process.proc.wait()


def _need_uvloop() -> None:
    """uvloop comes with the test extra: in CI its absence is a failure, elsewhere a skip."""
    if importlib.util.find_spec("uvloop") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("uvloop is missing: pip install -e '.[test]' brings it")
        pytest.skip("uvloop is not installed (pip install 'semif-serve[fast]')")


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_each_event_loop_serves_on_a_real_socket_and_says_which_runs(loop: str) -> None:
    if loop == "uvloop":
        _need_uvloop()
    async with served(SEMIF_EVENT_LOOP=loop) as process:
        listening = next(line for line in process.stderr if "listening" in line)
        assert f"event loop {loop}" in listening
        health = await request(process.port, "GET", "/health", headers=[])
        assert health.status == 200
        decided = await request(process.port, "POST", "/decide", ROW, headers=AUTH)
        assert decided.status == 200 and decided.json["id"] == ROW["id"]
        process.proc.send_signal(signal.SIGTERM)
        assert await process.exit_code(10) == 0


def _access_ids(lines: list[str]) -> list[str]:
    records = [json.loads(line) for line in lines]
    return [record["request_id"] for record in records if record["logger"] == ACCESS_LOGGER]


async def test_a_buffered_access_line_arrives_within_the_flush_interval_while_idle() -> None:
    # 1 s: the longest interval allowed. Nothing else is logged after the request, so only the
    # event loop's flush timer can write the line before shutdown.
    async with served(SEMIF_LOG_FORMAT="json", SEMIF_LOG_FLUSH_S="1") as process:
        response = await request(
            process.port, "GET", "/health", headers=[(b"x-request-id", b"timer-1")]
        )
        assert response.status == 200
        line = await asyncio.wait_for(process.wait_for_line('"timer-1"'), 1.0 + 2.0)
        assert json.loads(line)["logger"] == ACCESS_LOGGER
        process.proc.send_signal(signal.SIGTERM)
        assert await process.exit_code(10) == 0


async def test_no_access_line_is_lost_at_sigterm() -> None:
    # The in-flight call ends during the drain, after the last other record ("shutting down"), so
    # only the flush at exit can write its line; the burst before it exercises the buffer.
    async with served(
        SEMIF_LOG_FORMAT="json", SEMIF_LOG_FLUSH_S="1", SEMIF_STUB_DELAY_MS="1500"
    ) as process:
        sent = [f"burst-{index}" for index in range(40)]
        for request_id in sent:
            response = await request(
                process.port, "GET", "/health", headers=[(b"x-request-id", request_id.encode())]
            )
            assert response.status == 200
        in_flight = asyncio.ensure_future(
            request(
                process.port,
                "POST",
                "/decide",
                ROW,
                headers=[*AUTH, (b"x-request-id", b"drained-1")],
            )
        )
        await asyncio.wait_for(process.in_flight(), 5)
        process.proc.send_signal(signal.SIGTERM)
        assert (await asyncio.wait_for(in_flight, 10)).status == 200
        assert await process.exit_code(10) == 0
        logged = [
            request_id for request_id in _access_ids(process.stderr) if not request_id.isalnum()
        ]
        assert logged == [
            *sent,
            "drained-1",
        ]  # every one, once, in order (the in_flight() probes aside)


def _record(name: str, message: str) -> logging.LogRecord:
    return logging.LogRecord(name, logging.INFO, __file__, 0, message, None, None)


def test_access_lines_wait_and_any_other_record_writes_them_first_in_order() -> None:
    stream = io.StringIO()
    handler = BufferedStreamHandler(stream, buffered=True)
    handler.handle(_record(ACCESS_LOGGER, "a1"))
    handler.handle(_record(ACCESS_LOGGER, "a2"))
    assert stream.getvalue() == ""
    handler.handle(_record("semif_serve.server", "shutting down"))
    assert stream.getvalue() == "a1\na2\nshutting down\n"
    handler.handle(_record(ACCESS_LOGGER, "a3"))
    handler.flush()
    assert stream.getvalue().endswith("shutting down\na3\n")


def test_the_buffer_is_written_once_it_passes_its_size_and_unbuffered_writes_each_line() -> None:
    stream = io.StringIO()
    handler = BufferedStreamHandler(stream, buffered=True, limit=20)
    handler.handle(_record(ACCESS_LOGGER, "x" * 9))
    assert stream.getvalue() == ""
    handler.handle(_record(ACCESS_LOGGER, "y" * 9))  # 20 bytes with the newlines: at the limit
    assert stream.getvalue() == "x" * 9 + "\n" + "y" * 9 + "\n"
    plain = io.StringIO()
    unbuffered = BufferedStreamHandler(plain, buffered=False)
    unbuffered.handle(_record(ACCESS_LOGGER, "now"))
    assert plain.getvalue() == "now\n"


@pytest.mark.parametrize(
    "name, value",
    [
        ("SEMIF_LOG_FLUSH_S", "1.5"),
        ("SEMIF_LOG_FLUSH_S", "-0.1"),
        ("SEMIF_LOG_FLUSH_S", "nan"),
        ("SEMIF_LOG_FLUSH_S", "soon"),
        ("SEMIF_EVENT_LOOP", "trio"),
    ],
)
def test_bad_loop_and_flush_settings_are_refused_by_name(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        config.load({"SEMIF_API_TOKEN": TOKEN, name: value})


def test_flush_and_loop_settings_resolve() -> None:
    settings = config.load(
        {"SEMIF_API_TOKEN": TOKEN, "SEMIF_LOG_FLUSH_S": "0", "SEMIF_EVENT_LOOP": "asyncio"}
    )
    assert (settings.log_flush_s, settings.event_loop) == (0.0, "asyncio")
    auto = config.load({"SEMIF_API_TOKEN": TOKEN})
    assert auto.log_flush_s == 0.5
    assert auto.event_loop == ("uvloop" if importlib.util.find_spec("uvloop") else "asyncio")
