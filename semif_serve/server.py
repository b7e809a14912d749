"""The server's lifecycle: listen, cap connections, and shut down gracefully.

On SIGTERM or SIGINT it stops accepting, closes idle keep-alive connections,
answers new requests 503 with `Connection: close`, lets in-flight calls finish
within the grace period, answers any still waiting 503, and exits 0. The port
opens only after the model has loaded and warmed up (`Engine.start`), so a
connection refused means "not ready yet" and a 503 `draining` means "leaving".
On SIGHUP it re-reads the tokens file and SEMIF_CALIBRATION (service/reload.py), each
swapped in whole or, when invalid, not at all; one received while it starts is applied once it
is ready, and one while it stops is ignored (ops/hangup.py), so a SIGHUP never kills it.
Every effective setting is logged once at startup, the token redacted. Here the
parts meet: one Admission shared by the service (which takes and frees slots) and
ops (which reports it), with SEMIF_MAX_WAIT_S the WaitBudget beside it, ops's
/metrics handler registered with the service, and each listener's route table
bound into the `answer` its connections ask.

*Extension:* with SEMIF_METRICS_PORT set, a second listener answers `/metrics` alone
and stays open through the drain until the process exits, so Prometheus keeps
scraping a replica while it leaves (semif_drain_elapsed_seconds) and can alert on
a drain that outlives its grace. Its connections have their own small cap and are
never counted as clients: a scraper cannot take a caller's slot, nor a caller a
scraper's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import time
from collections.abc import Callable, Mapping

from .config import Settings
from .decisions import calibration_file
from .engine.recent import RecentCalls
from .engine.scorer import Scorer
from .engine.worker import Engine
from .errors import ApiError, envelope
from .http.channel import Channel
from .http.connection import MAX_BUFFERED, Drain, HttpConnection
from .http.exchange import Answer, Exchange, Head, Reply, Ticket
from .ops import logs, pid_file
from .ops.hangup import Hangups
from .ops.logs import log_settings
from .ops.operations import Operations
from .ops.retry_after import RetryAfter
from .service import callers, reload
from .service.admission import Admission
from .service.audits import Auditor, audit_call
from .service.head_policy import METRICS_ROUTES, ROUTES, Endpoint, Service
from .service.wait_budget import WaitBudget, WaitEstimator
from .systemone import defaults

log = logging.getLogger("semif_serve.server")
# Open connections the metrics listener takes: a Prometheus pair (HA) and a person with curl, with room.
MAX_SCRAPERS = 16

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
        from .engine.stub import StubScorer

        return StubScorer(settings)
    from .engine.torch_scorer import TorchScorer

    return TorchScorer(settings)


class Server:
    """The listening sockets, their connections and the shared drain flag."""

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        known_callers: callers.Callers | None = None,
        calibration: calibration_file.Loaded | None = None,
    ) -> None:
        """`known_callers` and `calibration`: the callers and the calibration, read before the model
        loaded (None: read from the settings now)."""
        self.settings = settings
        self.engine = engine
        self.drain = Drain(time.monotonic)
        self.connections: dict[asyncio.Task[None], HttpConnection] = {}  # clients, on SEMIF_PORT
        self.scrapers: dict[asyncio.Task[None], HttpConnection] = {}  # on SEMIF_METRICS_PORT
        admission = Admission(settings.max_queue, settings.max_queue_per_caller)
        # The one window of recent scorer time: Retry-After and the wait estimate read it.
        self.recent = recent = RecentCalls()
        # Extension: admission by a wait budget too, when SEMIF_MAX_WAIT_S is set.
        budget = (
            None
            if settings.max_wait_s is None
            else WaitBudget(settings.max_wait_s, WaitEstimator(engine.ahead, recent=recent))
        )
        busy = _busy_reasons(admission, budget, settings)
        # Extension: audits, offered by the service, read by ops, stopped by the drain.
        self.audits = audits = Auditor(settings, functools.partial(audit_call, engine))
        self.ops = ops = Operations(
            settings,
            ROUTES,
            lambda: admission.in_progress,
            engine.health,
            lambda: len(self.connections),
            self.drain.seconds,
            busy,
            recent=recent,
            dispatcher=engine.dispatcher,
            audits=audits.samples if audits.on else None,
        )
        # /metrics is a route like any other; its answer lives in ops.
        self.service = Service(
            settings,
            engine,
            admission,
            metrics=lambda head: ops.metrics_reply(),
            budget=budget,
            known=known_callers,
            calibration=calibration,
            audits=audits,
        )
        # Every observer is wired here: the engine's scorer calls to the window of recent calls first (what
        # the others read), then (with a budget) the service and ops; the estimate's error and the kinds
        # over budget to the metrics.
        engine.observers.append(recent.scorer_call)
        if budget is not None:
            engine.observers.append(self.service.pipeline.scorer_call)
        engine.observers.append(self.ops.scorer_call)
        self._calibration_shown()
        if budget is not None and ops.metrics is not None:
            budget.estimator.observers.append(ops.metrics.wait_error)
            ops.metrics.calls_over_budget(lambda: budget.over)
        self._listener: asyncio.base_events.Server | None = None
        self._metrics_listener: asyncio.base_events.Server | None = None
        self.port = 0
        self.metrics_port: int | None = None

    def reload(self) -> None:
        """SIGHUP: re-read the tokens file and the calibration (service/reload.py), each counted by outcome."""
        done = {
            "tokens": reload.tokens(self.service),
            "calibration": reload.calibration(self.service),
        }
        if self.ops.metrics is not None:
            for file, outcome in done.items():
                if outcome is not None:
                    self.ops.metrics.reloaded(file, outcome)
        self._calibration_shown()

    def _calibration_shown(self) -> None:
        if self.ops.metrics is not None:
            current = self.service.calibration
            self.ops.metrics.calibration(current.sha256, current.loaded_at)

    async def start(self) -> int:
        """Listen; return the bound port (SEMIF_PORT, or the one the OS chose for 0). The
        metrics listener, when set, binds next (metrics_port)."""
        self._listener, self.port = await self._listen(
            self.settings.port, self.connections, self.settings.max_connections, ROUTES
        )
        if self.settings.metrics_port is not None:
            self._metrics_listener, self.metrics_port = await self._listen(
                self.settings.metrics_port, self.scrapers, MAX_SCRAPERS, METRICS_ROUTES
            )
        return self.port

    async def _listen(
        self,
        port: int,
        connections: dict[asyncio.Task[None], HttpConnection],
        cap: int,
        routes: Mapping[bytes, Endpoint],
    ) -> tuple[asyncio.base_events.Server, int]:
        def answer(head: Head, exchange: Exchange) -> Reply | Ticket:
            return self.service.answer(head, exchange, routes)

        def accept(channel: Channel) -> None:
            self._accept(channel, connections, cap, answer)

        listener = await asyncio.get_running_loop().create_server(
            lambda: Channel(MAX_BUFFERED, accept), self.settings.host, port, backlog=1024
        )
        return listener, listener.sockets[0].getsockname()[1]

    def _accept(
        self,
        channel: Channel,
        connections: dict[asyncio.Task[None], HttpConnection],
        cap: int,
        answer: Answer,
    ) -> None:
        """A connection is open: refuse it over the cap (one write, no parsing), else serve it in its own task."""
        if len(connections) >= cap:
            exchange = self.ops.begin(None)
            data = full(exchange.request_id)
            channel.write(data)
            channel.close()
            self.ops.finish(exchange, Reply.error(_FULL_ERROR), channel.peer, 0, len(data))
            return
        connection = HttpConnection(
            channel, answer, self.settings, self.drain, self.ops, time.monotonic
        )
        task = asyncio.get_running_loop().create_task(connection.run())
        connections[task] = connection
        task.add_done_callback(lambda ended: self._ended(ended, connections))

    @staticmethod
    def _ended(
        task: asyncio.Task[None], connections: dict[asyncio.Task[None], HttpConnection]
    ) -> None:
        del connections[task]
        if not task.cancelled() and task.exception() is not None:
            log.error("connection failed", exc_info=task.exception())

    async def shutdown(self) -> None:
        """Drain: refuse new work, let in-flight requests finish within the grace period; the
        metrics listener closes last, once nothing is left to watch."""
        self.drain.begin()
        self.audits.drain()
        self.engine.drain()
        if self._listener is not None:
            self._listener.close()
        await self._close_all(self.connections, self.settings.shutdown_grace)
        self.engine.close()
        if self._metrics_listener is not None:
            self._metrics_listener.close()
        await self._close_all(self.scrapers, 0.0)

    @staticmethod
    async def _close_all(
        connections: dict[asyncio.Task[None], HttpConnection], grace: float
    ) -> None:
        """Close the idle ones at once, give the rest `grace` s, then cancel them (each answers 503)."""
        for connection in connections.values():
            if connection.closable:
                connection.channel.close()
        pending = set(connections)
        if pending and grace > 0:
            _, pending = await asyncio.wait(pending, timeout=grace)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=1.0)


def _busy_reasons(
    admission: Admission, budget: WaitBudget | None, settings: Settings
) -> Callable[[], dict[str, int]] | None:
    """429 busy by reason, exported only where more than the queue's can happen: with a wait budget
    (`wait`) or a share per caller below the queue (`caller`); otherwise the exposition is as before."""
    shared = settings.max_queue_per_caller != settings.max_queue
    if budget is None and not shared:
        return None

    def reasons() -> dict[str, int]:
        counts = {"queue": admission.refused}
        if shared:
            counts["caller"] = admission.refused_share
        if budget is not None:
            counts["wait"] = budget.refused
        return counts

    return reasons


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """`uvloop` or `asyncio`: the loop actually running, as the startup line reports it."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def read_calibration(settings: Settings) -> calibration_file.Loaded:
    """SEMIF_CALIBRATION, and System One's defaults checked against it, before the model loads:
    a refusal (calibration_file.Refused) exits 2, as a bad setting (cli.py)."""
    loaded = calibration_file.read(settings.calibration_path)
    defaults.check(loaded.table, settings.systemone_orderings, settings.systemone_workload)
    return loaded


