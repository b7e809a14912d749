"""The head policy: every check a request head allows, admission, the endpoints and the GET answers, no I/O.

Rule 1: one question per head. The wire hands `Service.answer` a framed head (its own
framing checks done) with the exchange's record, and gets back a Reply or a Ticket
(http/exchange.py); after that it only reads the body a ticket takes and writes what it
returns. The order of the head checks is `answer`'s: the route (400 target, 404, 405), for
a protected route the drain (503) then the bearer (401); a GET's reply; for a POST the
admission slot (429), the declared length (413) and the content (415, 422), and only then a
ticket, which holds the slot until the wire releases it and hands the body to the body
pipeline (service/body_pipeline.py), where what the body holds may still be refused.
Rule 2: the caller is named once, on the exchange's record, when the bearer passes
(`answer`); everything written for that request after it, the wire's own refusals
included, is logged and counted under that name. A reply never carries the caller.
Rule 3: every endpoint is declared here (`ROUTES`: path, method, bearer, and what it does:
a GET's handler, or a POST's reader and content rule), so adding one touches this module
(and, for a POST, a reader in the body pipeline), and `answer` dispatches on the route
itself; its answer is decided here (or, for /metrics, by the ops handler the server hands
over). Every Reply and Ticket made once the route is found carries it (ops labels by it);
the wire names no route.

*Extension:* GET /v1/audit (behind the bearer) shows what audits counted per (workload, n), with the
served calibration and its binding, which `semif-serve audit export` refits from (service/audits.py).

*Extension:* /v1/systemone and /v1/models speak TypeSafe's System One API through
the pure `systemone` package; its requests take the same request model, engine call
and views as /decide and /decide/shared. Like SemIf's own server they name the weights
in SemIf's id form, send `x-semif-mode` and `x-semif-backend`, and /healthz answers
SemIf's probe.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..config import Settings
from ..decisions import calibration_file
from ..engine.worker import Engine
from ..errors import ApiError, excerpt, unauthorized
from ..http.exchange import Exchange, Handler, Head, Reply, Route, Ticket, body_refusal, route
from ..systemone import catalogue, defaults
from . import callers
from .admission import Admission
from .audits import Auditor, audit_call
from .body_pipeline import (
    Pipeline,
    Reader,
    json_bytes,
    read_decide,
    read_shared,
    read_systemone,
)
from .loaded_calibration import LoadedCalibration, loaded
from .wait_budget import WaitBudget

# The one body coding the service decodes (the SDK may send zstd); a JSON parser must never see another.
IDENTITY = (b"identity",)


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


@dataclass(frozen=True)
class Endpoint(Route):
    """A route and what it does: a GET's handler (its whole reply from the head, built with the route
    it is handed, so that no reply is copied to add it), or a POST's reader (the body pipeline's first
    step) and content rule."""

    get: Callable[[Service, Head, Route], Reply] | None = None
    read: Reader | None = None
    content: Callable[[bytes | None], None] = any_content


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
            get=lambda s, head, route: s.health(head.draining, route),
        ),
        Endpoint(b"/decide", "decide", b"POST", protected=True, read=read_decide),
        Endpoint(b"/decide/shared", "shared", b"POST", protected=True, read=read_shared),
        # Extension: Prometheus metrics, answered by ops (the server hands its handler over). No token, no slot.
        # Ops builds its reply without a route, so this scrape alone is copied to add it.
        Endpoint(
            b"/metrics",
            "metrics",
            b"GET",
            protected=False,
            get=lambda s, head, route: dataclasses.replace(s.metrics(head), route=route),
        ),
        # Extension: TypeSafe's System One API (semif_serve/systemone). Bearer on both, as the API and its SDK do.
        Endpoint(
            b"/v1/systemone",
            "systemone",
            b"POST",
            protected=True,
            typesafe=True,
            read=read_systemone,
            content=text_only,
        ),
        Endpoint(
            b"/v1/models",
            "models",
            b"GET",
            protected=True,
            typesafe=True,
            get=lambda s, head, route: s.models(route),
        ),
        # Extension: what audits counted, and the calibration they were counted against. Bearer, no slot.
        Endpoint(
            b"/v1/audit", "audit", b"GET", protected=True, get=lambda s, head, route: s.audit(route)
        ),
        # Extension: SemIf's own server's probe, so a probe pointed at it keeps working. Like /health.
        Endpoint(
            b"/healthz",
            "healthz",
            b"GET",
            protected=False,
            typesafe=True,
            get=lambda s, head, route: s.healthz(head.draining, route),
        ),
    )
}
# Extension: what the SEMIF_METRICS_PORT listener answers. /metrics alone: the scrape, never the card.
METRICS_ROUTES = {b"/metrics": ROUTES[b"/metrics"]}


def no_metrics(head: Head) -> Reply:
    """/metrics where no ops handler was handed over (a service built without a server)."""
    return Reply.error(ApiError("not_found", "metrics are off (SEMIF_METRICS)"))


class SlotTicket:
    """The ticket of a POST that holds an admission slot (its caller's): its body in, its reply out,
    the slot freed once."""

    __slots__ = ("_service", "route", "_caller")

    def __init__(self, service: Service, endpoint: Endpoint, caller: str) -> None:
        self._service = service
        self.route = endpoint
        self._caller = caller

    async def take(self, body: bytes) -> Reply:
        return await self._service.post(self.route, body, self._caller)

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
        calibration: calibration_file.Loaded | None = None,
        audits: Auditor | None = None,
    ) -> None:
        """`admission` and `budget` are shared with whoever reports them (ops); `metrics` answers
        /metrics, whose answer lives in ops (the server hands it over);
        `known` is the callers and `calibration` the calibration (None: read from the settings),
        each replaced whole on reload; `audits` (extension) is shared with ops and the drain (None:
        one of its own, over this engine)."""
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
        self.audits = (
            audits
            if audits is not None
            else Auditor(settings, functools.partial(audit_call, engine))
        )
        self.pipeline = Pipeline(engine, budget, self.served_model, self.backend, self.audits)
        read = (
            calibration
            if calibration is not None
            else calibration_file.read(settings.calibration_path)
        )
        self.calibration = self.calibrated(read.table, read.sha256)

    def calibrated(self, table: calibration_file.Table, sha256: str | None) -> LoadedCalibration:
        """What a calibration table gives the routes, System One accepting the served id and every alias
        (refused, calibration_file.Refused, where the table cannot serve System One's defaults)."""
        defaults.check(table, self.settings.systemone_orderings, self.settings.systemone_workload)
        return loaded(table, sha256, self.settings, (self.served_model, *self.aliases))

    def answer(
        self, head: Head, exchange: Exchange, routes: Mapping[bytes, Endpoint] = ROUTES
    ) -> Reply | Ticket:
        """The one answer to a request head among a listener's `routes`: a Reply now, or a ticket for its
        body. A bearer that passes names its caller on `exchange`, the record its every reply is logged by."""
        try:
            found = route(head.method, head.target, head.fields.get(b"host"), routes)
        except ApiError as error:
            return Reply.error(error)  # no route: ops labels it by the target
        try:
            if found.protected:
                if head.draining:
                    raise ApiError(
                        "shutting_down", "the server is shutting down; retry on another instance"
                    )
                exchange.caller = self.authorize(head.fields.get(b"authorization"))
        except ApiError as error:
            return Reply.error(error, route=found)
        if found.get is not None:
            return found.get(self, head, found)
        return self._admit(head, found, exchange.caller)

    def _admit(self, head: Head, endpoint: Endpoint, caller: str) -> Reply | Ticket:
        """A POST's slot (the queue's, then its caller's share), then the checks on its body's head; a
        refusal after the slot closes the connection."""
        try:
            self.admission.enter(caller)
        except ApiError as error:
            return Reply.error(error, route=endpoint)
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
            return Reply.error(error, close=True, route=endpoint)
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

    async def post(
        self, endpoint: Endpoint, body: bytes, caller: str = callers.UNAUTHENTICATED
    ) -> Reply:
        """A POST route's body through the body pipeline, under the calibration current now, its engine
        calls in `caller`'s turn; its reply carries `endpoint` as its route."""
        if endpoint.read is None:
            raise RuntimeError(f"{endpoint.name} is not a POST route")
        return await self.pipeline.run(endpoint.read, self.calibration, body, caller, endpoint)

    def health(self, draining: bool = False, route: Route | None = None) -> Reply:
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
        return Reply(503 if draining else 200, json_bytes(payload), route=route)

    def audit(self, route: Route | None = None) -> Reply:
        """GET /v1/audit (extension): the audits per (workload, n), and the calibration they were counted
        against as the bound file it would be, bound to what is loaded (what an export refits)."""
        binding = calibration_file.Binding(
            self.settings.model,
            self.settings.revision,
            self.prompt_version or "",
            self.dtype or calibration_file.DEFAULT_DTYPE,
        )
        payload = {
            **self.audits.as_json(),
            "calibration_sha256": self.calibration.sha256,
            "calibration": calibration_file.document(self.calibration.table, binding),
        }
        return Reply(200, json_bytes(payload), route=route)

    def models(self, route: Route | None = None) -> Reply:
        """GET /v1/models (extension): the System One id, then every other name `model` accepts."""
        return Reply(
            200, json_bytes(catalogue.listing(self.served_model, self.aliases)), route=route
        )

    def healthz(self, draining: bool = False, route: Route | None = None) -> Reply:
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
        return Reply(503 if draining else 200, json_bytes(payload), route=route)


def check_encoding(content_encoding: bytes | None) -> None:
    """A body coding we do not decode is a 415, before a byte of the body is read."""
    if content_encoding is not None and content_encoding.strip().lower() not in IDENTITY:
        raise ApiError(
            "unsupported_media_type",
            f"Content-Encoding {excerpt(content_encoding.decode('latin-1'), 40)!r} is not supported; "
            "send the body uncompressed (identity)",
        )
