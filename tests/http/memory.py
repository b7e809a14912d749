"""The wire's timing logic without a socket or the wall clock: a clock that moves when the test says,
and an in-memory channel whose reads wait on it. The real connection code (http/connection.py)
runs unchanged between them, asking a real Server's service and ops (not listening).

A read's timeout is a timer on the fake clock, so a deadline fires exactly when the test
advances past it, never early and never late on a loaded machine. The real channel and the
real socket keep their own tests (tests/http/both_loops/test_channel.py, one real-socket
test per deadline in test_deadlines.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from semif_serve.http.connection import Drain, HttpConnection
from semif_serve.server import Server
from tests.wire_client import Response, parse_responses


async def settle() -> None:
    """Let every task that can run, run (the wire, the engine's reply coming back), until all wait."""
    for _ in range(50):
        await asyncio.sleep(0)


class FakeClock:
    """Seconds that pass only in `advance`; timers set on it fire as it passes them."""

    def __init__(self) -> None:
        self.now = 1000.0
        self._timers: list[tuple[float, asyncio.Future[None]]] = []

    def __call__(self) -> float:
        return self.now

    def timer(self, seconds: float, waiter: asyncio.Future[None]) -> None:
        """Fail `waiter` with TimeoutError once the clock reaches now + `seconds`."""
        self._timers.append((self.now + seconds, waiter))

    async def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [waiter for at, waiter in self._timers if at <= self.now]
        self._timers = [(at, waiter) for at, waiter in self._timers if at > self.now]
        for waiter in due:
            if not waiter.done():
                waiter.set_exception(TimeoutError())
        await settle()


class MemoryChannel:
    """http/channel.Channel's side the wire sees, held in memory; `send` and `send_eof` are the client."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.peer = "memory:1"
        self.on_gone = None
        self.sent = bytearray()  # what the wire wrote
        self.unread = False  # the client reads nothing: what the wire writes stays buffered
        self.linger: float | None = None  # set when the wire closed: how long it would linger
        self._held = bytearray()
        self._eof = False
        self._reader: asyncio.Future[None] | None = None
        self._on_bytes: Callable[[], None] | None = None

    # -- the client's side

    async def send(self, data: bytes) -> None:
        self.arrive(data)
        await settle()

    def arrive(self, data: bytes) -> None:
        """Bytes reach the channel, and the wire's task has not run since (the race a real socket has)."""
        self._held += data
        if self._on_bytes is not None:
            report, self._on_bytes = self._on_bytes, None
            report()
        self._wake()

    async def send_eof(self) -> None:
        self._eof = True
        self._wake()
        if self.on_gone is not None:
            self.on_gone()
        await settle()

    def _wake(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.set_result(None)

    @property
    def is_closed(self) -> bool:
        return self.linger is not None

    def responses(self) -> list[Response]:
        return parse_responses(bytes(self.sent), strict=True)

    # -- the wire's side

    @property
    def gone(self) -> bool:
        return self._eof

    def on_next_bytes(self, report: Callable[[], None]) -> None:
        if self._held:
            report()
        else:
            self._on_bytes = report

    @property
    def buffered(self) -> int:
        return len(self._held)

    async def read(self, timeout: float, most: int) -> bytes:
        if not self._held and not self._eof:
            waiter = self._reader = asyncio.get_running_loop().create_future()
            self.clock.timer(timeout, waiter)
            try:
                await waiter
            finally:
                self._reader = None
        data = bytes(self._held[:most])
        del self._held[:most]
        return data

    def write(self, data: bytes) -> None:
        if not self.is_closed:
            self.sent += data

    def write_buffer_size(self) -> int:
        return len(self.sent) if self.unread else 0

    async def drain(self, timeout: float) -> None:
        """A client that reads (the default) takes everything at once; one that does not
        (`unread`) leaves the wire waiting until `timeout` on the fake clock."""
        if self.unread:
            waiter = asyncio.get_running_loop().create_future()
            self.clock.timer(timeout, waiter)
            await waiter

    def close(self) -> None:
        self._on_bytes = None  # a closed transport delivers nothing more
        self.linger = self.linger or 0.0

    async def closed(self, timeout: float, linger: float = 0.0) -> None:
        self._on_bytes = None
        self.linger = linger


@dataclass
class Wire:
    """One in-memory connection to `server`, served by the real HttpConnection in its own task."""

    server: Server
    channel: MemoryChannel
    connection: HttpConnection
    task: asyncio.Task[None]

    @property
    def done(self) -> bool:
        return self.task.done()

    async def answered(self, count: int, timeout: float = 5.0) -> list[Response]:
        """The first `count` responses, waiting for a scorer call's reply to come back from its thread."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(parse_responses(bytes(self.channel.sent))) < count:
            assert loop.time() < deadline, (
                f"fewer than {count} responses: {bytes(self.channel.sent)!r}"
            )
            await asyncio.sleep(0.005)
        await settle()
        return self.channel.responses()


@dataclass
class Memory:
    """A Server that is not listening, its connections in memory, and their shared fake clock."""

    server: Server
    clock: FakeClock
    drain: Drain

    async def connect(self) -> Wire:
        channel = MemoryChannel(self.clock)
        connection = HttpConnection(
            channel,  # type: ignore[arg-type]  # the channel's wire side, in memory
            self.server.service.answer,
            self.server.settings,
            self.drain,
            self.server.ops,
            self.clock,
        )
        task = asyncio.ensure_future(connection.run())
        await settle()
        return Wire(self.server, channel, connection, task)
