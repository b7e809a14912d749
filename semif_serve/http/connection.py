"""The wire: one asyncio task per connection, turning h11 events into actions.

Rule 1: one phase per connection (`Phase`), set at each transition by `_enter`, which
refuses any step TRANSITIONS does not list; who may close it, how it closes and
what a deadline answers are read from the phase alone:

    WAITING    nothing of the next request received (a new connection, or between
               keep-alive requests)          -> HEAD, REFUSING, CLOSING
    HEAD       bytes of a head received: reading it, the wire's own checks, the
               application's answer          -> HEARD, BODY, REFUSING, CLOSING
    HEARD      a head with no body, read whole -> SCORING, ANSWERING, CLOSING
    BODY       the answer was a ticket: reading the body it takes
                                             -> SCORING, REFUSING, CLOSING
    SCORING    read whole; the ticket works  -> ANSWERING, CLOSING
    ANSWERING  writing the reply to a request read whole
                                             -> WAITING, HEAD (pipelined), CLOSING
    REFUSING   writing a reply before the request was read whole (a refusal, a GET
               whose body is left unread, 408, 503 at shutdown); it may still be
               sending, so the connection closes, lingering -> CLOSING
    CLOSING    flushing and closing          -> (end)

`closable` (shutdown may close it at once) is WAITING with no byte held unread by
the channel: bytes that arrive while the task sleeps are a head begun
(`_caught_up`). A close lingers (http/channel.py Rule 5) from HEAD, BODY and REFUSING.
A deadline in HEAD answers 408, in WAITING closes silently, in BODY answers 408.
Rule 2: one question per request head. The wire frames the head and runs the
framing checks (loose bytes, size, both framings, a repeated SINGLETON), then asks
the application once (`answer`, routes.Answer): a Reply it writes, or a Ticket
whose body it reads and whose reply it writes, releasing the ticket however the
exchange ends. It names no route, holds no admission slot and reads no body the
application did not take.

h11 owns HTTP/1.1 framing (it validates Content-Length as plain ASCII digits,
chunked encoding, header sizes); this loop owns the policy around it: a head h11
tolerates but another parser could frame differently is refused, every
check on a head runs before a single body byte is kept, the body limit
is checked before each chunk is kept, every wait has a deadline, and a client
that leaves while its request waits never reaches the scorer. A field whose
repetition is ambiguous (SINGLETONS) is refused 400: a proxy in front may have
checked the other copy. Each response goes out through `_send`, the one place
that asks ops.Operations for its request id and Retry-After and reports it
written; the loop itself keeps no log or metric. Bytes come and go through a
channel.Channel: this module never touches a socket or a transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from http import HTTPStatus
from typing import ClassVar, Protocol

import h11

from ..config import Settings
from ..errors import ApiError, excerpt, too_large
from .channel import Channel, peer_of
from .exchange import Answer, Exchange, Head, Reply, Ticket

# How long a close waits for a refused client to stop sending (nginx's lingering_timeout is 5 s).
LINGER_S = 1.0
# One read hands h11 at most this much (so a head too long fails as too long, not as whatever follows).
READ_SIZE = 65536
# Bytes a channel holds unread (a pipelined request while one is scored); past this it stops reading.
MAX_BUFFERED = 65536
PROTOCOL_CODES = {431: "headers_too_large"}
# h11 refuses an incomplete head past 16 KiB, but parses a longer one that arrives in one read.
MAX_HEAD = 16384
# Control bytes a head may not carry: all but HTAB, and CR and LF outside their CRLF pairs.
CONTROL_BYTES = bytes([*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])
# Fields we act on that must appear at most once: which copy a proxy checked is unknowable.
# h11 already refuses a repeated Host or Transfer-Encoding and differing Content-Lengths
# (identical ones it folds into one, as RFC 9112 6.3 allows); fields we never read are let be.
SINGLETONS = frozenset({b"authorization", b"x-request-id"})
# Reason phrases looked up once, not through the HTTPStatus enum on every response.
REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}
# What h11's next_event returns (the wire reads on while it is NEED_DATA).
Received = h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]


class Observer(Protocol):
    """Who the wire reports each exchange to (ops.operations.Operations, wired by the server): it opens
    the exchange's record, adds the headers every response carries, and hears when it is written."""

    def begin(
        self, request: h11.Request | None, head_bytes: int = 0, request_id: bytes | None = None
    ) -> Exchange:
        """The record of a parsed head (with the X-Request-Id it carried once), or of bytes that never became one."""

    def headers(self, exchange: Exchange, reply: Reply) -> list[tuple[bytes, bytes]]:
        """The operational headers the reply goes out with."""

    def finish(self, exchange: Exchange, reply: Reply, peer: str, bytes_out: int) -> None:
        """The response is written."""


