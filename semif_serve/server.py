"""The server's lifecycle: listen, cap connections, and shut down gracefully.

On SIGTERM or SIGINT it stops accepting, closes idle keep-alive connections,
answers new requests 503 with `Connection: close`, lets in-flight calls finish
within the grace period, answers any still waiting 503, and exits 0. The port
opens only after the model has loaded and warmed up (`Engine.start`), so a
connection refused means "not ready yet" and a 503 `draining` means "leaving".
Every effective setting is logged once at startup, the token redacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from . import calibration
from .channel import Channel
from .config import Settings
from .engine import Engine
from .errors import ApiError, envelope
from .ops import logs
from .ops.logs import log_settings
from .ops.operations import Operations, peer_of
from .ops.retry_after import RetryAfter
from .scorer import Scorer
from .service import Reply, Service
from .wire import MAX_BUFFERED, Drain, HttpConnection

log = logging.getLogger("semif_serve.server")

_FULL_ERROR = ApiError("too_many_connections", "too many open connections; retry later")
_FULL_BODY = envelope(_FULL_ERROR.code, _FULL_ERROR.message)
# Pre-rendered but for the request id, so refusing a connection over the cap costs one write, no parsing.
_FULL_HEAD = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"content-length: " + str(len(_FULL_BODY)).encode() + b"\r\nconnection: close\r\n"
    b"retry-after: %d\r\n" % RetryAfter.unavailable()
)


def full(request_id: str) -> bytes:
    """The canned 503 for a connection over the cap, carrying its generated request id."""
    return _FULL_HEAD + b"x-request-id: " + request_id.encode() + b"\r\n\r\n" + _FULL_BODY


def build_scorer(settings: Settings) -> Scorer:
    """The scorer SEMIF_SCORER names; torch is imported only for a real one."""
    if settings.scorer == "stub":
        from .stub import StubScorer

        return StubScorer(settings)
    from .torch_engine import TorchScorer

    return TorchScorer(settings)


class Server:
    """One listening socket, its connections and the shared drain flag."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        self.settings = settings
        self.engine = engine
        self.service = Service(settings, engine)
        self.drain = Drain()
        self.connections: dict[asyncio.Task[None], HttpConnection] = {}
        self.ops = Operations(settings, self.service, lambda: len(self.connections))
        engine.observers.append(self.ops.scorer_call)
        self._listener: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self) -> int:
        """Listen; return the bound port (SEMIF_PORT, or the one the OS chose for 0)."""
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            lambda: Channel(MAX_BUFFERED, self._accept), self.settings.host, self.settings.port, backlog=1024
        )
        self.port = self._listener.sockets[0].getsockname()[1]
        return self.port

    def _accept(self, channel: Channel) -> None:
        """A connection is open: refuse it over the cap (one write, no parsing), else serve it in its own task."""
        if len(self.connections) >= self.settings.max_connections:
            exchange = self.ops.begin(None)
            data = full(exchange.request_id)
            channel.write(data)
            channel.close()
            self.ops.finish(exchange, Reply.error(_FULL_ERROR), peer_of(channel.transport), len(data))
            return
        connection = HttpConnection(channel, self.service, self.settings, self.drain, self.ops)
        task = asyncio.get_running_loop().create_task(connection.run())
        self.connections[task] = connection
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        del self.connections[task]
        if not task.cancelled() and task.exception() is not None:
            log.error("connection failed", exc_info=task.exception())

    async def shutdown(self) -> None:
        """Drain: refuse new work, let in-flight requests finish within the grace period."""
        self.drain.active = True
        if self._listener is not None:
            self._listener.close()
        for connection in self.connections.values():
            if connection.closable:
                connection.channel.close()
        pending = set(self.connections)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=self.settings.shutdown_grace)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=1.0)
        self.engine.close()


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """`uvloop` or `asyncio`: the loop actually running, as the startup line reports it."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


async def serve(settings: Settings, scorer: Scorer | None = None) -> int:
    """Load the model (fail closed), serve until SIGTERM/SIGINT, drain, return 0."""
    scorer = scorer if scorer is not None else build_scorer(settings)
    # Before the model loads: a table fitted on another model or prompt refuses startup.
    calibration.check_binding(
        settings.calibration, settings.model, settings.revision, scorer.health().get("prompt_version")
    )
    log_settings(log, settings)  # once every setting is known valid, before the (long) load
    engine = Engine(scorer)
    await engine.start()
    server = Server(settings, engine)
    port = await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # The handlers go in before the listening line: whoever reads that line may send SIGTERM at
    # once, and it must start a drain, not kill the process (-15) with the default action.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("semif-serve listening on %s:%d (scorer %s, event loop %s)", settings.host, port, settings.scorer,
             loop_name(loop))
    flusher = loop.create_task(logs.flush_periodically(settings.log_flush_s)) if settings.log_flush_s > 0 else None
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
    log.info("shutting down: draining %d connection(s)", len(server.connections))
    try:
        await server.shutdown()
    finally:
        if flusher is not None:
            flusher.cancel()
        logs.flush()  # the lines of the drain itself; cli.py's logging.shutdown() flushes once more before exit
    return 0
