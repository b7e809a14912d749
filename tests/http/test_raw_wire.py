"""Malformed and ambiguous requests on a raw socket.

Each one gets exactly its 4xx envelope and a close: never a 200 for a
message two parsers could frame differently (request smuggling), never an
unhandled exception, and the server answers the next connection normally.
"""

from __future__ import annotations

import pytest

from tests.request_bodies import BODY
from tests.wire_client import (
    HEALTH,
    TOKEN,
    Connection,
    assert_serving,
    connections_closed,
    no_error_logs,  # noqa: F401 - fixture
    parse_responses,
    raw_request,
    raw_responses,
    raw_session,
)

pytestmark = pytest.mark.usefixtures("no_error_logs")

N = str(len(BODY)).encode()


def chunked(body: bytes) -> bytes:
    return b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"


def te(coding: bytes, body: bytes = chunked(BODY)) -> bytes:
    return raw_request(fields=b"transfer-encoding: " + coding + b"\r\n", body=body)


def cl(*values: bytes, body: bytes = BODY) -> bytes:
    return raw_request(
        fields=b"".join(b"content-length: " + v + b"\r\n" for v in values), body=body
    )


def bad_chunks(body: bytes) -> bytes:
    return raw_request(fields=b"transfer-encoding: chunked\r\n", body=body)


REFUSED = {
    # both framings: RFC 9112 6.1 says treat as an error; on every route, not only the scored ones
    "cl-then-te": raw_request(
        fields=b"content-length: " + N + b"\r\ntransfer-encoding: chunked\r\n", body=chunked(BODY)
    ),
    "te-then-cl": raw_request(
        fields=b"transfer-encoding: chunked\r\ncontent-length: " + N + b"\r\n", body=chunked(BODY)
    ),
    "cl-and-te-on-health": raw_request(
        b"GET", b"/health", b"content-length: 5\r\ntransfer-encoding: chunked\r\n", b"0\r\n\r\n"
    ),
    "cl-and-te-unauthorised": raw_request(
        fields=b"content-length: 5\r\ntransfer-encoding: chunked\r\n", body=b"0\r\n\r\n", auth=False
    ),
    # Content-Length values
    "cl-conflicting": cl(N, N + b"0"),
    "cl-list": cl(N + b", " + N + b"0"),
    "cl-plus": cl(b"+" + N),
    "cl-minus": cl(b"-" + N),
    "cl-inner-space": cl(N[:1] + b" " + N[1:]),
    "cl-hex": cl(b"0x%x" % len(BODY)),
    "cl-empty": cl(b""),
    # codings other than a lone chunked
    "te-gzip-chunked": te(b"gzip, chunked"),
    "te-chunked-gzip": te(b"chunked, gzip"),
    "te-chunked-twice-in-one": te(b"chunked, chunked"),
    "te-identity": te(b"identity"),
    "te-gzip": te(b"gzip"),
    "te-xchunked": te(b"xchunked"),
    "te-two-headers": raw_request(
        fields=b"transfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n", body=chunked(BODY)
    ),
    "te-space-before-colon": raw_request(
        fields=b"transfer-encoding : chunked\r\n", body=chunked(BODY)
    ),
    # chunk sizes and terminators
    "chunk-size-negative": bad_chunks(b"-1\r\n" + BODY + b"\r\n0\r\n\r\n"),
    "chunk-size-0x": bad_chunks(b"0x%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n"),
    "chunk-size-not-hex": bad_chunks(b"zz\r\n" + BODY + b"\r\n0\r\n\r\n"),
    "chunk-size-21-digits": bad_chunks(b"1" * 21 + b"\r\n" + BODY),
    "chunk-terminator-missing": bad_chunks(b"%x\r\n" % len(BODY) + BODY + b"XX0\r\n\r\n"),
    "chunk-bare-lf": bad_chunks(b"%x\n" % len(BODY) + BODY + b"\n0\n\n"),
    "chunk-over-announced": bad_chunks(b"%x\r\n" % (len(BODY) - 1) + BODY + b"\r\n0\r\n\r\n"),
    # line endings, folding and control bytes in the head: tolerated by h11, read differently by others
    "obs-fold": cl(N).replace(b"host: x", b"host: x\r\nx-note: one\r\n two"),
    "obs-fold-te": raw_request(fields=b"transfer-encoding:\r\n chunked\r\n", body=chunked(BODY)),
    "bare-lf-head": cl(N).replace(b"\r\n", b"\n"),
    "bare-lf-hides-te": raw_request(
        fields=b"x-note: a\ntransfer-encoding: chunked\r\n", body=chunked(BODY)
    ),
    "bare-cr": raw_request(fields=b"x-note: a\rtransfer-encoding: chunked\r\n", body=chunked(BODY)),
    "nul-in-value": cl(N).replace(b"host: x", b"host: x\r\nx-note: a\x00b"),
    "ctl-in-value": cl(N).replace(b"host: x", b"host: x\r\nx-note: a\x01b"),
    "del-in-value": cl(N).replace(b"host: x", b"host: x\r\nx-note: a\x7fb"),
    "ctl-in-name": cl(N).replace(b"host: x", b"host: x\r\nx-\x01: b"),
    "nul-in-target": raw_request(b"GET", b"/health\x00", auth=False),
    "ctl-in-host": raw_request(b"GET", b"/health", auth=False).replace(b"host: x", b"host: \x01"),
    # request lines
    "invalid-method": raw_request(b"G(T", b"/health", auth=False),
    "method-with-space": raw_request(b"GE T", b"/health", auth=False),
    "http-0.9": b"GET /health\r\n\r\n",
    "two-spaces": b"GET  /health HTTP/1.1\r\nhost: x\r\n\r\n",
    "missing-host": b"GET /health HTTP/1.1\r\n\r\n",
    "two-hosts": b"GET /health HTTP/1.1\r\nhost: x\r\nhost: y\r\n\r\n",
    "leading-space-field": b"GET /health HTTP/1.1\r\n host: x\r\n\r\n",
    "oversized-request-line": raw_request(b"GET", b"/" + b"a" * 20_000, auth=False),
    "oversized-header-block": raw_request(
        b"GET",
        b"/health",
        b"".join(b"x-%d: %s\r\n" % (i, b"v" * 100) for i in range(200)),
        auth=False,
    ),
    "oversized-header-in-pieces": raw_request(
        b"GET", b"/health", b"x-big: " + b"v" * 70_000 + b"\r\n", auth=False
    ),
}


