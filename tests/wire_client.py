"""A small HTTP/1.1 client for tests: h11 in client mode over a real socket.

Parsing responses with h11's client side keeps the tests independent of the
server's own code while still reading exactly what went over the wire.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import h11
import pytest

TOKEN = "t" * 16 + "0123456789abcdef-~!"
AUTH = (b"authorization", b"Bearer " + TOKEN.encode())
AUTH_LINE = b"authorization: Bearer " + TOKEN.encode() + b"\r\n"
HEALTH = b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"
GENERATED = re.compile(rb"[0-9a-f]{32}")  # a request id the server made up


@dataclass
class Response:
    status: int
    headers: dict[bytes, bytes]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def code(self) -> str:
        return self.json["error"]["code"]


class Connection:
    """One keep-alive client connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.h11 = h11.Connection(h11.CLIENT)

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def send_request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        fields = [(b"host", b"test"), *(headers if headers is not None else [AUTH])]
        if body is not None and not any(
            k.lower() in (b"content-length", b"transfer-encoding") for k, _ in fields
        ):
            fields.append((b"content-length", str(len(body)).encode()))
        out = self.h11.send(h11.Request(method=method, target=path, headers=fields))
        if body is not None:
            out += self.h11.send(h11.Data(data=body))
        out += self.h11.send(h11.EndOfMessage())
        self.writer.write(out)

    async def read_response(self, timeout: float = 10.0) -> Response:
        _expect_response(self.h11)
        status, headers, chunks = 0, {}, []
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                self.h11.receive_data(await asyncio.wait_for(self.reader.read(65536), timeout))
                continue
            if isinstance(event, h11.Response):
                status, headers = event.status_code, {k: v for k, v in event.headers}
            elif isinstance(event, h11.Data):
                chunks.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                break
            elif event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                raise ConnectionError("no further response on this connection")
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
        return Response(status, headers, b"".join(chunks))

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: list[tuple[bytes, bytes]] | None = None,
        timeout: float = 10.0,
    ) -> Response:
        raw = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        self.send_request(method, path, raw, headers)
        return await self.read_response(timeout)

    async def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the server closed the connection (EOF), after any response bytes."""
        while True:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            if not data:
                return True

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except ConnectionError:
            pass


async def request(
    port: int,
    method: str,
    path: str,
    body: Any = None,
    headers: list[tuple[bytes, bytes]] | None = None,
    timeout: float = 10.0,
) -> Response:
    """One request on a fresh connection; timeout: seconds to wait for each read of the answer."""
    connection = await Connection.open(port)
    try:
        return await connection.request(method, path, body, headers, timeout)
    finally:
        await connection.close()


async def assert_serving(port: int) -> None:
    """The server still answers a fresh connection normally."""
    response = await request(port, "GET", "/health", headers=[])
    assert response.status == 200 and response.json["status"] == "ok"


async def eventually(predicate: Callable[[], bool], timeout: float = 2.0) -> None:
    """Poll server state that has no event to await (admission counts); fail after the timeout."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.01)


async def connections_closed(server: Any, timeout: float = 2.0) -> None:
    """Wait until every connection the server holds has finished (it noticed a close on its own)."""
    if server.connections:
        await asyncio.wait(set(server.connections), timeout=timeout)
    assert not server.connections


def raw_request(
    method: bytes = b"POST",
    target: bytes = b"/decide",
    fields: bytes = b"",
    body: bytes = b"",
    auth: bool = True,
) -> bytes:
    """One request framed by hand: `fields` (CRLF-terminated lines) decide the framing, not this helper."""
    return (
        method
        + b" "
        + target
        + b" HTTP/1.1\r\nhost: x\r\n"
        + (AUTH_LINE if auth else b"")
        + fields
        + b"\r\n"
        + body
    )


@dataclass
class Exchange:
    """What the server sent on one raw connection, and whether it closed it (EOF or reset)."""

    data: bytes
    closed: bool


async def raw_session(port: int, data: bytes, timeout: float = 5.0) -> Exchange:
    """Send raw bytes, read until the server closes or the timeout passes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    received, closed = b"", True
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), timeout):
            received += chunk
    except TimeoutError:
        closed = False
    except ConnectionError:
        pass
    finally:
        writer.close()
    return Exchange(received, closed)


async def raw_responses(
    port: int, data: bytes, count: int, timeout: float = 5.0, linger: float = 0.3
) -> Exchange:
    """Send raw bytes and read until `count` complete responses arrived (or EOF), failing after
    `timeout`; then read up to `linger` seconds more, so an EOF (or a stray response) that
    follows them is seen. It waits on the responses, not on the clock: a slow machine only
    makes it slower, and a connection it reports open is one the server did not close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    received, closed = b"", False
    try:
        async with asyncio.timeout(timeout):
            while len(parse_responses(received)) < count:
                chunk = await reader.read(65536)
                if not chunk:
                    closed = True
                    break
                received += chunk
        if not closed:
            try:
                more = await asyncio.wait_for(reader.read(65536), linger)
                closed, received = not more, received + more
            except TimeoutError:
                pass
    except ConnectionError:
        closed = True
    finally:
        writer.close()
    return Exchange(received, closed)


async def raw_exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes, read until the server closes (or the timeout), return all it sent."""
    return (await raw_session(port, data, timeout)).data


def parse_responses(data: bytes, strict: bool = False) -> list[Response]:
    """Every complete response in a raw byte stream, in order; `strict`: no partial or stray bytes after them."""
    conn = h11.Connection(h11.CLIENT)
    if data:  # receive_data(b"") would mean EOF
        conn.receive_data(data)
    responses: list[Response] = []
    while (response := _next_response(conn)) is not None:
        responses.append(response)
        if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
            break
        conn.start_next_cycle()
    if strict:
        assert not conn.trailing_data[0], (
            f"bytes after the last complete response: {conn.trailing_data[0][:80]!r}"
        )
    return responses


def _expect_response(conn: h11.Connection) -> None:
    """Requests written raw leave our side IDLE: pretend we sent a GET so h11 accepts the next response."""
    if conn.our_state is h11.IDLE:
        conn.send(h11.Request(method="GET", target="/", headers=[(b"host", b"x")]))
        conn.send(h11.EndOfMessage())


def _next_response(conn: h11.Connection) -> Response | None:
    """The next response on a client connection fed with raw bytes, or None when there is none."""
    _expect_response(conn)
    status, headers, chunks = 0, {}, []
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA or isinstance(event, h11.ConnectionClosed):
            return None
        if isinstance(event, h11.Response):
            status, headers = event.status_code, dict(event.headers)
        elif isinstance(event, h11.Data):
            chunks.append(event.data)
        elif isinstance(event, h11.EndOfMessage):
            return Response(status, headers, b"".join(chunks))


@pytest.fixture
def no_error_logs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Fail the test if anything logged an ERROR, such as an unhandled exception in a connection task."""
    yield
    records = [r for when in ("setup", "call", "teardown") for r in caplog.get_records(when)]
    errors = [f"{r.name}: {r.getMessage()}" for r in records if r.levelno >= logging.ERROR]
    assert errors == []