class Phase:
    """Where one connection stands (Rule 1). Compared by identity, as h11's state sentinels are: an
    Enum's member look-up and hash cost a few hundred ns each, on every transition of every request."""

    __slots__ = ("name",)
    WAITING: ClassVar[Phase]
    HEAD: ClassVar[Phase]
    HEARD: ClassVar[Phase]
    BODY: ClassVar[Phase]
    SCORING: ClassVar[Phase]
    ANSWERING: ClassVar[Phase]
    REFUSING: ClassVar[Phase]
    CLOSING: ClassVar[Phase]

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Phase.{self.name}"


Phase.WAITING = Phase("WAITING")
Phase.HEAD = Phase("HEAD")
Phase.HEARD = Phase("HEARD")
Phase.BODY = Phase("BODY")
Phase.SCORING = Phase("SCORING")
Phase.ANSWERING = Phase("ANSWERING")
Phase.REFUSING = Phase("REFUSING")
Phase.CLOSING = Phase("CLOSING")

TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.WAITING: frozenset({Phase.HEAD, Phase.REFUSING, Phase.CLOSING}),
    Phase.HEAD: frozenset({Phase.HEARD, Phase.BODY, Phase.REFUSING, Phase.CLOSING}),
    Phase.HEARD: frozenset({Phase.SCORING, Phase.ANSWERING, Phase.CLOSING}),
    Phase.BODY: frozenset({Phase.SCORING, Phase.REFUSING, Phase.CLOSING}),
    Phase.SCORING: frozenset({Phase.ANSWERING, Phase.CLOSING}),
    Phase.ANSWERING: frozenset({Phase.WAITING, Phase.HEAD, Phase.CLOSING}),
    Phase.REFUSING: frozenset({Phase.CLOSING}),
    Phase.CLOSING: frozenset(),
}
# The request is read whole: a reply from here answers it, and the connection may carry another.
READ_WHOLE = frozenset({Phase.HEARD, Phase.SCORING})
# The client may still be sending: a close lingers so that its bytes do not turn our answer into a reset.
STILL_SENDING = frozenset({Phase.HEAD, Phase.BODY, Phase.REFUSING})
# A reply is already going out (or the connection is ending): shutdown adds no second one.
ANSWERED = frozenset({Phase.ANSWERING, Phase.REFUSING, Phase.CLOSING})


class ClientGone(Exception):
    """The peer closed its side: nothing more can be answered."""


class Deadline(Exception):
    """A read did not complete in time."""


def _loose(raw: bytes | bytearray) -> bool:
    """What h11 tolerates in a head but another parser in front may read differently (RFC 9112
    2.2, 5.2; RFC 9110 5.5): a bare LF or CR, an obs-fold line, a control byte other than HTAB.

    Counting instead of one regex with look-arounds: the same answer (a property test holds
    it to that regex) for a third of the CPU on every request head.
    """
    pairs = raw.count(b"\r\n")
    return (
        raw.count(b"\r") != pairs
        or raw.count(b"\n") != pairs  # a CR or LF outside a CRLF
        or b"\n " in raw
        or b"\n\t" in raw  # obs-fold
        or len(raw.translate(None, CONTROL_BYTES)) != len(raw)
    )


