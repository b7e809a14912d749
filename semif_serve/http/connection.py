"""The wire: one asyncio task per connection, turning h11 events into actions.

Rule 1: the phase moves only by phases.after (http/phases.py holds the table), and what
comes next is looked up from the phase, as h11 looks up its reader from its state: how the
next head is read (`HEAD_READERS`), what a passed deadline answers (`LATE`), who may close
the connection and how it closes. Bytes that arrive while the task sleeps are a step the
channel reports (`on_next_bytes`), so the phase never lags behind the socket.
Rule 2: one question per request head. The wire frames the head, runs its own checks
(`head_refusal`), asks the application once (`answer`): a Reply it writes, or a Ticket
whose body it reads (`body_refusal` before each chunk is kept) and whose reply it writes,
releasing the ticket however the exchange ends. It names no route: it keeps the ticket's,
unread, for the refusals it makes itself until the reply is written (`_refuse`).
Rule 3: every wait has a deadline, counted on the injected clock and handed to the
channel as a timeout; a client that leaves while its request waits never reaches the scorer.
Rule 4: bytes come and go through a channel.Channel (never a socket or a transport); each
response goes out through `_send`, which hands ops.Operations the byte counts and keeps no
log or metric itself.

h11 owns HTTP/1.1 framing (it validates Content-Length as plain ASCII digits, chunked
encoding, header sizes); this loop owns the policy around it: a head h11 tolerates but
another parser could frame differently is refused, and every check on a head runs before
a single body byte is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import Protocol

import h11

from ..config import Settings
from ..errors import ApiError, excerpt
from .channel import Channel
from .exchange import Answer, Exchange, Head, Reply, Route, Ticket, body_refusal
from .phases import IN_PROGRESS, REPLIED, STILL_SENDING, UNASKED, Phase, Step, after

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
# Seconds from an arbitrary start: time.monotonic in a server, a test's own clock in a test.
Clock = Callable[[], float]
# What a deadline that passes answers, by the phase it passes in: a 408 for a request begun;
# in any other phase nothing was asked, and the connection just ends.
LATE = {
    Phase.HEAD: "request head not received in time",
    Phase.BODY: "request body not received in time",
}


class Observer(Protocol):
    """Who the wire reports each exchange to (ops.operations.Operations, wired by the server): it opens
    the exchange's record, adds the headers every response carries, and hears when it is written."""

    def begin(self, request: h11.Request | None, request_id: bytes | None = None) -> Exchange:
        """The record of a parsed head (with the X-Request-Id it carried once), or of bytes that never became one."""

    def headers(self, exchange: Exchange, reply: Reply) -> list[tuple[bytes, bytes]]:
        """The operational headers the reply goes out with."""

    def finish(
        self, exchange: Exchange, reply: Reply, peer: str, bytes_in: int, bytes_out: int
    ) -> None:
        """The response is written, after the wire read `bytes_in` of the request and wrote `bytes_out`."""


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


def head_refusal(raw: bytes | bytearray, fields: Fields) -> ApiError | None:
    """The wire's own checks on a head h11 has framed, in order; None when the application may see it.

    A head over 16 KiB (h11 parses one that arrives in one read), one another parser could
    frame differently, both framings (the request-smuggling classic, RFC 9112 6.1), or an
    ambiguous repeat of a field we act on (a proxy in front may have checked the other copy).
    """
    if len(raw) > MAX_HEAD:
        return ApiError("headers_too_large", f"request head over {MAX_HEAD} bytes")
    if _loose(raw):
        return ApiError(
            "bad_request", "request head has a bare LF or CR, an obs-fold or a control byte"
        )
    if b"transfer-encoding" in fields.first and b"content-length" in fields.first:
        return ApiError("bad_request", "both Content-Length and Transfer-Encoding are set")
    if fields.repeated:
        return ApiError(
            "bad_request", f"the {fields.repeated[0].decode()} field appears more than once"
        )
    return None


