"""The application: every check a request head allows, admission, and the endpoints, with no I/O.

Rule 1: one question per head. The wire hands `Service.answer` a framed head (its
own framing checks done) and gets back a Reply or a Ticket (http/exchange.py); after
that it only reads the body a ticket takes and writes what it returns. The order
of the head checks is `answer`'s: the route (400 target, 404, 405), for a
protected route the drain (503) then the bearer (401); a GET's reply; for a POST
the admission slot (429), the declared length (413) and the content (415, 422),
and only then a ticket, which holds the slot until the wire releases it. What the
ticket's body holds may still be refused: a 422, or with SEMIF_MAX_WAIT_S a 429 for
the estimated wait (`_within_budget`), both before anything reaches the scorer.
Rule 2: every endpoint is declared here (`ROUTES`: path, method, bearer, and what it
does: a GET's handler, or a POST's reader and content rule), so adding one touches this
module alone and `answer` dispatches on the route itself; its answer is decided here (or,
for /metrics, by the ops handler the server hands over). Every Reply and Ticket made once
the route is found carries it (ops labels by it); the wire names no route.
Rule 3: the scorer's failures (engine/scorer.py) become envelopes in one place, `_score`.

Scores pass through untouched (INV-1): the only things added are `calibrated` and
the order-averaged `combined` view (under orderings "prior", the debiased one).
*Extension:* /v1/systemone and /v1/models speak TypeSafe's System One API through
the pure `systemone` package; its requests take
the same request model, engine call and views as /decide and /decide/shared. Like
SemIf's own server they name the weights in SemIf's id form, send
`x-semif-mode` and `x-semif-backend`, and /healthz answers SemIf's probe.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..config import Settings
from ..decisions import calibration_file, request_model, viewing
from ..decisions.request_model import DecideRequest
from ..decisions.views import View, as_json
from ..engine.scorer import OutOfMemory, ScoringFailed
from ..engine.worker import CallTiming, Engine
from ..errors import ApiError, excerpt, unauthorized
from ..http.exchange import (
    Handler,
    Head,
    Reply,
    Route,
    Ticket,
    body_refusal,
    retry_after,
    route,
)
from ..systemone import assemble, catalogue, translate
from . import callers
from .admission import Admission
from .wait_budget import OverBudget, WaitBudget

log = logging.getLogger("semif_serve.service")
# What one engine call gives back: SemIf's results, and SemIf's own timing dict (None for a direct call).
Scored = tuple[list[dict[str, Any]], dict[str, Any] | None]
# A response body, and the headers of the route's own that go with it.
Built = tuple[Any, tuple[tuple[bytes, bytes], ...]]
# How a route's response is built from the scores and the engine call's kind (direct or shared).
Respond = Callable[[Scored, str], Built]
# The one body coding the service decodes (the SDK may send zstd); a JSON parser must never see another.
IDENTITY = (b"identity",)


def render(payload: Any) -> bytes:
    # allow_nan=False: a non-finite number would be invalid JSON on the wire.
    return json.dumps(payload, allow_nan=False, ensure_ascii=False).encode()


@dataclass(frozen=True)
class Calibrated:
    """One calibration table and what the routes derive from it, swapped whole on reload: a request
    reads it once, at its parse, and keeps it to its response."""

    table: calibration_file.Table
    limits: request_model.Limits
    policy: translate.Policy
    sha256: str | None  # of the SEMIF_CALIBRATION file; None without one
    loaded_at: float  # unix time


def file_digest(path: str | None) -> str | None:
    """A file's sha256 in hex (None for no file): which calibration a replica serves, for /health and metrics."""
    if path is None:
        return None
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def any_content(content_type: bytes | None) -> None:
    """The content rule of a JSON route: the parser judges the body, whatever its declared type."""


def text_only(content_type: bytes | None) -> None:
    """System One's content rule: its multipart asset upload is refused before a byte is read (text only)."""
    if content_type is not None and content_type.lower().startswith(b"multipart/"):
        raise ApiError(
            "invalid_request",
            "image assets are refused: this service scores text only",
            param="assets",
        )


