"""The request fields the wire reads in one pass (wire.Fields), on a real socket.

A field that appears twice where one copy is expected is ambiguous: the request is
refused 400, and a repeated X-Request-Id is echoed by neither copy (a fresh id).
"""

from __future__ import annotations

from tests.wire_client import GENERATED, parse_responses, raw_exchange, raw_request


async def test_a_repeated_request_id_is_refused_and_answered_with_a_fresh_id(
    start_server, fake
) -> None:
    server = await start_server(fake)
    twice = raw_request(
        b"GET", b"/health", b"x-request-id: first\r\nx-request-id: second\r\n", auth=False
    )
    (response,) = parse_responses(await raw_exchange(server.port, twice))
    assert (response.status, response.code) == (400, "bad_request")
    assert GENERATED.fullmatch(response.headers[b"x-request-id"])


async def test_a_request_id_sent_once_beside_a_repeated_authorization_is_still_echoed(
    start_server, fake
) -> None:
    server = await start_server(fake)
    fields = b"x-request-id: kept-1\r\nauthorization: Bearer a\r\n"  # a second Authorization after the helper's
    (response,) = parse_responses(
        await raw_exchange(server.port, raw_request(b"POST", b"/decide", fields))
    )
    assert (response.status, response.code) == (400, "bad_request")
    assert response.headers[b"x-request-id"] == b"kept-1"
    assert fake.calls == []