class Fields:
    """The fields of one request head, read in one pass: h11's Headers yields item by item, so each pass costs."""

    __slots__ = ("first", "repeated")

    def __init__(self, request: h11.Request) -> None:
        self.first: dict[bytes, bytes] = {}  # each field's first value
        self.repeated: list[bytes] = []  # the SINGLETONS that appear more than once, in order
        for key, value in request.headers:
            if key not in self.first:
                self.first[key] = value
            elif key in SINGLETONS and key not in self.repeated:
                self.repeated.append(key)

    def get(self, name: bytes) -> bytes | None:
        return self.first.get(name)

    def once(self, name: bytes) -> bytes | None:
        """The value when the field appears exactly once (a repeated one is ambiguous)."""
        return None if name in self.repeated else self.first.get(name)

    @property
    def has_body(self) -> bool:
        length = self.first.get(b"content-length")
        return b"transfer-encoding" in self.first or (length is not None and int(length) > 0)


class Drain:
    """Shared shutdown state: once begun, new requests are answered 503 and closed."""

    def __init__(self) -> None:
        self.active = False  # a plain attribute: every request reads it
        self.started = 0.0  # time.monotonic() when it began

    def begin(self) -> None:
        if not self.active:
            self.active, self.started = True, time.monotonic()

    def seconds(self) -> float:
        """How long it has run; 0 while serving (what semif_drain_elapsed_seconds exports)."""
        return time.monotonic() - self.started if self.active else 0.0