# A POST route's reader: its body, under the calibration current at its parse, as a request and how
# the response is built from that request's scores.
Read = Callable[["Service", Calibrated, bytes], tuple[DecideRequest, Respond]]


@dataclass(frozen=True)
class Endpoint(Route):
    """A route and what it does: a GET's handler (its whole reply from the head), or a POST's reader
    and content rule."""

    get: Callable[[Service, Head], Reply] | None = None
    read: Read | None = None
    content: Callable[[bytes | None], None] = any_content


def _read_decide(
    service: Service, current: Calibrated, body: bytes
) -> tuple[DecideRequest, Respond]:
    request = request_model.parse_decide(body, current.limits)
    return request, functools.partial(service.decided, request, current.table)


def _read_shared(
    service: Service, current: Calibrated, body: bytes
) -> tuple[DecideRequest, Respond]:
    request = request_model.parse_shared(body, current.limits)
    return request, functools.partial(service.decided, request, current.table)


def _read_systemone(
    service: Service, current: Calibrated, body: bytes
) -> tuple[DecideRequest, Respond]:
    plan = translate.translate(body, current.policy)
    return plan.request, functools.partial(service.answers, plan, current.table)


# Every endpoint: path, name, method, bearer, and what it does, keyed by its path. A GET route answers HEAD
# too and takes no admission slot; a POST takes one. Adding an endpoint is one entry here and its handler.
ROUTES = {
    endpoint.path: endpoint
    for endpoint in (
        Endpoint(
            b"/health",
            "health",
            b"GET",
            protected=False,
            get=lambda s, head: s.health(head.draining),
        ),
        Endpoint(b"/decide", "decide", b"POST", protected=True, read=_read_decide),
        Endpoint(b"/decide/shared", "shared", b"POST", protected=True, read=_read_shared),
        # Extension: Prometheus metrics, answered by ops (the server hands its handler over). No token, no slot.
        Endpoint(
            b"/metrics", "metrics", b"GET", protected=False, get=lambda s, head: s.metrics(head)
        ),
        # Extension: TypeSafe's System One API (semif_serve/systemone). Bearer on both, as the API and its SDK do.
        Endpoint(
            b"/v1/systemone",
            "systemone",
            b"POST",
            protected=True,
            typesafe=True,
            read=_read_systemone,
            content=text_only,
        ),
        Endpoint(
            b"/v1/models",
            "models",
            b"GET",
            protected=True,
            typesafe=True,
            get=lambda s, head: s.models(),
        ),
        # Extension: SemIf's own server's probe, so a probe pointed at it keeps working. Like /health.
        Endpoint(
            b"/healthz",
            "healthz",
            b"GET",
            protected=False,
            typesafe=True,
            get=lambda s, head: s.healthz(head.draining),
        ),
    )
}
# Extension: what the SEMIF_METRICS_PORT listener answers. /metrics alone: the scrape, never the card.
METRICS_ROUTES = {b"/metrics": ROUTES[b"/metrics"]}


def no_metrics(head: Head) -> Reply:
    """/metrics where no ops handler was handed over (a service built without a server)."""
    return Reply.error(ApiError("not_found", "metrics are off (SEMIF_METRICS)"))


class SlotTicket:
    """The ticket of a POST that holds an admission slot: its body in, its reply (by its caller) out,
    the slot freed once."""

    __slots__ = ("_service", "route", "_caller")

    def __init__(self, service: Service, endpoint: Endpoint, caller: str) -> None:
        self._service = service
        self.route = endpoint
        self._caller = caller

    async def take(self, body: bytes) -> Reply:
        reply = await self._service.post(self.route, body, self._caller)
        return dataclasses.replace(reply, route=self.route, caller=self._caller)

    def release(self) -> None:
        self._service.admission.leave(self._caller)


