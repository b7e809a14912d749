"""Graceful shutdown: stop accepting, refuse new work, finish or answer what is in progress.

First in-process against Server.shutdown (fast, scripted scorer), then the real thing:
`python -m semif_serve` on the stub scorer, stopped with SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import signal
import threading

import pytest

from semif_serve.http.connection import LINGER_S
from tests.http.memory import settle
from tests.request_bodies import POST, ROW
from tests.served_process import Process
from tests.wire_client import (
    HEALTH,
    TOKEN,
    Connection,
    eventually,
    no_error_logs,  # noqa: F401 - fixture
    parse_responses,
    raw_request,
    request,
)

pytestmark = pytest.mark.usefixtures("no_error_logs")


async def begin_shutdown(server) -> asyncio.Future:
    """Start draining and return once it has stopped accepting (its first step runs synchronously)."""
    stopping = asyncio.ensure_future(server.shutdown())
    await asyncio.sleep(0)
    assert server.drain.active
    return stopping


async def assert_refused(port: int) -> None:
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)


async def refused_soon(port: int, timeout: float = 2.0) -> None:
    """New connections are refused once the listener closes; one that raced it in is never served."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except ConnectionRefusedError:
            return
        writer.write(HEALTH)
        try:
            data = await asyncio.wait_for(reader.read(), 2)
        except ConnectionResetError:
            data = b""
        writer.close()
        assert [r.code for r in parse_responses(data, strict=True)] in ([], ["shutting_down"])
    raise AssertionError("new connections were still accepted")


# -- in process -----------------------------------------------------------------------------------


async def scoring(server, fake) -> Connection:
    """A connection whose POST is inside the scorer, held there until `fake.gate` is set."""
    fake.gate = threading.Event()
    busy = await Connection.open(server.port)
    busy.writer.write(POST)
    await fake.wait_entered()
    return busy


async def test_in_flight_calls_finish_and_idle_connections_close(start_server, fake) -> None:
    server = await start_server(fake, shutdown_grace=5.0)
    busy = await scoring(server, fake)
    idle = await Connection.open(server.port)
    assert (await idle.request("GET", "/health", headers=[])).status == 200
    stopping = await begin_shutdown(server)
    assert await idle.closed_by_peer(
        timeout=1.0
    )  # nothing in progress there: closed at once, no response
    await assert_refused(server.port)
    fake.gate.set()
    response = await busy.read_response()
    assert response.status == 200 and response.json["id"] == ROW["id"]
    assert (
        response.headers[b"connection"] == b"close"
    )  # the client learns nothing more is answered here
    assert await busy.closed_by_peer()
    await asyncio.wait_for(stopping, 2)
    assert not server.connections and server.service.admission.in_progress == 0


@pytest.mark.parametrize(
    "sent", [POST, raw_request(b"GET", b"/v1/models")], ids=["POST /decide", "GET /v1/models"]
)
async def test_a_request_begun_before_the_drain_and_finished_after_gets_503(
    start_server, fake, sent
) -> None:
    """Every route behind the bearer: a POST, and the System One model list."""
    server = await start_server(fake, shutdown_grace=5.0)
    connection = await Connection.open(server.port)
    connection.writer.write(sent[:10])  # a head in progress keeps the connection through the drain
    await eventually(lambda: any(not c.closable for c in server.connections.values()))
    stopping = await begin_shutdown(server)
    connection.writer.write(sent[10:])
    response = await connection.read_response()
    assert response.status == 503 and response.code == "shutting_down"
    assert response.headers[b"connection"] == b"close" and await connection.closed_by_peer()
    assert fake.calls == []
    await asyncio.wait_for(stopping, 2)


async def test_health_reports_draining_503_while_an_in_flight_request_still_gets_its_200(
    start_server, fake
) -> None:
    server = await start_server(fake, shutdown_grace=5.0)
    busy = await scoring(server, fake)
    probe = await Connection.open(server.port)
    probe.writer.write(
        HEALTH[:10]
    )  # a probe whose head is in progress keeps its connection through the drain
    await eventually(lambda: sum(not c.closable for c in server.connections.values()) == 2)
    stopping = await begin_shutdown(server)
    probe.writer.write(HEALTH[10:])
    readiness = await probe.read_response()
    assert readiness.status == 503 and readiness.json["status"] == "draining"
    assert readiness.json["in_progress"] == 1 and readiness.headers[b"connection"] == b"close"
    fake.gate.set()
    response = await busy.read_response()
    assert response.status == 200 and response.json["id"] == ROW["id"]
    await asyncio.wait_for(stopping, 2)


async def test_requests_pipelined_behind_an_in_flight_one_are_not_answered_after_close(
    start_server, fake
) -> None:
    server = await start_server(fake, shutdown_grace=5.0)
    fake.gate = threading.Event()
    connection = await Connection.open(server.port)
    connection.writer.write(POST + HEALTH)
    await fake.wait_entered()
    stopping = await begin_shutdown(server)
    fake.gate.set()
    data = await asyncio.wait_for(connection.reader.read(), 2)
    (response,) = parse_responses(data, strict=True)
    assert response.status == 200 and response.headers[b"connection"] == b"close"
    await asyncio.wait_for(stopping, 2)


