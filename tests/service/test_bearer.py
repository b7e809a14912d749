"""`Authorization: Bearer` followed by one or more spaces (RFC 6750 2.1: `"Bearer" 1*SP b64token`), and
the 401's `WWW-Authenticate` (RFC 6750 3): `Bearer`, with `error="invalid_token"` when a token came.

On a real socket: any number of spaces before the right token is accepted, a tab is not a space
(RFC 6750 and RFC 9110 11.4 both say SP), and nothing but the exact token passes. In process: the
split itself, so that a split in the wrong place (the last space, every blank, both ends) fails, and
the one constant-time comparison sees the token's bytes alone.
"""

from __future__ import annotations

import hashlib
import hmac

import pytest

from semif_serve.engine.worker import Engine
from semif_serve.errors import ApiError
from semif_serve.service.head_policy import Service
from tests.fake_scorer import FakeScorer
from tests.fakes import settings
from tests.request_bodies import BODY, ROW
from tests.wire_client import TOKEN, parse_responses, raw_responses, request

T = TOKEN.encode()
# A token that begins with what a strip of the wrong characters (mutmut's "XX" among them) would eat.
X_TOKEN = b"XXXXXXXX-token-starting-with-X-0123456789"


NONE = (b"Bearer", "no bearer token: send the header 'Authorization: Bearer <token>'")
INVALID = (b'Bearer error="invalid_token"', "the bearer token is not one this server accepts")


@pytest.mark.parametrize(
    "value,refusal",
    [
        (b"Bearer " + T, None),
        (b"Bearer  " + T, None),
        (b"Bearer     " + T, None),
        (b"bEARER   " + T, None),  # the scheme is case-insensitive
        (b"Bearer\t" + T, NONE),  # a tab is not SP: scheme `Bearer\t...`, not Bearer
        (b"Bearer \t" + T, INVALID),  # Bearer, and a token with a tab in it
        (b"Bearer\t " + T, NONE),
        (b"Bearer" + T, NONE),
        (b"Bearer  " + T + b"x", INVALID),
        (b"Bearer  " + T[:-1], INVALID),
        (b"Bearer  " + T + b"  " + T, INVALID),
        (b"Basic  " + T, NONE),  # another scheme presents no bearer token (RFC 6750 3.1)
        (b"Bearer", NONE),
    ],
)
async def test_one_or_more_spaces_before_the_token_and_nothing_else(
    start_server, fake, value, refusal
) -> None:
    server = await start_server(fake)
    response = await request(
        server.port, "POST", "/decide", ROW, headers=[(b"authorization", value)]
    )
    if refusal is None:
        assert response.status == 200 and b"www-authenticate" not in response.headers
    else:
        challenge, message = refusal
        assert response.status == 401 and response.headers[b"www-authenticate"] == challenge
        assert (response.code, response.json["error"]["message"]) == ("unauthorized", message)
    assert len(fake.calls) == (refusal is None)  # a refused request never reaches the scorer
    assert (await request(server.port, "GET", "/health", headers=[])).status == 200


@pytest.mark.parametrize(("method", "path"), [("POST", "/decide"), ("GET", "/v1/models")])
async def test_no_authorization_field_gets_the_bare_challenge(start_server, method, path) -> None:
    server = await start_server()
    response = await request(server.port, method, path, ROW if method == "POST" else None, [])
    assert response.status == 401 and response.headers[b"www-authenticate"] == NONE[0]
    assert response.json["error"]["message"] == NONE[1]


async def test_a_wrong_token_and_a_nearly_right_one_get_the_same_answer(start_server) -> None:
    server = await start_server()
    answers = [
        await request(
            server.port,
            "POST",
            "/decide",
            ROW,
            [(b"authorization", b"Bearer " + t), (b"x-request-id", b"one-id")],
        )
        for t in (b"w" * len(T), T[:-1], T[:-1] + b"?", T + b"x")
    ]
    assert {a.status for a in answers} == {401}
    assert len({a.body for a in answers}) == 1
    assert len({tuple(sorted(a.headers.items())) for a in answers}) == 1


async def test_the_fields_own_blanks_around_the_value_are_not_part_of_it(
    start_server, fake
) -> None:
    server = await start_server(fake)
    data = (
        b"POST /decide HTTP/1.1\r\nhost: x\r\nauthorization: \t Bearer   "
        + T
        + b" \t\r\n"
        + b"content-length: %d\r\n\r\n" % len(BODY)
        + BODY
    )  # RFC 9110 5.5: OWS around a value is no part of it
    (response,) = parse_responses((await raw_responses(server.port, data, 1)).data)
    assert response.status == 200 and len(fake.calls) == 1


@pytest.fixture
def service() -> Service:
    return Service(settings(api_token=X_TOKEN.decode()), Engine(FakeScorer()))


@pytest.mark.parametrize(
    "value",
    [
        b"Bearer  " + X_TOKEN,
        b"Bearer " + X_TOKEN,
    ],
)
def test_a_token_whose_first_characters_a_careless_strip_would_eat_is_accepted(
    service, value
) -> None:
    service.authorize(value)


@pytest.mark.parametrize(
    "value,refusal",
    [
        (b"Bearer  " + X_TOKEN + b" ", INVALID),  # in process nobody stripped the end
        (b"Bearer  " + X_TOKEN[1:], INVALID),
        (b"Bearer \x0b" + X_TOKEN, INVALID),  # only SP is skipped, no other blank
        (b"Bearer\xa0" + X_TOKEN, NONE),
        (b"", NONE),
        (b"Bearer", NONE),
        (b"Bearer ", NONE),
    ],
)
def test_anything_but_spaces_then_the_exact_token_is_refused(service, value, refusal) -> None:
    with pytest.raises(ApiError) as refused:
        service.authorize(value)
    challenge, message = refusal
    assert (refused.value.code, refused.value.message) == ("unauthorized", message)
    assert refused.value.headers == ((b"www-authenticate", challenge),)


def test_the_constant_time_comparison_sees_the_token_alone(service, monkeypatch) -> None:
    seen: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    assert service.authorize(b"Bearer   " + X_TOKEN) == "default"
    # The token's digest alone, confirmed once against the stored digest (service/callers.py, Rule 2).
    digest = hashlib.sha256(X_TOKEN).digest()
    assert seen == [(digest, digest)]
