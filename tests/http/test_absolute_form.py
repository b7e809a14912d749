"""Absolute-form request targets (RFC 9112 3.2.2: a server MUST accept them), on a raw socket.

Routed by the target's path. The target's authority must name the host `Host` names (scheme
and host compared case-blind, an omitted port read as the scheme's default): a proxy in front
may have routed on either one, so a request whose two disagree is refused 400 before routing.
`OPTIONS *` stays 404: no endpoint here is `*`, and the server implements no OPTIONS.
"""

from __future__ import annotations

import pytest

from tests.request_bodies import BODY
from tests.wire_client import AUTH_LINE, Response, no_error_logs, parse_responses, raw_responses  # noqa: F401 - fixture

pytestmark = pytest.mark.usefixtures("no_error_logs")

FRAMED = b"content-length: %d\r\n" % len(BODY)


def line(
    method: bytes, target: bytes, host: bytes | None, fields: bytes = b"", body: bytes = b""
) -> bytes:
    """One request with its Host field (or none, in HTTP/1.0) spelled out, authorised."""
    version, host_line = (
        (b"HTTP/1.1", b"host: " + host + b"\r\n") if host is not None else (b"HTTP/1.0", b"")
    )
    return (
        method
        + b" "
        + target
        + b" "
        + version
        + b"\r\n"
        + host_line
        + AUTH_LINE
        + fields
        + b"\r\n"
        + body
    )


async def answers(port: int, data: bytes, count: int = 2) -> list[Response]:
    """The responses to `data` followed by a plain GET /health on the same connection."""
    exchange = await raw_responses(port, data + b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n", count)
    return parse_responses(exchange.data)


@pytest.mark.parametrize(
    "target,host",
    [
        (b"http://127.0.0.1/decide", b"127.0.0.1"),
        (
            b"HTTP://Example.COM/decide?trace=1",
            b"example.com",
        ),  # scheme and host are case-insensitive
        (b"http://x:80/decide", b"x"),  # the default port, spelled out on one side only
        (b"http://x/decide", b"x:80"),
        (b"https://x:443/decide", b"X"),
        (b"http://[::1]:8000/decide", b"[::1]:8000"),
    ],
)
async def test_an_absolute_form_post_is_routed_by_its_path_and_scored(
    start_server, fake, target, host
) -> None:
    server = await start_server(fake)
    first, after = await answers(server.port, line(b"POST", target, host, FRAMED, BODY))
    assert first.status == 200 and first.json["id"] == "r1"
    assert after.status == 200 and len(fake.calls) == 1
    (metrics, _) = await answers(server.port, b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
    assert (
        'semif_http_requests_total{caller="default",route="/decide",status="200"} 1.0'
        in metrics.body.decode()
    )  # counted by path


async def test_absolute_form_reaches_every_route_and_http_1_0_without_host(
    start_server, fake
) -> None:
    server = await start_server(fake)
    health, metrics, missing, after = await answers(
        server.port,
        line(b"GET", b"http://x/health", b"x")
        + line(b"GET", b"http://x/metrics?name=1", b"x")
        + line(b"GET", b"http://x/nope", b"x"),
        4,
    )
    assert (health.status, metrics.status, missing.status, after.status) == (200, 200, 404, 200)
    assert (
        missing.json["error"]["message"].partition("; ")[0] == "no endpoint at /nope"
    )  # the path, not the whole target
    empty, _ = await answers(server.port, line(b"GET", b"http://x?q=1", b"x"))
    assert (
        empty.status == 404
        and empty.json["error"]["message"].partition("; ")[0] == "no endpoint at /"
    )  # an empty path is "/"
    (old,) = parse_responses(
        (await raw_responses(server.port, line(b"GET", b"http://x/health", None), 1)).data
    )
    assert old.status == 200  # HTTP/1.0 may omit Host: the target's authority stands alone


DIFFERENT = "the request target's authority and the Host field name different hosts"
INVALID = "the request target's authority or the Host field is not a valid host"


@pytest.mark.parametrize(
    "target,host,message",
    [
        (b"http://elsewhere/decide", b"x", DIFFERENT),
        (b"http://x:8080/decide", b"x", DIFFERENT),  # the same host, another port
        (b"http://x/decide", b"x:8080", DIFFERENT),
        (b"https://x/decide", b"x:80", DIFFERENT),  # https's default port is 443
        (
            b"http://user@x/decide",
            b"x",
            INVALID,
        ),  # userinfo: an error in an http URI (RFC 9110 4.2.4)
        (b"http://x/decide", b"user@x", INVALID),
        (b"http://[::1/decide", b"x", INVALID),  # not a URI urllib can split
        (b"http://x:port/decide", b"x", INVALID),
        (b"http:///decide", b"x", INVALID),  # no host at all
    ],
)
async def test_an_authority_that_disagrees_with_host_is_400_and_never_scored(
    start_server, fake, target, host, message
) -> None:
    server = await start_server(fake)
    exchange = await raw_responses(server.port, line(b"POST", target, host, FRAMED, BODY), 1)
    (response,) = parse_responses(exchange.data)
    assert (
        response.status == 400
        and response.code == "bad_request"
        and response.json["error"]["message"] == message
    )
    assert (
        exchange.closed and fake.calls == []
    )  # its body was left unread: closed, as every such refusal
    first, after = await answers(
        server.port, line(b"GET", target.replace(b"/decide", b"/health"), host)
    )
    assert first.status == 400 and after.status == 200  # without a body the connection carries on


@pytest.mark.parametrize("target", [b"ftp://x/decide", b"x/decide", b"*"])
async def test_other_target_forms_stay_404(start_server, fake, target) -> None:
    server = await start_server(fake)
    first, after = await answers(
        server.port, line(b"OPTIONS" if target == b"*" else b"GET", target, b"x")
    )
    assert first.status == 404 and first.code == "not_found" and after.status == 200