async def test_when_the_grace_runs_out_a_call_in_progress_gets_503_not_silence(
    start_server, fake
) -> None:
    """The grace on a real socket and the loop's clock (each stage in memory below)."""
    server = await start_server(fake, shutdown_grace=0.3)
    fake.gate = threading.Event()
    connection = await Connection.open(server.port)
    connection.writer.write(POST)
    await fake.wait_entered()
    stopping = await begin_shutdown(server)
    response = await connection.read_response(timeout=2)
    assert response.status == 503 and response.code == "shutting_down"
    assert response.headers[b"connection"] == b"close" and await connection.closed_by_peer()
    fake.gate.set()
    await asyncio.wait_for(stopping, 3)
    assert server.service.admission.in_progress == 0


# -- in memory: what the wire answers when shutdown's grace ends it (its task cancelled) ----------


@pytest.mark.parametrize("stage", ["scoring", "reading the body", "reading the head"])
async def test_a_connection_cancelled_with_work_in_progress_answers_503_not_silence(
    memory_server, fake, stage
) -> None:
    memory = await memory_server(header_timeout=10.0, body_timeout=10.0)
    fake.gate = threading.Event()
    wire = await memory.connect()
    if stage == "scoring":
        await wire.channel.send(POST)
        await fake.wait_entered()
    elif stage == "reading the body":
        await wire.channel.send(POST[:-10])
        assert memory.server.service.admission.in_progress == 1
    else:
        await wire.channel.send(POST[:10])
    assert not wire.connection.closable
    memory.drain.begin()
    wire.task.cancel()
    await settle()
    (response,) = wire.channel.responses()
    assert response.status == 503 and response.code == "shutting_down"
    assert response.headers[b"connection"] == b"close" and wire.done and wire.channel.is_closed
    fake.gate.set()
    await eventually(lambda: memory.server.service.admission.in_progress == 0)


@pytest.mark.parametrize("sent", [HEALTH[:10], HEALTH], ids=["part of a head", "a whole head"])
async def test_a_head_that_arrived_while_the_task_slept_is_answered_503_not_dropped(
    memory_server, sent
) -> None:
    """The channel reports the bytes as they arrive (BUFFERED), before the wire's task wakes to read
    them: shutdown may not close the connection as idle, and the grace's end answers it 503
    with a lingering close, as it does a head the wire has begun reading."""
    memory = await memory_server()
    wire = await memory.connect()
    await wire.channel.send(HEALTH)
    wire.channel.arrive(sent)  # no turn of the loop: the wire has not read it
    assert not wire.connection.closable
    memory.drain.begin()
    wire.task.cancel()
    await settle()
    first, second = wire.channel.responses()
    assert first.status == 200
    assert second.status == 503 and second.code == "shutting_down"
    assert wire.done and wire.channel.linger == LINGER_S


async def test_a_connection_cancelled_between_requests_closes_without_a_word(
    memory_server,
) -> None:
    memory = await memory_server()
    wire = await memory.connect()
    await wire.channel.send(HEALTH)
    assert wire.connection.closable
    wire.task.cancel()
    await settle()
    assert len(wire.channel.responses()) == 1 and wire.done and wire.channel.linger == 0.0


# -- the real process -----------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_drains_the_process_and_it_exits_0(sig) -> None:
    process = await Process.start(SEMIF_STUB_DELAY_MS="3000")
    in_flight = asyncio.ensure_future(request(process.port, "POST", "/decide", ROW))
    await asyncio.wait_for(process.in_flight(), 5)
    process.proc.send_signal(sig)
    await asyncio.wait_for(process.wait_for_line("shutting down"), 5)
    await refused_soon(process.port)
    assert not in_flight.done()  # refused while a call was still in flight
    response = await asyncio.wait_for(in_flight, 5)
    assert response.status == 200 and response.json["id"] == ROW["id"]
    assert await process.exit_code(5) == 0
    output = "".join(process.stderr)
    assert "Traceback" not in output and TOKEN not in output


async def test_when_the_grace_runs_out_the_process_answers_503_and_exits_0_promptly() -> None:
    process = await Process.start(SEMIF_STUB_DELAY_MS="6000", SEMIF_SHUTDOWN_GRACE_S="0.5")
    in_flight = asyncio.ensure_future(request(process.port, "POST", "/decide", ROW))
    await asyncio.wait_for(process.in_flight(), 5)
    began = asyncio.get_running_loop().time()
    process.proc.send_signal(signal.SIGTERM)
    response = await asyncio.wait_for(in_flight, 3)
    assert response.status == 503 and response.code == "shutting_down"
    assert await process.exit_code(10) == 0
    assert asyncio.get_running_loop().time() - began < 3.0  # not held until the 6 s call ends
    output = "".join(process.stderr)
    assert "Traceback" not in output and TOKEN not in output