async def serve(settings: Settings, scorer: Scorer | None = None) -> int:
    """Load the model (fail closed), serve until SIGTERM/SIGINT, drain, return 0."""
    # Before the model loads: a tokens file that cannot be used refuses startup (exit 2, as a bad setting),
    known_callers = callers.for_settings(settings)
    # a calibration file that cannot be read or cannot serve System One's defaults,
    calibration = read_calibration(settings)
    if settings.pid_file is not None:  # and a pid file another live server holds
        pid_file.check(settings.pid_file)
    loop = asyncio.get_running_loop()
    hangups = Hangups(loop)  # a SIGHUP from now on is logged, applied once ready (ops/hangup.py)
    scorer = scorer if scorer is not None else build_scorer(settings)
    # and a table fitted on another model or prompt.
    facts = scorer.health()
    calibration_file.check_binding(
        calibration.table,
        settings.model,
        settings.revision,
        facts.get("prompt_version"),
        facts.get("dtype"),
    )
    log_settings(log, settings)  # once every setting is known valid, before the (long) load
    log.info(
        "callers loaded: %d (%s)", len(known_callers.names), ", ".join(known_callers.names)
    )  # as a reload
    engine = Engine(scorer)
    await engine.start()
    server = Server(settings, engine, known_callers, calibration)
    port = await server.start()
    stop = asyncio.Event()
    # The handlers go in before the listening line: whoever reads that line may send SIGTERM at
    # once, and it must start a drain, not kill the process (-15) with the default action.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    hangups.ready(server.reload)
    if settings.pid_file is not None:  # ready: the port is open and a SIGHUP reloads
        pid_file.write(settings.pid_file)
    if (
        server.metrics_port is not None
    ):  # before the listening line: whoever reads that one may scrape at once
        log.info(
            "semif-serve metrics on %s:%d (/metrics only, open until the process exits)",
            settings.host,
            server.metrics_port,
        )
    log.info(
        "semif-serve listening on %s:%d (scorer %s, event loop %s)",
        settings.host,
        port,
        settings.scorer,
        loop_name(loop),
    )
    flusher = (
        loop.create_task(logs.flush_periodically(settings.log_flush_s))
        if settings.log_flush_s > 0
        else None
    )
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        hangups.stopping()
    log.info("shutting down: draining %d connection(s)", len(server.connections))
    try:
        await server.shutdown()
    finally:
        if flusher is not None:
            flusher.cancel()
        logs.flush()  # the lines of the drain itself; cli.py's logging.shutdown() flushes once more before exit
        if settings.pid_file is not None:
            pid_file.remove(settings.pid_file)
    return 0
