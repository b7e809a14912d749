"""A small HTTP/1.1 client for tests: h11 in client mode over a real socket.

Parsing responses with h11's client side keeps the tests independent of the
server's own code while still reading exactly what went over the wire.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import h11

TOKEN = "t" * 16 + "0123456789abcdef-~!"
AUTH = (b"authorization", b"Bearer " + TOKEN.encode())


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
    async def open(cls, port: int) -> "Connection":
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def send_request(self, method: str, path: str, body: bytes | None = None, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        fields = [(b"host", b"test"), *(headers if headers is not None else [AUTH])]
        if body is not None and not any(k.lower() in (b"content-length", b"transfer-encoding") for k, _ in fields):
            fields.append((b"content-length", str(len(body)).encode()))
        out = self.h11.send(h11.Request(method=method, target=path, headers=fields))
        if body is not None:
            out += self.h11.send(h11.Data(data=body))
        out += self.h11.send(h11.EndOfMessage())
        self.writer.write(out)

    async def read_response(self, timeout: float = 10.0) -> Response:
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
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionError("closed before a response")
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
        return Response(status, headers, b"".join(chunks))

    async def request(self, method: str, path: str, body: Any = None, headers: list[tuple[bytes, bytes]] | None = None) -> Response:
        raw = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        self.send_request(method, path, raw, headers)
        return await self.read_response()

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


async def request(port: int, method: str, path: str, body: Any = None, headers: list[tuple[bytes, bytes]] | None = None) -> Response:
    """One request on a fresh connection."""
    connection = await Connection.open(port)
    try:
        return await connection.request(method, path, body, headers)
    finally:
        await connection.close()


async def raw_exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes, read until the server closes (or the timeout), return all it sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    received = b""
    try:
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), timeout)
            if not chunk:
                break
            received += chunk
    except (asyncio.TimeoutError, ConnectionError):
        pass
    finally:
        writer.close()
    return received


def parse_responses(data: bytes) -> list[Response]:
    """Every complete response in a raw byte stream, in order."""
    conn = h11.Connection(h11.CLIENT)
    responses: list[Response] = []
    conn.receive_data(data)
    while True:
        # Pretend we sent one GET per response so h11 accepts the next one.
        if conn.our_state is h11.IDLE:
            conn.send(h11.Request(method="GET", target="/", headers=[(b"host", b"x")]))
            conn.send(h11.EndOfMessage())
        status, headers, chunks = 0, {}, []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA or isinstance(event, h11.ConnectionClosed):
                return responses
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                status, headers = event.status_code, dict(event.headers)
            elif isinstance(event, h11.Data):
                chunks.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                responses.append(Response(status, headers, b"".join(chunks)))
                break
        if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
            return responses
        conn.start_next_cycle()
