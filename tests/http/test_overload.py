"""Overload: the connection cap, admission accounting, clients that leave, and slow clients.

Open connections are capped (SEMIF_MAX_CONNECTIONS) and in-progress POSTs are capped
(SEMIF_MAX_QUEUE); neither count may leak when a client leaves at any point, and
hundreds of slow sockets cannot keep /health from answering.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import socket
import threading

import pytest

from tests.request_bodies import BODY, POST, ROW
from tests.wire_client import (
    HEALTH,
    Connection,
    assert_serving,
    connections_closed,
    eventually,
    no_error_logs,  # noqa: F401 - fixture
    parse_responses,
    raw_request,
    raw_session,
    request,
)

pytestmark = pytest.mark.usefixtures("no_error_logs")


async def held(port: int, count: int) -> list[Connection]:
    """`count` kept-alive connections, each proven registered by one answered request."""
    connections = [await Connection.open(port) for _ in range(count)]
    for connection in connections:
        assert (await connection.request("GET", "/health", headers=[])).status == 200
    return connections


# -- the connection cap ---------------------------------------------------------------------------


@pytest.mark.parametrize("sent", [b"", HEALTH, POST])
async def test_over_the_cap_a_connection_gets_a_canned_503_and_is_closed_at_once(
    start_server, fake, sent
) -> None:
    server = await start_server(fake, max_connections=3, header_timeout=5.0)
    connections = await held(server.port, 3)
    began = asyncio.get_running_loop().time()
    exchange = await raw_session(server.port, sent, timeout=4.0)
    assert (
        exchange.closed and asyncio.get_running_loop().time() - began < 2.5
    )  # well before the 5 s head deadline
    (response,) = parse_responses(exchange.data, strict=True)
    assert response.status == 503 and response.code == "too_many_connections"
    assert response.headers[b"connection"] == b"close"
    assert fake.calls == [] and len(server.connections) == 3
    for connection in connections:
        await connection.close()


async def test_a_freed_slot_serves_the_next_connection(start_server, fake) -> None:
    server = await start_server(fake, max_connections=2)
    (first,) = await held(server.port, 1)
    (first_task,) = server.connections
    (second,) = await held(server.port, 1)
    assert (await request(server.port, "GET", "/health", headers=[])).status == 503
    await first.close()
    await asyncio.wait({first_task}, timeout=2)
    await assert_serving(server.port)
    assert (await second.request("POST", "/decide", ROW)).status == 200
    await second.close()


async def test_idle_sockets_over_the_cap_hold_it_only_until_the_header_timeout(
    start_server, fake
) -> None:
    server = await start_server(fake, max_connections=50, header_timeout=0.5)
    sockets = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(200)]
    refused = await request(server.port, "GET", "/health", headers=[])
    assert refused.status == 503 and refused.code == "too_many_connections"
    await connections_closed(server)  # the 50 admitted ones reach their header deadline
    await assert_serving(server.port)
    for _, writer in sockets:
        writer.close()


# -- slow clients ---------------------------------------------------------------------------------


async def test_hundreds_of_slow_sockets_do_not_starve_health(start_server, fake) -> None:
    """100 heads dribbled a byte at a time and 100 stalled bodies; /health answers throughout.

    The slow sockets' deadlines (12 s) lie well past the 2 s of probing, so a /health that
    waited behind them would take seconds; a served one takes milliseconds. The 2.5 s
    bound sits between the two, with seconds of slack either way on a loaded machine.
    """
    server = await start_server(fake, header_timeout=12.0, body_timeout=12.0)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    async def dribble_head() -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", server.port)
        for byte in POST:
            if stop.is_set():
                break
            writer.write(bytes([byte]))
            await asyncio.sleep(0.05)
        writer.close()

    async def stall_body() -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(POST[:-10])
        await stop.wait()
        writer.close()

    slow = [asyncio.ensure_future(dribble_head()) for _ in range(100)]
    slow += [asyncio.ensure_future(stall_body()) for _ in range(100)]
    await eventually(lambda: len(server.connections) >= 190, timeout=6.0)
    latencies = []
    until = loop.time() + 2.0
    while loop.time() < until:
        began = loop.time()
        assert (
            await asyncio.wait_for(request(server.port, "GET", "/health", headers=[]), 2.5)
        ).status == 200
        latencies.append(loop.time() - began)
        await asyncio.sleep(0.1)
    stop.set()
    await asyncio.gather(*slow)
    await connections_closed(server, timeout=3.0)
    assert len(latencies) >= 2 and max(latencies) < 2.5
    assert fake.calls == [] and server.service.admission.in_progress == 0


# -- admission ------------------------------------------------------------------------------------


async def test_429_accounting_admits_exactly_max_queue_and_returns_to_zero(
    start_server, fake
) -> None:
    server = await start_server(fake, max_queue=2)
    fake.gate = threading.Event()
    for _ in range(2):  # twice: a leaked slot would show on the second round
        fake.calls.clear()
        fake.entered.clear()
        admitted = [
            asyncio.ensure_future(request(server.port, "POST", "/decide", ROW)) for _ in range(2)
        ]
        await fake.wait_entered()
        await eventually(lambda: server.service.admission.in_progress == 2)
        refused = await asyncio.gather(
            *(
                request(server.port, "POST", path, body)
                for path, body in [("/decide", ROW)] * 3
                + [("/decide/shared", {"state": "s", "decisions": [ROW]})]
            )
        )
        assert [(r.status, r.code) for r in refused] == [(429, "busy")] * 4
        health = await request(server.port, "GET", "/health", headers=[])
        assert health.status == 200 and health.json["in_progress"] == 2
        fake.gate.set()
        assert [r.status for r in await asyncio.gather(*admitted)] == [200, 200]
        fake.gate.clear()
        assert len(fake.calls) == 2 and server.service.admission.in_progress == 0


@pytest.mark.parametrize(
    "fields",
    [b"content-encoding: gzip\r\ncontent-length: 0\r\n", b"content-length: 2000000\r\n"],
    ids=["415-no-body", "413-declared"],
)
async def test_a_refusal_after_admission_frees_its_slot_and_closes(
    start_server, fake, fields
) -> None:
    """The checks after the slot is taken (declared length, coding) give it back, and close even with no body."""
    server = await start_server(fake, max_queue=1)
    for _ in range(2):  # a leaked slot would make the second one a 429
        exchange = await raw_session(server.port, raw_request(fields=fields))
        (response,) = parse_responses(exchange.data)
        assert (
            response.status in (413, 415)
            and response.headers[b"connection"] == b"close"
            and exchange.closed
        )
    assert server.service.admission.in_progress == 0 and fake.calls == []
    assert (await request(server.port, "POST", "/decide", ROW)).status == 200


async def test_a_client_that_leaves_while_queued_never_reaches_the_scorer(
    start_server, fake
) -> None:
    server = await start_server(fake)
    fake.gate = threading.Event()
    first = asyncio.ensure_future(request(server.port, "POST", "/decide", {**ROW, "id": "first"}))
    await fake.wait_entered()
    (first_task,) = server.connections
    queued = await Connection.open(server.port)
    queued.send_request("POST", "/decide", json.dumps({**ROW, "id": "queued"}).encode())
    await eventually(lambda: server.service.admission.in_progress == 2)
    (queued_task,) = set(server.connections) - {first_task}
    await queued.close()
    await asyncio.wait({queued_task}, timeout=2)
    assert (
        queued_task.done() and server.service.admission.in_progress == 1
    )  # freed while the first still scores
    fake.gate.set()
    assert (await first).status == 200
    assert (await request(server.port, "POST", "/decide", {**ROW, "id": "after"})).status == 200
    assert [row["id"] for _, row in fake.calls] == ["first", "after"]
    assert server.service.admission.in_progress == 0


@pytest.mark.parametrize(
    "outcome",
    [
        None,
        RuntimeError("the scorer failed after its caller left"),
    ],
)
async def test_a_client_that_leaves_while_scoring_frees_its_slot_when_the_call_returns(
    start_server, fake, caplog, outcome
) -> None:
    server = await start_server(fake, max_queue=1)
    fake.gate = threading.Event()
    fake.raise_ = outcome
    leaving = await Connection.open(server.port)
    leaving.send_request("POST", "/decide", BODY)
    await fake.wait_entered()
    (task,) = server.connections
    await leaving.close()
    busy = await request(server.port, "POST", "/decide", ROW)
    assert busy.status == 429  # the call still holds the scorer, so it still holds the slot
    assert not task.done()
    fake.gate.set()
    await asyncio.wait({task}, timeout=2)
    assert task.done() and server.service.admission.in_progress == 0
    fake.raise_ = None
    assert (await request(server.port, "POST", "/decide", ROW)).status == 200
    gc.collect()  # an abandoned future whose exception nobody read logs now
    noise = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert noise == []


async def test_a_client_that_never_reads_its_responses_cannot_hold_a_connection(
    start_server, fake
) -> None:
    """Pipelined requests whose answers fill the socket buffers: the send deadline ends the connection."""
    server = await start_server(fake, idle_timeout=0.5)
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(
        socket.SOL_SOCKET, socket.SO_RCVBUF, 4096
    )  # before connect, so the window stays small
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", server.port))
    flood = asyncio.ensure_future(loop.sock_sendall(sock, HEALTH * 20_000))  # never reads a byte
    try:
        await eventually(lambda: len(server.connections) == 1)
        await connections_closed(server, timeout=5.0)
    finally:
        flood.cancel()
        sock.close()
    await assert_serving(server.port)


async def test_a_reply_the_client_does_not_read_ends_the_connection_exactly_at_the_idle_timeout(
    memory_server,
) -> None:
    """The send deadline on the fake clock (the socket above fills real buffers): a write the
    client does not take waits SEMIF_IDLE_TIMEOUT_S from the reply, not a tick less, and no longer."""
    memory = await memory_server(idle_timeout=2.0)
    wire = await memory.connect()
    wire.channel.unread = True
    await wire.channel.send(HEALTH)
    await memory.clock.advance(1.0)
    await wire.channel.send(HEALTH)  # not answered: the wire still waits on the first reply
    await memory.clock.advance(1.0 - 0.001)
    assert not wire.done and not wire.channel.is_closed
    await memory.clock.advance(0.002)
    assert wire.done and wire.channel.is_closed
    assert [r.status for r in wire.channel.responses()] == [200]  # written, never taken