class Drain:
    """Shared shutdown state: once begun, new requests are answered 503 and closed."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.active = False  # a plain attribute: every request reads it
        self.started = 0.0  # the clock when it began

    def begin(self) -> None:
        if not self.active:
            self.active, self.started = True, self.clock()

    def seconds(self) -> float:
        """How long it has run; 0 while serving (what semif_drain_elapsed_seconds exports)."""
        return self.clock() - self.started if self.active else 0.0


class HttpConnection:
    """One client connection: reads events with deadlines, asks the application once per head, writes its reply."""

    def __init__(
        self,
        channel: Channel,
        answer: Answer,
        settings: Settings,
        drain: Drain,
        ops: Observer,
        clock: Clock,
    ) -> None:
        self.channel = channel
        self.answer = (
            answer  # the application's one answer per head (its listener's routes bound in)
        )
        self.settings = settings
        self.drain = drain
        self.clock = clock
        self.conn = h11.Connection(h11.SERVER)
        self.phase = Phase.OPENED
        self.head = bytearray()  # raw bytes received since the current head began
        self.head_only = False  # the request is HEAD: its response carries no body
        self.ops = ops
        self.exchange: Exchange | None = None  # the request being answered, once its head parsed
        self.route: Route | None = None  # the route that answered it, once the application did
        self.received = 0  # bytes of that request read: its head, then its body
        channel.on_next_bytes(self._arrived)

    def _arrived(self) -> None:
        """The channel holds bytes of the next head that the task has not read yet."""
        self.phase = after(self.phase, Step.ARRIVED)

    @property
    def closable(self) -> bool:
        """Between requests with no byte of the next one received: shutdown may just close it."""
        return self.phase in UNASKED

    # -- reading -------------------------------------------------------------

    async def _receive(self, deadline: float) -> None:
        remaining = deadline - self.clock()
        if remaining <= 0:
            raise Deadline
        try:
            data = await self.channel.read(remaining, READ_SIZE)
        except TimeoutError:
            raise Deadline from None
        if self.phase is Phase.BUFFERED:  # the bytes the channel reported: a head begins
            self.phase = after(self.phase, Step.BEGUN)
        if self.phase is Phase.HEAD:
            self.head += data
        self.conn.receive_data(data)

    async def _next_event(self, deadline: float) -> Received:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            await self._receive(deadline)

    async def _read_head(self) -> tuple[Received, bytearray]:
        """From OPENED, BUFFERED or HEAD: the head within the header timeout counted from now
        (the connection's start, or the end of the previous response)."""
        return await self._next_head(self.clock() + self.settings.header_timeout)

    async def _read_after_idle(self) -> tuple[Received, bytearray]:
        """From WAITING: the first byte within the idle timeout, then the head within the
        header timeout counted from that byte."""
        await self._receive(self.clock() + self.settings.idle_timeout)
        return await self._next_head(self.clock() + self.settings.header_timeout)

    async def _next_head(self, deadline: float) -> tuple[Received, bytearray]:
        """The next event, and the raw bytes of the head when it is a request."""
        event = await self._next_event(deadline)
        if not isinstance(event, h11.Request):
            return event, bytearray()
        self.head_only = event.method == b"HEAD"
        raw = self.head[: len(self.head) - len(self.conn.trailing_data[0])]
        self.head = bytearray()
        return event, raw

    async def _read_body(self) -> bytes:
        """The whole body, refusing before keeping any chunk that would pass the limit."""
        limit = self.settings.max_body_bytes
        deadline = self.clock() + self.settings.body_timeout
        chunks: list[bytes] = []
        size = 0
        while True:
            event = await self._next_event(deadline)
            if isinstance(event, h11.Data):
                size += len(event.data)
                refusal = body_refusal(size, limit)
                if refusal is not None:
                    raise refusal
                chunks.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(chunks)
            else:  # ConnectionClosed mid-body
                raise ClientGone

    # -- writing -------------------------------------------------------------

    async def _send(self, reply: Reply, close: bool = False) -> None:
        self.phase = after(self.phase, Step.REPLY)
        exchange, received = self.exchange, self.received
        if exchange is None:  # bytes that never became a head
            exchange, received = self.ops.begin(None), len(self.head)
        self.exchange = self.route = None
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
                await self.channel.drain(self.settings.idle_timeout)
        finally:
            self.ops.finish(exchange, reply, self.channel.peer, received, len(data))

    async def _refuse(self, error: ApiError) -> None:
        """The wire's own refusal, which closes the connection: under the route that answered the head, if any."""
        await self._send(Reply.error(error, route=self.route), close=True)

    # -- the loop ------------------------------------------------------------

    async def run(self) -> None:
        """Serve requests until the peer closes, a deadline passes or a reply closes."""
        try:
            while await self._serve_one() and not self.drain.active:
                self._next_cycle()
        except (TimeoutError, ClientGone, ConnectionError):
            pass
        except asyncio.CancelledError:
            # Shutdown's grace ran out: answer what is in progress, then end normally.
            await self._stopped()
        finally:
            await self._close()

    def _next_cycle(self) -> None:
        """A keep-alive exchange is over: the next head has begun (pipelined, already in h11's
        buffer) or nothing of it is here, and the channel is asked to report its first bytes."""
        self.conn.start_next_cycle()
        self.head = bytearray(self.conn.trailing_data[0])
        self.head_only = False
        if self.head:
            self.phase = after(self.phase, Step.BEGUN)
        else:
            self.phase = after(self.phase, Step.IDLE)
            self.channel.on_next_bytes(self._arrived)

    async def _close(self) -> None:
        """Close after flushing what is buffered; abort a peer that will not read it, or it holds the slot forever.

        A client that may still be sending (its request refused mid-head or mid-body) gets a
        lingering close, so that its unread bytes do not turn our answer into a reset.
        """
        sending = self.phase in STILL_SENDING
        self.phase = after(self.phase, Step.CLOSE)
        await self.channel.closed(self.settings.idle_timeout, LINGER_S if sending else 0.0)

    async def _stopped(self) -> None:
        """A request in progress (head, body or scoring) still gets an answer, never silence."""
        if self.phase not in IN_PROGRESS:
            return
        with contextlib.suppress(Exception):
            await self._refuse(
                ApiError("shutting_down", "the server stopped before this request finished")
            )

    async def _serve_one(self) -> bool:
        """Read one head as its phase says, check it and have it answered; True when the
        connection may carry another."""
        try:
            event, raw = await HEAD_READERS[self.phase](self)
            if not isinstance(event, h11.Request):
                return False  # ConnectionClosed between requests
            fields = Fields(event)
            self.received = len(raw)
            exchange = self.exchange = self.ops.begin(event, fields.once(b"x-request-id"))
            refusal = head_refusal(raw, fields)
            if refusal is not None:  # ambiguous: close rather than guess where the next head begins
                await self._refuse(refusal)
                return False
            return await self._dispatch(event, fields, exchange)
        except Deadline:
            late = LATE.get(self.phase)
            if late is not None:
                await self._refuse(ApiError("request_timeout", late))
        except h11.RemoteProtocolError as error:
            await self._protocol_error(error)
        return False

    async def _protocol_error(self, error: h11.RemoteProtocolError) -> None:
        """h11 refused the bytes: answer in the envelope (if we still may) and close."""
        if self.phase in REPLIED:
            return
        status = error.error_status_hint
        code = PROTOCOL_CODES.get(status, "bad_request")
        # h11 quotes the offending bytes (perhaps a credential) after ": bytearray(": keep its description only.
        message = excerpt(str(error).split(": bytearray(", 1)[0], 120) or "malformed request"
        await self._refuse(ApiError(code, message))

    async def _dispatch(self, request: h11.Request, fields: Fields, exchange: Exchange) -> bool:
        """Ask the application once (with the exchange's record, where it names the caller), then
        read the body a ticket takes."""
        unread = fields.has_body
        if not unread:  # an empty body: let h11 reach EndOfMessage so the connection can be reused
            await self._next_event(self.clock() + self.settings.body_timeout)
            self.phase = after(self.phase, Step.NO_BODY)
        head = Head(request.method, request.target, fields.first, self.drain.active)
        answer = self.answer(head, exchange)
        if isinstance(answer, Reply):
            await self._send(answer, close=unread or answer.close)
            return self._reusable()
        self.route = answer.route
        try:
            return await self._take(answer, unread)
        finally:
            answer.release()

    async def _take(self, ticket: Ticket, unread: bool) -> bool:
        """The body the ticket takes, then its reply."""
        try:
            if unread:
                self.phase = after(self.phase, Step.TAKEN)
            if self.conn.they_are_waiting_for_100_continue:
                self.channel.write(
                    self.conn.send(h11.InformationalResponse(status_code=100, headers=[]))
                )
            body = await self._read_body() if unread else b""
            self.received += len(body)
        except ApiError as error:
            await self._refuse(error)
            return False
        self.phase = after(self.phase, Step.READ)
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


# How the next head is read, by the phase the wire starts it in (h11's READERS is the model):
# nothing of it here on a kept-alive connection waits under the idle timeout first.
HEAD_READERS: Mapping[Phase, Callable[[HttpConnection], Awaitable[tuple[Received, bytearray]]]] = {
    Phase.OPENED: HttpConnection._read_head,
    Phase.BUFFERED: HttpConnection._read_head,
    Phase.HEAD: HttpConnection._read_head,
    Phase.WAITING: HttpConnection._read_after_idle,
}