class Service:
    """The endpoints over one engine."""

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        admission: Admission | None = None,
        metrics: Handler = no_metrics,
        budget: WaitBudget | None = None,
        known: callers.Callers | None = None,
    ) -> None:
        """`admission` and `budget` are shared with whoever reports them (ops); `metrics` answers
        /metrics, whose answer lives in ops (the server hands it over);
        `known` is the callers (None: read from the settings), replaced whole on reload."""
        self.settings = settings
        self.engine = engine
        self.admission = (
            admission
            if admission is not None
            else Admission(settings.max_queue, settings.max_queue_per_caller)
        )
        self.callers = known if known is not None else callers.for_settings(settings)
        # Extension: SEMIF_MAX_WAIT_S, built by the server beside admission; None: by count alone.
        self.budget = budget
        self.metrics: Handler = metrics
        facts = engine.health()
        # The System One routes name the weights in SemIf's form; SEMIF_MODEL, the id they named
        # before, stays accepted as the first alias. /health and the calibration binding keep SEMIF_MODEL.
        self.backend = catalogue.backend(facts)
        self.served_model = catalogue.model_id(facts)
        self.prompt_version = facts.get("prompt_version")
        # What a reloaded calibration must be bound to, as at startup (service/reload.py).
        self.dtype = facts.get("dtype")
        self.aliases = (facts["model"], *settings.model_aliases)
        self.calibration = self.calibrated(
            settings.calibration, file_digest(settings.calibration_path)
        )

    def calibrated(self, table: calibration_file.Table, sha256: str | None) -> Calibrated:
        """What a calibration table gives the routes: their request limits and the System One policy."""
        limits = request_model.Limits(
            self.settings.max_decisions, frozenset(table), table.methods(), table.prior_counts()
        )
        policy = translate.Policy(
            limits,
            frozenset({self.served_model, *self.aliases}),
            self.settings.systemone_orderings,
            self.settings.systemone_workload,
        )
        return Calibrated(table, limits, policy, sha256, time.time())

    def answer(self, head: Head, routes: Mapping[bytes, Endpoint] = ROUTES) -> Reply | Ticket:
        """The one answer to a request head among a listener's `routes`: a Reply now, or a ticket for its body."""
        try:
            found = route(head.method, head.target, head.fields.get(b"host"), routes)
        except ApiError as error:
            return Reply.error(error)  # no route: ops labels it by the target
        caller = callers.UNAUTHENTICATED
        try:
            if found.protected:
                if head.draining:
                    raise ApiError(
                        "shutting_down", "the server is shutting down; retry on another instance"
                    )
                caller = self.authorize(head.fields.get(b"authorization"))
        except ApiError as error:
            return Reply.error(error, route=found)
        if found.get is not None:
            return dataclasses.replace(found.get(self, head), route=found, caller=caller)
        return self._admit(head, found, caller)

    def _admit(self, head: Head, endpoint: Endpoint, caller: str) -> Reply | Ticket:
        """A POST's slot (the queue's, then its caller's share), then the checks on its body's head; a
        refusal after the slot closes the connection."""
        try:
            self.admission.enter(caller)
        except ApiError as error:
            return Reply.error(error, caller=caller, route=endpoint)
        try:
            length = head.fields.get(b"content-length")  # h11 checked its digits
            if length is not None and (
                refusal := body_refusal(int(length), self.settings.max_body_bytes, declared=True)
            ):
                raise refusal
            check_encoding(head.fields.get(b"content-encoding"))
            endpoint.content(head.fields.get(b"content-type"))
        except ApiError as error:
            self.admission.leave(caller)
            return Reply.error(error, close=True, caller=caller, route=endpoint)
        return SlotTicket(self, endpoint, caller)

    def authorize(self, header: bytes | None) -> str:
        """The caller a bearer names, by a constant-time check over the token's bytes alone (INV-6,
        service/callers.py). The field is `Bearer`, one or more spaces, the token (RFC 6750 2.1, `1*SP`);
        a tab is not a space there, so it stays in the token. Another scheme, or `Bearer` with nothing
        after it, presents no token (RFC 6750 3.1)."""
        scheme, _, spaced = (header or b"").partition(b" ")
        token = spaced.lstrip(b" ")
        caller = self.callers.identify(token)
        bearer = scheme.lower() == b"bearer"
        if not bearer or caller is None:
            raise unauthorized(presented=bearer and token != b"")
        return caller

    def health(self, draining: bool = False) -> Reply:
        """The engine's facts and the limits; 503 `draining` once shutdown began, so a
        load balancer or readiness probe stops sending while in-flight work finishes."""
        facts = self.engine.health()
        payload = {
            **facts,
            "status": "draining" if draining else "ok",
            "vram_cap_gib": self.settings.vram_cap_gib,
            "max_tokens": self.settings.max_tokens,
            "max_decisions": self.settings.max_decisions,
            "max_queue": self.settings.max_queue,
            "in_progress": self.admission.in_progress,
            "workloads": sorted(self.calibration.table),
            # Extension: each workload's methods and temperatures, and the file's binding; the file's
            # sha256 (null without SEMIF_CALIBRATION), so each replica's version shows after a reload.
            "calibration": self.calibration.table.describe(),
            "calibration_sha256": self.calibration.sha256,
        }
        return Reply(503 if draining else 200, render(payload))

    def models(self) -> Reply:
        """GET /v1/models (extension): the System One id, then every other name `model` accepts."""
        return Reply(200, render(catalogue.listing(self.served_model, self.aliases)))

    def healthz(self, draining: bool = False) -> Reply:
        """GET /healthz (extension): SemIf's server's probe, its fields with its meanings, and our
        queue beside them; 503 `draining` once shutdown began, as /health. Never the scorer, never a slot."""
        payload = {
            "status": "draining" if draining else "ready",
            "model": self.served_model,
            "backend": self.backend,
            "prompt_version": self.prompt_version,
            "max_input_tokens": self.settings.max_tokens,
            "mode": "auto",  # one question direct, several shared: the only routing here
            "in_progress": self.admission.in_progress,
            "max_queue": self.settings.max_queue,
        }
        return Reply(503 if draining else 200, render(payload))

    async def post(
        self, endpoint: Endpoint, body: bytes, caller: str = callers.UNAUTHENTICATED
    ) -> Reply:
        """Parse, score and build a POST route's reply (/decide, /decide/shared or /v1/systemone);
        its engine call takes `caller`'s turn."""
        call = None
        try:
            request, respond = self._read(endpoint, body)
            call, rows = self._engine_call(request)
            scored = await self._within_budget(rows, call, caller)
        except ApiError as error:
            return Reply.error(error, call)
        try:
            payload, headers = respond(scored, call.kind)
            return Reply(
                200,
                render(payload),
                headers,
                timing=call,
                decision_methods=tuple(decision.method for decision in request.decisions),
            )
        except Exception:  # noqa: BLE001 - any failure here must still be the envelope (C3)
            log.exception("failed to build a response from a scorer result")
            return Reply.error(ApiError("scoring_failed", "failed to build the response"), call)

    def _read(self, endpoint: Endpoint, body: bytes) -> tuple[DecideRequest, Respond]:
        """The body as a request, and how this route's response is built from its scores, both under the
        one calibration current now (a reload meanwhile never mixes two). A parser's
        own bug is a 500 in the envelope (C3), never a dropped connection with no answer and no access line."""
        if endpoint.read is None:
            raise RuntimeError(f"{endpoint.name} is not a POST route")
        current = self.calibration
        try:
            return endpoint.read(self, current, body)
        except ApiError:
            raise
        except Exception:  # noqa: BLE001 - only parsing is in here: the scorer's failures have their own table
            log.exception("failed to read a request body")
            raise ApiError("scoring_failed", "failed to read the request") from None

    @staticmethod
    def _engine_call(request: DecideRequest) -> tuple[CallTiming, list[dict[str, Any]]]:
        """The one engine call a request makes, over its rows (request_model: direct or shared)."""
        rows = request.rows()
        return CallTiming(request.kind, len(rows)), rows

    async def _within_budget(
        self, rows: list[dict[str, Any]], call: CallTiming, caller: str
    ) -> Scored:
        """The engine call, once the wait budget (if any) admits the request: refused, it never joins the queue."""
        if self.budget is None:
            return await self._score(rows, call, caller)
        try:
            admitted = self.budget.admit(call.kind, len(rows), caller)
        except OverBudget as over:
            raise busy(over) from None
        try:
            return await self._score(rows, call, caller)
        finally:
            self.budget.estimator.leave(admitted, call.started)

    def scorer_call(self, call: CallTiming) -> None:
        """A scorer call ended (on the loop, after the window of recent calls measured it): one kind's
        successful calls coming to take longer than the whole wait budget is logged once per crossing."""
        if call.outcome != "ok" or call.scoring is None or self.budget is None:
            return
        if self.budget.crossed(call.kind):
            log.warning(
                "a %s scorer call now takes %.2f s (recent mean), over the SEMIF_MAX_WAIT_S budget of "
                "%g s: any request behind one such call is refused busy; raise SEMIF_MAX_WAIT_S",
                call.kind,
                self.budget.estimator.recent.per_call(call.kind),
                self.budget.seconds,
            )

    async def _score(self, rows: list[dict[str, Any]], call: CallTiming, caller: str) -> Scored:
        """One engine call per request, timed in `call`, in `caller`'s turn."""
        try:
            if call.kind == "direct":
                return [await self.engine.score(rows[0], call, caller=caller)], None
            return await self.engine.score_shared(rows, call, caller=caller)
        except ValueError as error:
            raise ApiError(
                "invalid_request", excerpt(str(error), 300) or "the scorer refused the input"
            ) from None
        except OutOfMemory as error:
            raise ApiError("out_of_memory", str(error) or "CUDA out of memory") from None
        except ScoringFailed as error:
            raise ApiError("scoring_failed", excerpt(str(error), 300) or "scoring failed") from None
        except Exception:  # noqa: BLE001 - an unknown scorer failure is a 500 in the envelope
            log.exception("scorer call failed")
            raise ApiError("scoring_failed", "scoring failed") from None

    def decided(
        self, request: DecideRequest, table: calibration_file.Table, scored: Scored, _kind: str
    ) -> Built:
        """A /decide or /decide/shared response from the request's views."""
        results, semif_timing = scored
        return decide_json(request, viewing.views(request, results, table), semif_timing), ()

    def answers(
        self, plan: translate.Plan, table: calibration_file.Table, scored: Scored, kind: str
    ) -> Built:
        """A System One response from the same views /decide/shared would return for the rows, with SemIf's
        server's headers: the engine call made (direct or shared) and the backend that made it."""
        results, semif_timing = scored
        body = assemble.response(
            plan,
            self.served_model,
            viewing.views(plan.request, results, table),
            results,
            kind,
            semif_timing,
        )
        return body, ((b"x-semif-mode", kind.encode()), (b"x-semif-backend", self.backend.encode()))


def busy(over: OverBudget) -> ApiError:
    """The wait budget's refusal as 429 busy, Retry-After the drain of the rows ahead (1..60 s)."""
    return ApiError(
        "busy", str(over), ((b"retry-after", b"%d" % retry_after(over.estimate.seconds)),)
    )


def check_encoding(content_encoding: bytes | None) -> None:
    """A body coding we do not decode is a 415, before a byte of the body is read."""
    if content_encoding is not None and content_encoding.strip().lower() not in IDENTITY:
        raise ApiError(
            "unsupported_media_type",
            f"Content-Encoding {excerpt(content_encoding.decode('latin-1'), 40)!r} is not supported; "
            "send the body uncompressed (identity)",
        )


def decide_json(
    request: DecideRequest, views: list[View], semif_timing: dict[str, Any] | None
) -> Any:
    """A /decide or /decide/shared response: the views, and for shared SemIf's own timing beside them."""
    shown = [as_json(view) for view in views]
    return {"results": shown, "timing": semif_timing} if request.shared else shown[0]