TOO_LARGE = {"oversized-request-line", "oversized-header-block", "oversized-header-in-pieces"}


@pytest.mark.parametrize("name", REFUSED)
async def test_malformed_and_ambiguous_requests_are_refused_and_closed(
    start_server, fake, name
) -> None:
    server = await start_server(fake, header_timeout=0.5, body_timeout=0.5)
    exchange = await raw_session(server.port, REFUSED[name] + HEALTH)
    assert exchange.closed
    (response,) = parse_responses(
        exchange.data, strict=True
    )  # the pipelined /health behind it is never answered
    expected = (431, "headers_too_large") if name in TOO_LARGE else (400, "bad_request")
    assert (response.status, response.code) == expected and response.headers[
        b"connection"
    ] == b"close"
    message = response.json["error"]["message"]
    assert len(message) <= 200 and message.isprintable()
    assert fake.calls == []
    assert server.service.admission.in_progress == 0
    await assert_serving(server.port)


@pytest.mark.parametrize(
    "data,status",
    [
        (raw_request(b"GET", b"/" + b"a" * 20_000, auth=False), 431),
        (raw_request(b"GET", b"/health", b"x-big: " + b"v" * 17_000 + b"\r\n", auth=False), 431),
        (
            raw_request(
                fields=b"content-length: " + N + b"\r\ntransfer-encoding: chunked\r\n",
                body=chunked(BODY),
            ),
            400,
        ),
        (
            raw_request(
                b"GET",
                b"/health",
                b"content-length: 5\r\ntransfer-encoding: chunked\r\n",
                b"0\r\n\r\n",
            ),
            400,
        ),
        (te(b"gzip, chunked"), 400),
        (cl(N).replace(b"\r\n", b"\n"), 400),
    ],
)
async def test_the_refusal_names_the_fault(start_server, fake, data, status) -> None:
    """The cases a caller can act on get their own status: 431 for a head over 16 KiB, however it arrives."""
    server = await start_server(fake)
    (response,) = parse_responses((await raw_session(server.port, data)).data)
    assert response.status == status


