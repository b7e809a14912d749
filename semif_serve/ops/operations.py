"""The one object the wire and the engine report to: ids, headers, access log, metrics.

Rules: observes only. It adds the operational headers to a response the wire
already chose (`X-Request-Id` always, and on the System One routes and every 404 the same id as
`x-typesafe-request-id`; `Retry-After` on 503 and on a 429 that carries none: a wait-budget 429
carries its own estimate) and records
the exchange once the response is written; it never changes a status or a body.
Metrics are built here only when SEMIF_METRICS is on and prometheus_client
imports; otherwise `/metrics` is 404 and nothing else changes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import h11

from ..config import Settings
from ..engine.dispatcher import Dispatcher
from ..engine.recent import RecentCalls
from ..engine.worker import CallTiming
from ..errors import ApiError, excerpt
from ..http import request_target
from ..http.exchange import Exchange, Reply, Route
from . import access_log, request_ids
from .retry_after import RetryAfter

log = logging.getLogger("semif_serve.ops")


def _printable(value: bytes, limit: int) -> str:
    """Client bytes as a short printable string for the log; the common case costs one check."""
    text = value.decode("latin-1")
    return (
        text
        if len(text) <= limit and text.isprintable() and text.isascii()
        else excerpt(text, limit)
    )


class Operations:
    """Request ids, Retry-After, the access log and the metrics of one server."""

    def __init__(
        self,
        settings: Settings,
        routes: Mapping[bytes, Route],
        in_progress: Callable[[], int],
        scorer_facts: Callable[[], dict[str, Any]],
        open_connections: Callable[[], int],
        drain_seconds: Callable[[], float],
        busy_refusals: Callable[[], dict[str, int]] | None = None,
        *,
        recent: RecentCalls,
        dispatcher: Dispatcher,
        audits: Callable[[], Mapping[str, Mapping[Any, float]]] | None = None,
    ) -> None:
        """`routes` is the application's table: its paths are the route labels (a reply carries the
        route that answered; one refused before any was found is labelled by its target's path, or
        "other"), and a route marked `typesafe` answers with the SDK's own request-id field too.
        `in_progress` counts the admitted POSTs (a gauge); `scorer_facts`
        is the engine's health (the model info metric); both are read when needed, never cached.
        `busy_refusals` (only with SEMIF_MAX_WAIT_S) counts 429 busy by reason, read at scrape time.
        `recent` is the window of recent scorer calls and `dispatcher` holds the engine's queues: the
        busy Retry-After prices the rows that run before a caller's new call with the one, read from
        the other; the queues' depths are gauges. `audits` (extension, only with SEMIF_AUDIT_RATE above
        0) is what audits counted, read at scrape."""
        self.labels = {path: path.decode() for path in routes}
        # Extension: System One's SDK reads a response's request id from its own header name: on its
        # routes (SemIf's probe among them) and on every 404, so a wrong base URL still gives it an id.
        self.typesafe = frozenset(
            self.labels[path] for path, found in routes.items() if found.typesafe
        )
        self.retry_after = RetryAfter(recent, dispatcher.ahead)
        self.access_log = settings.access_log
        self.metrics = (
            _metrics(
                settings,
                in_progress,
                scorer_facts,
                open_connections,
                drain_seconds,
                busy_refusals,
                dispatcher,
                audits,
            )
            if settings.metrics
            else None
        )

    # -- the wire's side ------------------------------------------------------------------

    def begin(self, request: h11.Request | None, request_id: bytes | None = None) -> Exchange:
        """Open the exchange for a parsed head (and the X-Request-Id it carried once, if any),
        or for bytes that never became one."""
        if request is None:
            return Exchange(request_ids.generate(), "-", None)
        return Exchange(
            request_ids.accept(request_id), _printable(request.method, 16), request.target
        )

    def _unrouted(self, exchange: Exchange) -> tuple[str, str]:
        """The logged path and the route label of an exchange no route answered (refused before one was
        found), read from its target once: the path routing reads (a known one is its label), or "-"
        and "other" for bytes that never became a head."""
        if exchange.unrouted is None:
            if exchange.target is None:
                exchange.unrouted = ("-", "other")
            else:
                path = request_target.path(exchange.target)
                exchange.unrouted = (_printable(path, 200), self.labels.get(path, "other"))
        return exchange.unrouted

    def headers(self, exchange: Exchange, reply: Reply) -> list[tuple[bytes, bytes]]:
        """What every response carries beyond the reply's own headers."""
        request_id = exchange.request_id.encode()
        fields = [(b"x-request-id", request_id)]
        found = reply.route
        typesafe = (
            found.typesafe if found is not None else self._unrouted(exchange)[1] in self.typesafe
        )
        if typesafe or reply.status == 404:
            fields.append((b"x-typesafe-request-id", request_id))
        if reply.status == 429 and not any(name == b"retry-after" for name, _ in reply.headers):
            # A wait-budget refusal brings its own (the estimate); a full queue's is estimated here.
            fields.append((b"retry-after", b"%d" % self.retry_after.busy(exchange.caller)))
        elif reply.status == 503:
            fields.append((b"retry-after", b"%d" % self.retry_after.unavailable()))
        return fields

    def finish(
        self, exchange: Exchange, reply: Reply, peer: str, bytes_in: int, bytes_out: int
    ) -> None:
        """The response is written (the wire read `bytes_in` of the request): log it and count it,
        under the exchange's caller (named by the application once the bearer passed; "-": none)."""
        total = time.perf_counter() - exchange.started
        found = reply.route
        if found is not None:  # its path is its label, and what the log shows (routing read it so)
            path = route = self.labels[found.path]
        else:
            path, route = self._unrouted(exchange)
        if self.metrics is not None:
            self.metrics.request(route, reply.status, reply.code, total, exchange.caller)
            if reply.decision_methods:  # none on a GET or a refusal: no call for nothing to count
                self.metrics.decisions(reply.decision_methods, exchange.caller)
            if reply.escalations:  # none unless a decision escalated (extension)
                self.metrics.escalations(reply.escalations)
        if self.access_log:
            timing = reply.timing
            access_log.write(
                access_log.AccessRecord(
                    exchange.request_id,
                    peer,
                    exchange.caller,
                    exchange.method,
                    path,
                    reply.status,
                    reply.code,
                    timing.rows if timing is not None else 0,
                    bytes_in,
                    bytes_out,
                    timing.queued if timing is not None else None,
                    timing.scoring if timing is not None else None,
                    total,
                )
            )

    def metrics_reply(self) -> Reply:
        """GET /metrics: the exposition, or 404 when metrics are off."""
        if self.metrics is None:
            return Reply.error(ApiError("not_found", "metrics are off (SEMIF_METRICS)"))
        return Reply(200, self.metrics.render(), content_type=_content_type())

    # -- the engine's side ----------------------------------------------------------------

    def scorer_call(self, timing: CallTiming) -> None:
        """One scorer call ended (called on the event loop)."""
        if timing.scoring is None or timing.kind == "load":
            return
        if self.metrics is not None:
            self.metrics.scorer_call(
                timing.kind,
                timing.rows,
                timing.queued or 0.0,
                timing.scoring,
                timing.outcome == "out_of_memory",
            )


def _content_type() -> bytes:
    from .metrics import CONTENT_TYPE

    return CONTENT_TYPE


def _metrics(
    settings: Settings,
    in_progress: Callable[[], int],
    scorer_facts: Callable[[], dict[str, Any]],
    open_connections: Callable[[], int],
    drain_seconds: Callable[[], float],
    busy_refusals: Callable[[], dict[str, int]] | None,
    dispatcher: Dispatcher,
    audits: Callable[[], Mapping[str, Mapping[Any, float]]] | None,
) -> Any:
    """The metrics, or None (logged once) where prometheus_client is not installed."""
    try:
        from .metrics import Metrics
    except ImportError:
        log.warning(
            "metrics are off: prometheus_client is not installed (pip install 'semif-serve[metrics]')"
        )
        return None
    return Metrics(
        scorer_facts,
        max_queue=settings.max_queue,
        in_progress=in_progress,
        open_connections=open_connections,
        drain_seconds=drain_seconds,
        shutdown_grace=settings.shutdown_grace,
        busy_refusals=busy_refusals,
        queued_by_caller=dispatcher.depths,
        background_queued=dispatcher.background_depth,
        audits=audits,
    )
