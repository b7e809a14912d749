"""The channel's rules (semif_serve/http/channel.py), on a real socket.

Rule 2: a client that leaves is noticed by a callback while its request is scored, and
a client that sent its request and left before scoring never reaches the scorer.
Rule 3: pipelined bytes that arrive while a request is scored are held up to a bound;
past it the server stops reading (the sender is pushed back), and the request in
progress is finished, not cancelled. Bytes that arrive are reported once to the wire
that asked (`on_next_bytes`), before it reads them. Plus: a
connection that fails on a bug is logged, and the server keeps serving. Each runs on both loops the server runs on: they
deliver EOF differently (tests/http/both_loops/conftest.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading

from semif_serve.http.channel import Channel
from semif_serve.http.connection import MAX_BUFFERED
from tests.request_bodies import BODY, ROW
from tests.wire_client import (
    HEALTH,
    assert_serving,
    eventually,
    parse_responses,
    raw_request,
    request,
)

FLOOD = HEALTH * 200_000  # 6.6 MB of pipelined requests, far past the bound
METRICS = b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n"


async def test_pipelined_bytes_while_scoring_are_bounded_and_the_sender_is_pushed_back(
    start_server, fake
) -> None:
    server = await start_server(fake)
    fake.gate = threading.Event()
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", server.port))
    await loop.sock_sendall(
        sock, raw_request(fields=b"content-length: %d\r\n" % len(BODY), body=BODY)
    )
    await fake.wait_entered()
    flood = asyncio.ensure_future(loop.sock_sendall(sock, FLOOD))
    try:
        (connection,) = server.connections.values()
        await eventually(lambda: connection.channel.buffered > MAX_BUFFERED)
        await asyncio.sleep(0.5)  # time for the rest to arrive, were the server still reading
        assert not flood.done()  # the kernel buffers are full: the sender waits on us
        assert connection.channel.buffered < len(FLOOD) // 4
        fake.gate.set()
        received = b""
        while b"\r\n\r\n" not in received or b"}" not in received:
            received += await asyncio.wait_for(loop.sock_recv(sock, 65536), 5)
        assert received.startswith(b"HTTP/1.1 200 ")  # finished, not cancelled
    finally:
        fake.gate.set()
        flood.cancel()
        await asyncio.wait(
            [flood]
        )  # its selector callback goes before the fd does, or a new socket inherits it
        sock.close()
    assert [kind for kind, _ in fake.calls] == ["direct"]
    await assert_serving(server.port)


async def test_a_client_that_sent_its_request_and_closed_never_reaches_the_scorer(
    start_server, fake
) -> None:
    server = await start_server(fake, max_queue=2)
    fake.gate = threading.Event()
    first = asyncio.ensure_future(request(server.port, "POST", "/decide", {**ROW, "id": "first"}))
    await fake.wait_entered()
    body = json.dumps({**ROW, "id": "left"}).encode()
    # Blocking calls, no await: the server finds the request and the EOF waiting together.
    with socket.create_connection(("127.0.0.1", server.port)) as leaving:
        leaving.sendall(raw_request(fields=b"content-length: %d\r\n" % len(body), body=body))
        leaving.shutdown(
            socket.SHUT_WR
        )  # half-closed: a request, then EOF, while the scorer is busy
        leaving.setblocking(False)
        closed = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(leaving, 65536), 5)
        assert closed == b""  # closed without an answer: nobody is left to read one
    fake.gate.set()
    assert (await first).status == 200
    assert [row["id"] for _, row in fake.calls] == ["first"]
    assert server.service.admission.in_progress == 0


async def test_a_request_read_after_the_client_sent_eof_never_reaches_the_scorer(
    start_server, fake
) -> None:
    """The EOF arrives while earlier answers wait on a slow reader; the POST behind them is then never scored."""
    server = await start_server(fake)
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(
        socket.SOL_SOCKET, socket.SO_RCVBUF, 4096
    )  # before connect, so the window stays small
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", server.port))
    await eventually(lambda: len(server.connections) == 1)
    (connection,) = server.connections.values()
    body = json.dumps({**ROW, "id": "after-eof"}).encode()
    # About 6 MB of answers: more than loopback's socket buffers hold, so the server must wait on us.
    await loop.sock_sendall(
        sock, METRICS * 3000 + raw_request(fields=b"content-length: %d\r\n" % len(body), body=body)
    )
    sock.shutdown(socket.SHUT_WR)
    await eventually(lambda: connection.channel.gone, timeout=5)
    assert (
        connection.channel.write_buffer_size() > 0
    )  # the EOF came while the server waited to write
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)  # now read it all quickly
    received = b""
    while chunk := await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), 5):
        received += chunk
    sock.close()
    responses = parse_responses(received)
    assert [r.status for r in responses] == [200] * 3000  # every GET answered, the POST not
    assert fake.calls == []


async def test_a_connection_that_fails_on_a_bug_is_logged_and_the_server_keeps_serving(
    start_server, fake, caplog
) -> None:
    server = await start_server(fake)
    real_health = server.service.health

    def broken(draining: bool = False, route: object = None) -> None:
        raise RuntimeError("a bug in the health handler")

    server.service.health = broken  # type: ignore[method-assign]
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(HEALTH)
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed without an answer
    writer.close()
    await eventually(lambda: not server.connections)
    failed = [
        r
        for r in caplog.records
        if r.getMessage() == "connection failed" and r.levelno == logging.ERROR
    ]
    assert len(failed) == 1 and "a bug in the health handler" in str(failed[0].exc_info[1])
    server.service.health = real_health  # type: ignore[method-assign]
    (response,) = parse_responses(await asyncio.wait_for(_one_health(server.port), 5))
    assert response.status == 200


async def _one_health(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(HEALTH.replace(b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n"))
    data = await reader.read()
    writer.close()
    return data


async def test_a_body_refused_mid_stream_gets_its_413_and_a_clean_close_not_a_reset(
    start_server, fake
) -> None:
    """Rule 5: the client is still sending when the 413 goes out; it reads the answer, then EOF."""
    server = await start_server(fake, max_body_bytes=1000)
    head = raw_request(fields=b"transfer-encoding: chunked\r\n")
    chunk = b"%x\r\n" % 60000 + b"x" * 60000 + b"\r\n"
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", server.port))
    sending = asyncio.ensure_future(
        loop.sock_sendall(sock, head + chunk * 100)
    )  # 6 MB, far past the limit
    received, ended = b"", None
    try:
        while data := await asyncio.wait_for(loop.sock_recv(sock, 65536), 10):
            received += data
    except ConnectionResetError as error:
        ended = error
    finally:
        await asyncio.wait([sending])  # it finished: the server read and dropped the rest
        sock.close()
    (response,) = parse_responses(received)
    assert (response.status, response.code) == (413, "request_too_large")
    assert ended is None  # EOF, not a reset
    assert sending.exception() is None
    assert fake.calls == []
    await assert_serving(server.port)


async def test_arriving_bytes_are_reported_once_before_they_are_read() -> None:
    """A bare Channel on a socket, no HTTP: how shutdown and a close learn of a head the task has not read."""
    loop = asyncio.get_running_loop()
    opened: asyncio.Future[Channel] = loop.create_future()
    reports: list[int] = []
    listener = await loop.create_server(
        lambda: Channel(MAX_BUFFERED, opened.set_result), "127.0.0.1", 0
    )
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", listener.sockets[0].getsockname()[1]
    )
    try:
        channel = await asyncio.wait_for(opened, 5)
        channel.on_next_bytes(lambda: reports.append(channel.buffered))
        writer.write(b"GET")
        await eventually(lambda: reports == [3])  # reported with the bytes held, none read
        writer.write(b" /")
        await eventually(lambda: channel.buffered == 5)
        assert reports == [3]  # once: later bytes are not reported
        channel.on_next_bytes(lambda: reports.append(-channel.buffered))
        assert reports == [3, -5]  # asked while bytes are held: at once
        assert await channel.read(1.0, 100) == b"GET /"
        channel.on_next_bytes(lambda: reports.append(channel.buffered))
        writer.write(b"x")
        await eventually(lambda: reports == [3, -5, 1])  # read empty: the next bytes are reported
    finally:
        writer.close()
        listener.close()
