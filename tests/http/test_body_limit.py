"""The body limit is one function (`body_refusal`) with two call sites: the declared length
before a byte of the body is read (Service._admit, after admission), and the running size
before the wire keeps each chunk.
The head's own checks are one function too (`head_refusal`), tested here as a list.
On a real socket: test_overload.py (a declared 413 frees its slot), test_chunk_size.py and
test_raw_wire.py (per chunk); here in memory, which call site answered and what it said."""

from __future__ import annotations

import h11
import pytest

from semif_serve.http.connection import MAX_HEAD, Fields, head_refusal
from semif_serve.http.exchange import body_refusal
from tests.request_bodies import BODY
from tests.wire_client import raw_request

LIMIT = 100
RAISE = "the server's SEMIF_MAX_BODY_BYTES raises it"


def test_the_limit_itself_is_allowed_and_one_byte_over_is_refused() -> None:
    assert body_refusal(0, LIMIT) is None and body_refusal(LIMIT, LIMIT, declared=True) is None
    for declared, message in ((False, "body over"), (True, "declared body over")):
        refusal = body_refusal(LIMIT + 1, LIMIT, declared)
        assert refusal is not None and (refusal.status, refusal.code) == (413, "request_too_large")
        assert refusal.message == f"{message} the {LIMIT}-byte limit; {RAISE}"


async def test_a_declared_length_over_the_limit_is_refused_before_any_body_or_100_continue(
    memory_server, fake
) -> None:
    memory = await memory_server(max_body_bytes=LIMIT)
    wire = await memory.connect()
    await wire.channel.send(
        raw_request(fields=b"content-length: %d\r\nexpect: 100-continue\r\n" % (LIMIT + 1))
    )
    (response,) = wire.channel.responses()  # no 100 Continue before it
    assert (response.status, response.code) == (413, "request_too_large")
    assert (
        response.json["error"]["message"] == f"declared body over the {LIMIT}-byte limit; {RAISE}"
    )
    assert response.headers[b"connection"] == b"close" and wire.done
    assert memory.server.service.admission.in_progress == 0 and fake.calls == []


async def test_a_chunked_body_is_refused_at_the_chunk_that_passes_the_limit(
    memory_server, fake
) -> None:
    memory = await memory_server(max_body_bytes=len(BODY) - 1)
    wire = await memory.connect()
    chunks = b"%x\r\n%s\r\n" % (len(BODY) - 1, BODY[:-1]) + b"1\r\n%s\r\n0\r\n\r\n" % BODY[-1:]
    await wire.channel.send(raw_request(fields=b"transfer-encoding: chunked\r\n", body=chunks))
    (response,) = wire.channel.responses()
    assert (response.status, response.code) == (413, "request_too_large")
    message = f"body over the {len(BODY) - 1}-byte limit; {RAISE}"
    assert response.json["error"]["message"] == message
    assert memory.server.service.admission.in_progress == 0 and fake.calls == []


def fields(*pairs: tuple[bytes, bytes]) -> Fields:
    return Fields(h11.Request(method="GET", target="/", headers=[(b"host", b"x"), *pairs]))


HEADS = {
    "plain": (b"GET / HTTP/1.1\r\nhost: x\r\n\r\n", fields(), None),
    "over 16 KiB": (b"x" * (MAX_HEAD + 1), fields(), (431, "request head over 16384 bytes")),
    "16 KiB": (b"x" * MAX_HEAD, fields(), None),
    "bare LF": (
        b"GET / HTTP/1.1\nhost: x\r\n\r\n",
        fields(),
        (400, "request head has a bare LF or CR, an obs-fold or a control byte"),
    ),
    "both framings": (
        b"",
        fields((b"content-length", b"1"), (b"transfer-encoding", b"chunked")),
        (400, "both Content-Length and Transfer-Encoding are set"),
    ),
    "repeated X-Request-Id": (
        b"",
        fields((b"x-request-id", b"a"), (b"x-request-id", b"b")),
        (400, "the x-request-id field appears more than once"),
    ),
    "repeated field we never read": (b"", fields((b"x-note", b"a"), (b"x-note", b"b")), None),
}


@pytest.mark.parametrize("name", HEADS)
def test_the_head_checks_return_the_refusal_or_nothing(name: str) -> None:
    raw, parsed, expected = HEADS[name]
    refusal = head_refusal(raw, parsed)
    assert (None if refusal is None else (refusal.status, refusal.message)) == expected


@pytest.mark.parametrize(
    "head",
    [
        b"GET /health HTTP/1.1\nhost: x\r\nx-request-id: probe-7\r\n\r\n",
        b"GET /health HTTP/1.1\r\nhost: x\r\nx-request-id: probe-7\r\nx-big: "
        + b"v" * MAX_HEAD
        + b"\r\n\r\n",
    ],
    ids=["bare LF", "over 16 KiB"],
)
async def test_a_refused_head_echoes_the_request_id_it_carried(memory_server, head) -> None:
    """The head parsed before the wire's checks refused it: its X-Request-Id is echoed, as on every
    other response (h11's own refusals come before any field is read, and carry a generated one)."""
    memory = await memory_server()
    wire = await memory.connect()
    await wire.channel.send(head)
    (response,) = wire.channel.responses()
    assert response.status in (400, 431) and response.headers[b"x-request-id"] == b"probe-7"
    assert response.headers[b"connection"] == b"close" and wire.done
