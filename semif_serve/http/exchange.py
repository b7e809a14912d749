"""Routes and replies: what the wire and the application both speak, and nothing else.

Rule 1: types and one lookup. This module holds what a route is to the wire and ops (its
path, name, method, whether it needs the bearer), the Head the wire hands over, the Reply every
answer is, the Ticket an accepted request becomes, `route`, which finds a request line's
route in a listener's table or refuses it, and the body limit both sides check; it runs no
handler, reads no body and knows no socket. The table itself is the application's
(service/head_policy.py ROUTES), whose routes carry their handlers, so that adding an endpoint
touches that one module.
Rule 2: both sides read it, neither is imported here. service/ (and ops, for /metrics) decide
what a route answers; http/connection.py frames and writes; this module imports neither.
Rule 3: the caller lives on the exchange's record (`Exchange.caller`), never on a Reply: the
application names it once, when the bearer passes, and ops logs and counts every reply the
wire writes for that exchange under it, the wire's own refusals included.

Theory of operation: one question per request head. The wire frames a head, runs
its own framing checks, and asks the application once (`Answer`, with the exchange's
record): the answer is a Reply (a refusal, or a GET's whole answer), or a Ticket, which
takes the body once the wire has read it and returns the Reply. A Reply may carry headers of its
route's own and ask for the connection to close; a ticket's reply may still be a
refusal (a body the route refuses after parsing it). The wire never learns which
route it served.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, TypeVar

from ..engine.worker import CallTiming
from ..errors import ApiError, envelope, excerpt, too_large
from . import request_target


@dataclass(frozen=True)
class Route:
    """One endpoint as the wire and ops see it: its path (ops' route label), name, method, and whether it
    needs the bearer (a POST also takes an admission slot); what it does is the application's
    (service/head_policy.py `Endpoint`)."""

    path: bytes
    name: str
    method: bytes
    protected: bool
    # Extension: System One's route family, whose every response carries the SDK's own request-id field.
    typesafe: bool = False

    @property
    def methods(self) -> tuple[bytes, ...]:
        """What it answers: a GET route answers HEAD too, the same head without the content (RFC 9110 9.1, 9.3.2)."""
        return (b"GET", b"HEAD") if self.method == b"GET" else (self.method,)


@dataclass(frozen=True)
class Reply:
    """A status and a rendered body; the route that answered, an error's code, a scorer call's timing
    and (extension) the orderings method of each decision answered, for the access log and metrics."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()
    code: str | None = None
    timing: CallTiming | None = None
    content_type: bytes = b"application/json"
    close: bool = False  # the connection ends after this reply, whether or not the body was read
    # Each decision's orderings method, in order (metrics label them `method`).
    decision_methods: tuple[str, ...] = ()
    # Extension: the workload of each decision that escalated to a later scorer call (metrics).
    escalations: tuple[str, ...] = ()
    # The route that answered; None: refused before one was found (ops then labels it by the target).
    route: Route | None = None

    @classmethod
    def error(
        cls,
        error: ApiError,
        timing: CallTiming | None = None,
        close: bool = False,
        route: Route | None = None,
    ) -> Reply:
        return cls(
            error.status,
            envelope(error.code, error.message, error.param),
            error.headers,
            error.code,
            timing,
            close=close,
            route=route,
        )


class Head(NamedTuple):
    """What the application reads of a request head the wire has framed and checked."""

    method: bytes
    target: bytes
    fields: Mapping[
        bytes, bytes
    ]  # each field's first value (the wire already refused an ambiguous repeat)
    draining: bool  # the server is shutting down


class Ticket(Protocol):
    """A request the application accepted on its head. The wire calls `take` at most once, with the
    whole body, and `release` exactly once, however the exchange ends (the client may leave first);
    it keeps `route` for the refusals it makes itself meanwhile (a body timeout, a body over the limit)."""

    @property
    def route(self) -> Route:
        """The route that accepted the head."""

    def take(self, body: bytes) -> Awaitable[Reply]:
        """The reply to the body: the route's answer, or a refusal of what the body holds."""

    def release(self) -> None:
        """The exchange is over: free what accepting the head held (an admission slot)."""


R = TypeVar("R", bound=Route)  # a listener's routes: Route, or the application's own kind of it
# The application's one question per request head, asked with the exchange's record (where it names
# the caller once the bearer passes): a Reply now, or a Ticket for the body.
Answer = Callable[[Head, "Exchange"], "Reply | Ticket"]
# A GET route's handler: its whole reply from the head (HEAD shares it, without the body).
Handler = Callable[[Head], Reply]


def route(method: bytes, target: bytes, host: bytes | None, routes: Mapping[bytes, R]) -> R:
    """The route for a request line and its Host field among a listener's `routes`, or 400 / 404 / 405
    in the envelope."""
    try:
        path = request_target.resolve(target, host)
    except request_target.BadTarget as error:
        raise ApiError("bad_request", str(error)) from None
    found = routes.get(path)
    if found is None:
        here = ", ".join(f"{each.method.decode()} {name.decode()}" for name, each in routes.items())
        raise ApiError(
            "not_found",
            f"no endpoint at {excerpt(path.decode('latin-1'), 60)}; the endpoints: {here}",
        )
    if method not in found.methods:
        allow = b", ".join(found.methods)
        raise ApiError(
            "method_not_allowed",
            f"{path.decode()} accepts {allow.decode()} only",
            ((b"allow", allow),),
        )
    return found


@dataclass
class Exchange:
    """One request from its head (or its first failure) to its written response: what its observer (ops) records."""

    request_id: str
    method: str
    target: bytes | None  # as the request line sent it; None: bytes that never became a head
    started: float = field(default_factory=time.perf_counter)
    # Where no route answered: the path as logged and the route label, read from `target` once (by ops).
    unrouted: tuple[str, str] | None = None
    # Extension: the caller's name, set by the application once the bearer passes; "-": none. Every
    # reply written for this exchange is logged and counted under it (the wire's own refusals too).
    caller: str = "-"


def body_refusal(size: int, limit: int, declared: bool = False) -> ApiError | None:
    """The body limit, checked at two points: a declared length before a byte of the body is read
    (the application's, after admission), and the running size before each chunk is kept (the wire's;
    a chunked body declares none)."""
    return too_large(limit, declared) if size > limit else None


# Retry-After's range (RFC 9110 10.2.3): whole seconds, at least 1 (0 invites a retry storm), at most 60.
MIN_RETRY_AFTER = 1
MAX_RETRY_AFTER = 60


def retry_after(seconds: float) -> int:
    """A wait as Retry-After's value: rounded up to whole seconds, held to MIN_RETRY_AFTER..MAX_RETRY_AFTER."""
    return min(max(math.ceil(seconds), MIN_RETRY_AFTER), MAX_RETRY_AFTER)