ACCEPTED = {
    # unambiguous variants that RFC 9110/9112 define one reading for
    "cl-duplicated-identical": cl(N, N),
    "cl-padded-with-ows": cl(b"  " + N + b"\t"),
    "te-mixed-case": te(b"Chunked"),
    "chunk-extension": bad_chunks(b"%x;name=value\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n"),
    "chunk-trailer": bad_chunks(b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\nx-trailer: t\r\n\r\n"),
    "chunks-split": bad_chunks(
        b"".join(
            b"%x\r\n%s\r\n" % (len(BODY[i : i + 7]), BODY[i : i + 7])
            for i in range(0, len(BODY), 7)
        )
        + b"0\r\n\r\n"
    ),
    "obs-text-in-value": cl(N).replace(b"host: x", b"host: x\r\nx-note: caf\xe9"),
    "tab-in-value": cl(N).replace(b"host: x", b"host: x\r\nx-note: a\tb"),
}


@pytest.mark.parametrize("data", ACCEPTED.values(), ids=ACCEPTED.keys())
async def test_unambiguous_variants_are_served_and_keep_the_connection(
    start_server, fake, data
) -> None:
    server = await start_server(fake)
    exchange = await raw_responses(server.port, data + HEALTH, 2)
    statuses = [r.status for r in parse_responses(exchange.data, strict=True)]
    assert statuses == [200, 200] and not exchange.closed
    assert [kind for kind, _ in fake.calls] == ["direct"]


async def test_http_1_0_is_answered_once_and_closed(start_server, fake) -> None:
    server = await start_server(fake)
    for keep_alive in (b"", b"connection: keep-alive\r\n"):
        data = b"GET /health HTTP/1.0\r\n" + keep_alive + b"\r\n" + HEALTH
        exchange = await raw_session(server.port, data)
        responses = parse_responses(exchange.data, strict=True)
        assert [r.status for r in responses] == [200] and exchange.closed
        assert responses[0].headers[b"connection"] == b"close"


@pytest.mark.parametrize(
    "method,target,status",
    [
        (b"get", b"/health", 405),
        (b"BREW", b"/decide", 405),
        (b"GET", b"/health?x=" + b"%00" * 100, 200),
    ],
)
async def test_unusual_but_valid_request_lines_are_routed(
    start_server, fake, method, target, status
) -> None:
    server = await start_server(fake)
    (response,) = parse_responses(
        (await raw_responses(server.port, raw_request(method, target), 1)).data
    )
    assert response.status == status


@pytest.mark.parametrize("path,status", [("/health", 200), ("/decide", 405), ("/nope", 404)])
async def test_a_head_request_gets_its_status_without_a_body_and_the_connection_lives(
    start_server, fake, path, status
) -> None:
    server = await start_server(fake)
    connection = await Connection.open(server.port)
    response = await connection.request(
        "HEAD", path, headers=[]
    )  # h11 reads a HEAD response as head only
    assert (
        response.status == status
        and response.body == b""
        and int(response.headers[b"content-length"]) > 0
    )
    assert (await connection.request("GET", "/health", headers=[])).status == 200
    await connection.close()


async def test_a_head_request_refused_by_the_head_checks_gets_no_body(start_server, fake) -> None:
    server = await start_server(fake)
    exchange = await raw_session(
        server.port, b"HEAD /health HTTP/1.1\r\nhost: x\nx-note: a\r\n\r\n"
    )
    assert (
        exchange.closed
        and exchange.data.startswith(b"HTTP/1.1 400 ")
        and exchange.data.endswith(b"\r\n\r\n")
    )


# -- pipelining behind a closing response -------------------------------------------------------


@pytest.mark.parametrize(
    "first,status,scored",
    [
        (raw_request(b"GET", b"/health", b"connection: close\r\n", auth=False), 200, 0),
        (
            raw_request(fields=b"connection: close\r\ncontent-length: " + N + b"\r\n", body=BODY),
            200,
            1,
        ),
        (
            raw_request(
                fields=b"connection: close\r\ncontent-length: " + N + b"\r\n", body=BODY, auth=False
            ),
            401,
            0,
        ),
        (raw_request(b"GET", b"/nope", b"connection: close\r\n", auth=False), 404, 0),
    ],
)
async def test_nothing_behind_a_connection_close_request_is_answered(
    start_server, fake, first, status, scored
) -> None:
    server = await start_server(fake)
    second = raw_request(fields=b"content-length: " + N + b"\r\n", body=BODY)
    exchange = await raw_session(server.port, first + second + HEALTH)
    responses = parse_responses(exchange.data, strict=True)
    assert len(responses) == 1 and exchange.closed
    assert responses[0].headers[b"connection"] == b"close"
    assert responses[0].status == status and len(fake.calls) == scored


async def test_nothing_behind_a_protocol_error_is_answered_even_a_valid_post(
    start_server, fake
) -> None:
    server = await start_server(fake)
    valid = raw_request(fields=b"content-length: " + N + b"\r\n", body=BODY)
    exchange = await raw_session(server.port, bad_chunks(b"zz\r\n") + valid + valid)
    assert [r.status for r in parse_responses(exchange.data, strict=True)] == [
        400
    ] and exchange.closed
    assert fake.calls == []


async def test_a_100_kb_target_is_refused_with_a_short_message(start_server, fake) -> None:
    server = await start_server(fake)
    data = raw_request(b"GET", b"/" + b"\x1b[31m" * 20_000, auth=False)
    (response,) = parse_responses((await raw_session(server.port, data)).data)
    assert (response.status, response.code) == (431, "headers_too_large")
    message = response.json["error"]["message"]
    assert len(message) <= 200 and message.isprintable()


async def test_a_protocol_error_message_never_echoes_the_malformed_line_in_full(
    start_server, fake
) -> None:
    server = await start_server(fake)
    line = b"authorization : Bearer " + TOKEN.encode() + b" " + b"x" * 10_000
    (response,) = parse_responses(
        (await raw_session(server.port, raw_request(b"GET", b"/health", line + b"\r\n"))).data
    )
    assert response.status == 400
    message = response.json["error"]["message"]
    assert len(message) <= 200 and message.isprintable() and TOKEN not in message


# -- expect, early close --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields,auth,status",
    [
        (b"content-length: 10\r\n", False, 401),
        (b"content-length: 999999999\r\n", True, 413),
        (b"content-length: 10\r\ntransfer-encoding: chunked\r\n", True, 400),
    ],
)
async def test_a_refused_request_never_gets_100_continue(
    start_server, fake, fields, auth, status
) -> None:
    server = await start_server(fake, max_body_bytes=1000)
    data = raw_request(fields=b"expect: 100-continue\r\n" + fields, auth=auth)
    exchange = await raw_session(server.port, data)
    assert not exchange.data.startswith(b"HTTP/1.1 100")
    assert [r.status for r in parse_responses(exchange.data, strict=True)] == [
        status
    ] and exchange.closed


async def test_a_client_that_closes_mid_body_never_reaches_the_scorer(start_server, fake) -> None:
    server = await start_server(fake)
    connection = await Connection.open(server.port)
    connection.writer.write(raw_request(fields=b"content-length: " + N + b"\r\n", body=BODY[:10]))
    await connection.writer.drain()
    await connection.close()
    await connections_closed(server)
    assert fake.calls == [] and server.service.admission.in_progress == 0