class HttpConnection:
    """One client connection: reads events with deadlines, asks the application once per head, writes its reply."""

    def __init__(
        self, channel: Channel, answer: Answer, settings: Settings, drain: Drain, ops: Observer
    ) -> None:
        self.channel = channel
        self.answer = (
            answer  # the application's one answer per head (its listener's routes bound in)
        )
        self.settings = settings
        self.drain = drain
        self.conn = h11.Connection(h11.SERVER)
        self.phase = Phase.WAITING
        self.head = bytearray()  # raw bytes received since the current head began
        self.head_only = False  # the request is HEAD: its response carries no body
        self.ops = ops
        self.peer = peer_of(channel.transport)
        self.exchange: Exchange | None = None  # the request being answered, once its head parsed

    def _enter(self, phase: Phase) -> None:
        """The one place the phase changes; a step TRANSITIONS does not list is a bug in this module."""
        if phase not in TRANSITIONS[self.phase]:
            raise RuntimeError(
                f"connection phase {self.phase.name} -> {phase.name} is not a transition"
            )
        self.phase = phase

    def _caught_up(self) -> Phase:
        """The phase, counting bytes that arrived while the task slept (held unread by the channel) as a head begun."""
        return Phase.HEAD if self.phase is Phase.WAITING and self.channel.buffered else self.phase

    @property
    def closable(self) -> bool:
        """Between requests with no byte of the next one received: shutdown may just close it."""
        return self._caught_up() is Phase.WAITING

    # -- reading -------------------------------------------------------------

    async def _receive(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Deadline
        try:
            data = await self.channel.read(remaining, READ_SIZE)
        except TimeoutError:
            raise Deadline from None
        if data and self.phase is Phase.WAITING:
            self._enter(Phase.HEAD)
        if self.phase is Phase.HEAD:
            self.head += data
        self.conn.receive_data(data)

    async def _next_event(self, deadline: float) -> Received:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            await self._receive(deadline)

    async def _next_request(self, first: bool) -> tuple[Received, int]:
        """The next request head and its size in bytes, under the idle and header deadlines."""
        now = time.monotonic()
        self.head = bytearray(self.conn.trailing_data[0])
        self.head_only = False
        if first:  # a new connection is WAITING, under the header deadline from its start
            return await self._next_head(now + self.settings.header_timeout)
        if self.head:  # pipelined: the next head began arriving while this one was answered
            self._enter(Phase.HEAD)
            return await self._next_head(now + self.settings.header_timeout)
        # Keep-alive: wait for the first byte under the idle timeout, then the head
        # must complete within the header timeout counted from that byte.
        self._enter(Phase.WAITING)
        await self._receive(now + self.settings.idle_timeout)
        return await self._next_head(time.monotonic() + self.settings.header_timeout)

    async def _next_head(self, deadline: float) -> tuple[Received, int]:
        """The next event; a request head must also pass the checks h11 leaves out."""
        event = await self._next_event(deadline)
        if not isinstance(event, h11.Request):
            return event, 0
        self.head_only = event.method == b"HEAD"
        raw = self.head[: len(self.head) - len(self.conn.trailing_data[0])]
        self.head = bytearray()
        if len(raw) > MAX_HEAD:
            raise h11.RemoteProtocolError(f"request head over {MAX_HEAD} bytes", 431)
        if _loose(raw):
            raise h11.RemoteProtocolError(
                "request head has a bare LF or CR, an obs-fold or a control byte", 400
            )
        return event, len(raw)

    async def _read_body(self) -> bytes:
        """The whole body, refusing before keeping any chunk that would pass the limit."""
        limit = self.settings.max_body_bytes
        deadline = time.monotonic() + self.settings.body_timeout
        chunks: list[bytes] = []
        size = 0
        while True:
            event = await self._next_event(deadline)
            if isinstance(event, h11.Data):
                if size + len(event.data) > limit:
                    raise too_large(limit, declared=False)
                chunks.append(event.data)
                size += len(event.data)
            elif isinstance(event, h11.EndOfMessage):
                if self.exchange is not None:
                    self.exchange.bytes_in += size
                return b"".join(chunks)
            else:  # ConnectionClosed mid-body
                raise ClientGone

    # -- writing -------------------------------------------------------------

    async def _send(self, reply: Reply, close: bool = False) -> None:
        self._enter(Phase.ANSWERING if self.phase in READ_WHOLE else Phase.REFUSING)
        exchange = self.exchange or self.ops.begin(None, len(self.head))
        self.exchange = None
        fields = [
            (b"content-type", reply.content_type),
            (b"content-length", str(len(reply.body)).encode()),
            *reply.headers,
            *self.ops.headers(exchange, reply),
        ]
        if close or self.drain.active:  # draining: nothing after this response will be answered
            fields.append((b"connection", b"close"))
        reason = REASONS[reply.status]
        head = h11.Response(status_code=reply.status, headers=fields, reason=reason)
        body = b"" if self.head_only else reply.body  # h11 refuses a body after a HEAD request
        data = (
            self.conn.send(head)
            + self.conn.send(h11.Data(data=body))
            + self.conn.send(h11.EndOfMessage())
        )
        self.channel.write(data)
        try:
            if self.channel.write_buffer_size():  # the kernel took it all: nothing to wait for
                async with asyncio.timeout(self.settings.idle_timeout):
                    await self.channel.drain()
        finally:
            self.ops.finish(exchange, reply, self.peer, len(data))

    async def _refuse(self, error: ApiError, close: bool) -> None:
        await self._send(Reply.error(error), close=close)

    # -- the loop ------------------------------------------------------------

    async def run(self) -> None:
        """Serve requests until the peer closes, a deadline passes or a reply closes."""
        try:
            first = True
            while await self._serve_one(first) and not self.drain.active:
                first = False
                self.conn.start_next_cycle()
        except (TimeoutError, ClientGone, ConnectionError):
            pass
        except asyncio.CancelledError:
            # Shutdown's grace ran out: answer what is in progress, then end normally.
            await self._stopped()
        finally:
            await self._close()

    async def _close(self) -> None:
        """Close after flushing what is buffered; abort a peer that will not read it, or it holds the slot forever.

        A client that may still be sending (STILL_SENDING: its request refused mid-head or
        mid-body) gets a lingering close, so that its unread bytes do not turn our answer into a reset.
        """
        sending = self._caught_up() in STILL_SENDING
        self._enter(Phase.CLOSING)
        await self.channel.closed(self.settings.idle_timeout, LINGER_S if sending else 0.0)

    async def _stopped(self) -> None:
        """A request in progress (head, body or scoring) still gets an answer, never silence."""
        if self._caught_up() is Phase.WAITING or self.phase in ANSWERED:
            return
        with contextlib.suppress(Exception):
            await self._send(
                Reply.error(
                    ApiError("shutting_down", "the server stopped before this request finished")
                ),
                close=True,
            )

    async def _serve_one(self, first: bool) -> bool:
        """Answer one request; True when the connection may carry another."""
        try:
            event, head_bytes = await self._next_request(first)
        except Deadline:
            if self.phase is Phase.HEAD:  # in WAITING nothing was asked: the connection just ends
                await self._send(
                    Reply.error(ApiError("request_timeout", "request head not received in time")),
                    close=True,
                )
            return False
        except h11.RemoteProtocolError as error:
            await self._protocol_error(error)
            return False
        if not isinstance(event, h11.Request):
            return False  # ConnectionClosed between requests
        fields = Fields(event)
        self.exchange = self.ops.begin(event, head_bytes, fields.once(b"x-request-id"))
        try:
            return await self._dispatch(event, fields)
        except Deadline:
            await self._send(
                Reply.error(ApiError("request_timeout", "request body not received in time")),
                close=True,
            )
        except h11.RemoteProtocolError as error:
            await self._protocol_error(error)
        return False

    async def _protocol_error(self, error: h11.RemoteProtocolError) -> None:
        """h11 refused the bytes: answer in the envelope (if we still may) and close."""
        if self.phase in ANSWERED:
            return
        status = error.error_status_hint
        code = PROTOCOL_CODES.get(status, "bad_request")
        # h11 quotes the offending bytes (perhaps a credential) after ": bytearray(": keep its description only.
        message = excerpt(str(error).split(": bytearray(", 1)[0], 120) or "malformed request"
        await self._refuse(ApiError(code, message), close=True)

    async def _dispatch(self, request: h11.Request, fields: Fields) -> bool:
        """Run the wire's framing checks, ask the application once, then read the body a ticket takes."""
        unread = fields.has_body
        if not unread:  # an empty body: let h11 reach EndOfMessage so the connection can be reused
            await self._next_event(time.monotonic() + self.settings.body_timeout)
            self._enter(Phase.HEARD)
        if (
            fields.get(b"transfer-encoding") is not None
            and fields.get(b"content-length") is not None
        ):
            # Both framings is the request-smuggling classic: refuse and close on every route (RFC 9112 6.1).
            await self._refuse(
                ApiError("bad_request", "both Content-Length and Transfer-Encoding are set"), unread
            )
            return self._reusable()
        if (
            fields.repeated
        ):  # the head is ambiguous: close rather than guess where the next request begins
            await self._refuse(
                ApiError(
                    "bad_request", f"the {fields.repeated[0].decode()} field appears more than once"
                ),
                close=True,
            )
            return False
        answer = self.answer(Head(request.method, request.target, fields.first, self.drain.active))
        if isinstance(answer, Reply):
            await self._send(answer, close=unread or answer.close)
            return self._reusable()
        try:
            return await self._take(answer, unread)
        finally:
            answer.release()

    async def _take(self, ticket: Ticket, unread: bool) -> bool:
        """The body the ticket takes, then its reply."""
        try:
            if unread:
                self._enter(Phase.BODY)
            if self.conn.they_are_waiting_for_100_continue:
                self.channel.write(
                    self.conn.send(h11.InformationalResponse(status_code=100, headers=[]))
                )
            body = await self._read_body() if unread else b""
        except ApiError as error:
            await self._refuse(error, close=True)
            return False
        self._enter(Phase.SCORING)
        if self.channel.gone:  # it sent its request and left: it never reaches the scorer
            raise ClientGone
        reply = await self._until_client_leaves(ticket.take(body))
        await self._send(reply)
        return self._reusable()

    def _reusable(self) -> bool:
        """Both sides finished a keep-alive exchange (not after `Connection: close`, HTTP/1.0 or an unread body)."""
        return self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE

    async def _until_client_leaves(self, work: Awaitable[Reply]) -> Reply:
        """Await the reply, cancelling it if the client leaves first (queued calls never start).

        The work runs in its own task so that shutdown can cancel this one and answer
        503 at once, while a scorer call already running finishes on its own. The
        channel says when the client leaves (`on_gone`); nothing else reads meanwhile.
        """
        task = asyncio.ensure_future(work)
        settled = asyncio.get_running_loop().create_future()

        def settle(_: object = None) -> None:
            if not settled.done():
                settled.set_result(None)

        task.add_done_callback(settle)
        self.channel.on_gone = settle
        try:
            await settled
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            self.channel.on_gone = None
            task.remove_done_callback(settle)
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise ClientGone
