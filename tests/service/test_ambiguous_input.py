"""Two defects found when tried as a new user would: repeated singleton fields and JSON numbers
that overflow a double. Each is refused before the scorer is reached, and the server keeps serving."""

from __future__ import annotations

import json

import pytest

from tests.request_bodies import ROW, SHARED
from tests.wire_client import (
    AUTH_LINE,
    TOKEN,
    assert_serving,
    parse_responses,
    raw_exchange,
    raw_request,
    raw_session,
    request,
)

BODY = json.dumps(ROW).encode()
LENGTH = b"content-length: %d\r\n" % len(BODY)
WRONG = b"authorization: Bearer " + b"w" * len(TOKEN) + b"\r\n"


@pytest.mark.parametrize(
    "fields",
    [
        AUTH_LINE + WRONG,  # the right token first, a wrong one second: was served 200
        WRONG + AUTH_LINE,
        AUTH_LINE + AUTH_LINE,  # even two identical copies: a proxy may have checked either
    ],
    ids=["right-then-wrong", "wrong-then-right", "identical"],
)
async def test_a_repeated_authorization_is_400_and_never_scored(start_server, fake, fields) -> None:
    server = await start_server(fake)
    exchange = await raw_session(
        server.port, raw_request(fields=fields + LENGTH, body=BODY, auth=False)
    )
    (response,) = parse_responses(exchange.data, strict=True)
    assert response.status == 400 and response.code == "bad_request"
    assert (
        "authorization" in response.json["error"]["message"] and TOKEN not in response.body.decode()
    )
    assert exchange.closed and fake.calls == []
    await assert_serving(server.port)


@pytest.mark.parametrize("method,target", [(b"POST", b"/decide"), (b"GET", b"/health")])
async def test_a_repeated_request_id_is_400(start_server, fake, method, target) -> None:
    server = await start_server(fake)
    fields = b"x-request-id: one\r\nx-request-id: two\r\n" + (LENGTH if method == b"POST" else b"")
    (response,) = parse_responses(
        await raw_exchange(
            server.port, raw_request(method, target, fields, BODY if method == b"POST" else b"")
        )
    )
    assert response.status == 400 and response.code == "bad_request" and fake.calls == []


@pytest.mark.parametrize(
    "fields,status",
    [
        (b"host: other\r\n", 400),  # h11: a second Host
        (b"transfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n", 400),  # h11
        (LENGTH.replace(b": ", b": 1"), 400),  # two different lengths (h11)
        (LENGTH, 200),  # the same length twice is one length (RFC 9112 6.3; h11 folds them)
        (
            b"content-type: application/json\r\ncontent-type: text/plain\r\n",
            200,
        ),  # never read: let be
    ],
    ids=[
        "host",
        "transfer-encoding",
        "content-length-differs",
        "content-length-same",
        "content-type",
    ],
)
async def test_the_other_repeated_fields_as_decided(start_server, fake, fields, status) -> None:
    server = await start_server(fake)
    data = await raw_exchange(
        server.port, raw_request(fields=LENGTH + fields + b"connection: close\r\n", body=BODY)
    )
    (response,) = parse_responses(data)
    assert response.status == status
    assert len(fake.calls) == (1 if status == 200 else 0)


@pytest.mark.parametrize("number", ["1e999999", "-1e400", "1.8e308"])
@pytest.mark.parametrize(
    "path,template",
    [
        (
            "/decide",
            '{"id": "r", "state": {"v": %s}, "question": "q", "options": [{"id": "a", "description": "A"}, {"id": "b", "description": "B"}]}',
        ),
        (
            "/decide/shared",
            '{"state": [1, [%s]], "decisions": [{"id": "a", "question": "q", "options": [{"id": "a", "description": "A"}, {"id": "b", "description": "B"}]}]}',
        ),
    ],
)
async def test_a_number_that_overflows_a_double_is_422_like_nan(
    start_server, fake, number, path, template
) -> None:
    server = await start_server(fake)
    response = await request(server.port, "POST", path, (template % number).encode())
    assert response.status == 422 and response.code == "invalid_request"
    assert "overflows a double" in response.json["error"]["message"]
    assert fake.calls == []
    nan = await request(server.port, "POST", path, (template % "NaN").encode())
    assert nan.status == 422 and fake.calls == []


async def test_large_but_finite_numbers_still_score(start_server, fake) -> None:
    server = await start_server(fake)
    body = {**ROW, "state": {"big": 1.7e308, "tiny": 5e-324, "int": 10**400}}
    response = await request(server.port, "POST", "/decide", json.dumps(body).encode())
    assert response.status == 200 and fake.calls[0][1]["state"]["big"] == 1.7e308
    assert (await request(server.port, "POST", "/decide/shared", SHARED)).status == 200
