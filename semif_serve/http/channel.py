"""The socket side of one connection: an asyncio.Protocol that holds what arrives until the wire asks.

Rule 1: bytes only. This module knows nothing of HTTP, h11, the service or the
log; http/connection.py turns bytes into events and decisions.
Rule 2: one reader. Only the connection's task reads, and it waits on at most one
future at a time. A peer that sends EOF or goes away wakes that reader and calls
`on_gone` at once, so a client that leaves while its request is scored is noticed
by a callback, not by a second task reading the socket. Bytes that arrive are
reported the same way, once, to a wire that asked (`on_next_bytes`): it knows a
request has begun before its task wakes to read it.
Rule 3: bounded. Bytes that arrive while nobody reads (a pipelined request during
scoring) are kept up to `limit`; past it the transport stops reading until they
are taken (back-pressure), so EOF is then not seen either: a client that floods
pipelined bytes has its request finished, never cancelled on its word.
Rule 4: writes never block the loop. `write` queues on the transport; `drain`
waits only while the transport has asked us to pause, until its timeout, and a lost
peer ends the wait.
Rule 5: a close can linger (RFC 9112 9.6). Closing a socket with unread bytes makes
the kernel send a reset, which can reach the client before it has read our last
answer (a 413 or 408 refused mid-body). Asked to linger, `closed` first half-closes
(the answer, then FIN), then reads and drops what the peer still sends until its EOF
or the linger time, and only then closes.

Theory: asyncio's stream pair needs a task blocked in `read()` to learn that the
peer left, which costs a task, a future and an `asyncio.wait` per scored request.
A Protocol is told directly (`eof_received`, `connection_lost`), the same way
uvicorn's and hypercorn's h11 protocols are.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any


def _settle(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class Channel(asyncio.Protocol):
    """One accepted connection's bytes in and out; `opened` hands it to whoever serves it."""

    def __init__(self, limit: int, opened: Callable[[Channel], None]) -> None:
        self.limit = limit
        self._opened = opened
        self.transport: asyncio.Transport | None = None
        self.peer = "-"  # host:port of the client, for the access log
        self.on_gone: Callable[[], None] | None = None  # set by the wire while a request is scored
        self._on_bytes: Callable[[], None] | None = None  # called once, when bytes are next held
        self._chunks: list[bytes] = []
        self._size = 0
        self._eof = False  # EOF received or connection lost: nothing more will arrive
        self._reading_paused = False
        self._writing_paused = False
        self._reader: asyncio.Future[None] | None = None
        self._drainer: asyncio.Future[None] | None = None
        self._closed: asyncio.Future[None] | None = None
        self._discarding = False  # lingering: what arrives is read and dropped

    # -- asyncio's side ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream server's is a Transport
        self.peer = peer_of(transport)
        self._closed = asyncio.get_running_loop().create_future()
        self._opened(self)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        self._chunks.append(data)
        self._size += len(data)
        if self._size > self.limit and not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()
        if self._on_bytes is not None:
            report, self._on_bytes = self._on_bytes, None
            report()
        _settle(self._reader)

    def eof_received(self) -> bool:
        """Keep the transport open: a half-closed client may still read its answer."""
        self._gone()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._gone()
        self._writing_paused = False
        _settle(self._drainer)
        _settle(self._closed)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        _settle(self._drainer)

    def _gone(self) -> None:
        self._eof = True
        _settle(self._reader)
        if self.on_gone is not None:
            self.on_gone()

    # -- the wire's side ---------------------------------------------------------------

    @property
    def gone(self) -> bool:
        """The peer sent EOF or the connection is lost."""
        return self._eof

    @property
    def buffered(self) -> int:
        """Bytes received and not yet read."""
        return self._size

    def on_next_bytes(self, report: Callable[[], None]) -> None:
        """Call `report` once, when bytes are next held unread: at once if some already are."""
        if self._size:
            report()
        else:
            self._on_bytes = report

    async def read(self, timeout: float, most: int) -> bytes:
        """Up to `most` bytes received so far, waiting up to `timeout` s for one; b"" once the peer is gone.

        Raises TimeoutError when nothing arrived in time.
        """
        if not self._chunks and not self._eof:
            loop = asyncio.get_running_loop()
            waiter = self._reader = loop.create_future()
            timer = loop.call_later(timeout, _expire, waiter)
            try:
                await waiter
            finally:
                self._reader = None
                timer.cancel()
        return self._take(most)

    def _take(self, most: int) -> bytes:
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if len(data) > most:
            data, rest = data[:most], data[most:]
            self._chunks, self._size = [rest], len(rest)
        else:
            self._chunks, self._size = [], 0
        if (
            self._reading_paused
            and self._size <= self.limit
            and self.transport is not None
            and not self.transport.is_closing()
        ):
            self._reading_paused = False
            self.transport.resume_reading()
        return data

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def write_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size() if self.transport is not None else 0

    async def drain(self, timeout: float) -> None:
        """Wait while the transport's write buffer is over its high-water mark, `timeout` s at most.

        Raises TimeoutError when it is still over by then (a peer that does not read).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._writing_paused:
            waiter = self._drainer = loop.create_future()
            timer = loop.call_at(deadline, _expire, waiter)
            try:
                await waiter
            finally:
                self._drainer = None
                timer.cancel()

    def close(self) -> None:
        """Close once what is written has been sent (the transport flushes first)."""
        if self.transport is not None:
            self.transport.close()

    async def closed(self, timeout: float, linger: float = 0.0) -> None:
        """Close and wait for the socket to go; abort a peer that will not read within `timeout`.

        With `linger` (Rule 5), a peer that has not sent EOF gets our FIN first and up to
        `linger` s to stop sending. Cancelled (shutdown's grace ran out) it aborts too: an
        unread peer must not hold the slot.
        """
        if linger > 0:
            await self._linger(linger)
        self.close()
        if self._closed is None or self._closed.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._closed), timeout)
        except (TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(Exception):
                self.transport.abort()  # type: ignore[union-attr]  # set: _closed exists only after connection_made

    async def _linger(self, seconds: float) -> None:
        """Half-close, then drop what arrives until the peer's EOF or `seconds` pass."""
        transport = self.transport
        if (
            self._eof
            or transport is None
            or transport.is_closing()
            or not transport.can_write_eof()
        ):
            return
        transport.write_eof()
        self._discarding = True
        self._take(self._size)  # drop what is held, and read again if we had paused
        with contextlib.suppress(TimeoutError):
            await self.read(seconds, 1)  # wakes at the EOF (or a lost peer), never for data


def peer_of(writer: Any) -> str:
    """host:port of a stream's client ([host]:port for IPv6), for the access log."""
    address = writer.get_extra_info("peername")
    if not isinstance(address, tuple) or len(address) < 2:
        return "-"
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
