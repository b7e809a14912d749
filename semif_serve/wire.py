"""The wire: one asyncio task per connection, turning h11 events into actions.

h11 owns HTTP/1.1 framing (it validates Content-Length as plain ASCII digits,
chunked encoding, header sizes); this loop owns the policy around it: a head h11
tolerates but another parser could frame differently is refused, every
check on a POST head runs before a single body byte is kept, the body limit
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
from http import HTTPStatus
from typing import Awaitable

import h11

from .channel import Channel
from .config import Settings
from .errors import ApiError, envelope, excerpt
from .ops.operations import Exchange, Operations, peer_of
from .routes import Answer, Head, Reply, Ticket

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


class ClientGone(Exception):
    """The peer closed its side: nothing more can be answered."""


class Deadline(Exception):
    """A read did not complete in time."""


def _loose(raw: bytes) -> bool:
    """What h11 tolerates in a head but another parser in front may read differently (RFC 9112
    2.2, 5.2; RFC 9110 5.5): a bare LF or CR, an obs-fold line, a control byte other than HTAB.

    Counting instead of one regex with look-arounds: the same answer (a property test holds
    it to that regex) for a third of the CPU on every request head.
    """
    pairs = raw.count(b"\r\n")
    return (raw.count(b"\r") != pairs or raw.count(b"\n") != pairs  # a CR or LF outside a CRLF
            or b"\n " in raw or b"\n\t" in raw  # obs-fold
            or len(raw.translate(None, CONTROL_BYTES)) != len(raw))


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
    """One client connection: reads events with deadlines, answers through the service."""

    def __init__(self, channel: Channel, answer: Answer, settings: Settings, drain: Drain, ops: Operations) -> None:
        self.channel = channel
        self.answer = answer  # the application's one answer per head (its listener's routes bound in)
        self.settings = settings
        self.drain = drain
        self.conn = h11.Connection(h11.SERVER)
        self.idle = True  # waiting for a request to begin
        self.head = bytearray()  # raw bytes received since the current head began
        self.head_only = False  # the request is HEAD: its response carries no body
        self.ops = ops
        self.peer = peer_of(channel.transport)
        self.exchange: Exchange | None = None  # the request being answered, once its head parsed
        self.head_bytes = 0

    @property
    def closable(self) -> bool:
        """Between requests with no byte of the next one received: shutdown may just close it."""
        return self.idle and not self.conn.trailing_data[0] and not self.channel.buffered

    # -- reading -------------------------------------------------------------

    async def _receive(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Deadline
        try:
            data = await self.channel.read(remaining, READ_SIZE)
        except TimeoutError:
            raise Deadline from None
        if self.conn.their_state is h11.IDLE:
            self.head += data
        self.conn.receive_data(data)

    async def _next_event(self, deadline: float) -> h11.Event:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            await self._receive(deadline)

    async def _next_request(self, first: bool) -> h11.Event:
        """The next request head, under the idle and header deadlines."""
        now = time.monotonic()
        self.head = bytearray(self.conn.trailing_data[0])
        self.head_only = False
        if first or self.head:
            return await self._next_head(now + self.settings.header_timeout)
        # Keep-alive: wait for the first byte under the idle timeout, then the head
        # must complete within the header timeout counted from that byte.
        self.idle = True
        await self._receive(now + self.settings.idle_timeout)
        self.idle = False
        return await self._next_head(time.monotonic() + self.settings.header_timeout)

    async def _next_head(self, deadline: float) -> h11.Event:
        """The next event; a request head must also pass the checks h11 leaves out."""
        event = await self._next_event(deadline)
        if isinstance(event, h11.Request):
            self.head_only = event.method == b"HEAD"
            raw = self.head[: len(self.head) - len(self.conn.trailing_data[0])]
            self.head = bytearray()
            self.head_bytes = len(raw)
            if len(raw) > MAX_HEAD:
                raise h11.RemoteProtocolError(f"request head over {MAX_HEAD} bytes", 431)
            if _loose(raw):
                raise h11.RemoteProtocolError("request head has a bare LF or CR, an obs-fold or a control byte", 400)
        return event

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
                    raise ApiError("request_too_large", f"body over the {limit}-byte limit")
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
        data = self.conn.send(head) + self.conn.send(h11.Data(data=body)) + self.conn.send(h11.EndOfMessage())
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
        except (ClientGone, ConnectionError, asyncio.TimeoutError):
            pass
        except asyncio.CancelledError:
            # Shutdown's grace ran out: answer what is in progress, then end normally.
            await self._stopped()
        finally:
            await self._close()

    async def _close(self) -> None:
        """Close after flushing what is buffered; abort a peer that will not read it, or it holds the slot forever.

        A client that may still be sending (its request refused mid-head or mid-body) gets a
        lingering close, so that its unread bytes do not turn our answer into a reset.
        """
        sending = self.conn.their_state in (h11.SEND_BODY, h11.ERROR) or (
            self.conn.their_state is h11.IDLE and not self.closable)
        await self.channel.closed(self.settings.idle_timeout, LINGER_S if sending else 0.0)

    async def _stopped(self) -> None:
        """A request in progress (head, body or scoring) still gets an answer, never silence."""
        if self.closable or self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        with contextlib.suppress(Exception):
            await self._send(Reply.error(ApiError("shutting_down", "the server stopped before this request finished")), close=True)

    async def _serve_one(self, first: bool) -> bool:
        """Answer one request; True when the connection may carry another."""
        try:
            event = await self._next_request(first)
        except Deadline:
            if self.conn.trailing_data[0] or not self.idle:
                await self._send(Reply.error(ApiError("request_timeout", "request head not received in time")), close=True)
            return False
        except h11.RemoteProtocolError as error:
            await self._protocol_error(error)
            return False
        if not isinstance(event, h11.Request):
            return False  # ConnectionClosed between requests
        self.idle = False
        fields = Fields(event)
        self.exchange = self.ops.begin(event, self.head_bytes, fields.once(b"x-request-id"))
        try:
            return await self._dispatch(event, fields)
        except Deadline:
            await self._send(Reply.error(ApiError("request_timeout", "request body not received in time")), close=True)
        except h11.RemoteProtocolError as error:
            await self._protocol_error(error)
        return False

    async def _protocol_error(self, error: h11.RemoteProtocolError) -> None:
        """h11 refused the bytes: answer in the envelope (if we still may) and close."""
        if self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        status = error.error_status_hint
        code = PROTOCOL_CODES.get(status, "bad_request")
        # h11 quotes the offending bytes (perhaps a credential) after ": bytearray(": keep its description only.
        message = excerpt(str(error).split(": bytearray(", 1)[0], 120) or "malformed request"
        await self._send(Reply(ApiError(code, "").status, envelope(code, message), code=code), close=True)

    async def _dispatch(self, request: h11.Request, fields: Fields) -> bool:
        """Run the wire's framing checks, ask the application once, then read the body a ticket takes."""
        unread = fields.has_body
        if not unread:  # an empty body: let h11 reach EndOfMessage so the connection can be reused
            await self._next_event(time.monotonic() + self.settings.body_timeout)
        if fields.get(b"transfer-encoding") is not None and fields.get(b"content-length") is not None:
            # Both framings is the request-smuggling classic: refuse and close on every route (RFC 9112 6.1).
            await self._refuse(ApiError("bad_request", "both Content-Length and Transfer-Encoding are set"), unread)
            return self._reusable()
        if fields.repeated:  # the head is ambiguous: close rather than guess where the next request begins
            await self._refuse(ApiError("bad_request", f"the {fields.repeated[0].decode()} field appears more than once"),
                               close=True)
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
            if self.conn.they_are_waiting_for_100_continue:
                self.channel.write(self.conn.send(h11.InformationalResponse(status_code=100, headers=[])))
            body = await self._read_body() if unread else b""
        except ApiError as error:
            await self._refuse(error, close=True)
            return False
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
