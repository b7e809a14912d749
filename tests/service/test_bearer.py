"""`Authorization: Bearer` followed by one or more spaces (RFC 6750 2.1: `"Bearer" 1*SP b64token`).

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
from semif_serve.service.callers import MAX_CALLERS
from semif_serve.service.routes import Service
from tests.bodies import BODY, ROW
from tests.fake_scorer import FakeScorer
from tests.fakes import settings
from tests.wire_client import TOKEN, parse_responses, raw_responses, request

T = TOKEN.encode()
# A token that begins with what a strip of the wrong characters (mutmut's "XX" among them) would eat.
X_TOKEN = b"XXXXXXXX-token-starting-with-X-0123456789"


@pytest.mark.parametrize(
    "value,status",
    [
        (b"Bearer " + T, 200),
        (b"Bearer  " + T, 200),
        (b"Bearer     " + T, 200),
        (b"bEARER   " + T, 200),  # the scheme is case-insensitive
        (b"Bearer\t" + T, 401),  # a tab is not SP
        (b"Bearer \t" + T, 401),
        (b"Bearer\t " + T, 401),
        (b"Bearer" + T, 401),
        (b"Bearer  " + T + b"x", 401),
        (b"Bearer  " + T[:-1], 401),
        (b"Bearer  " + T + b"  " + T, 401),
        (b"Basic  " + T, 401),
    ],
)
async def test_one_or_more_spaces_before_the_token_and_nothing_else(
    start_server, fake, value, status
) -> None:
    server = await start_server(fake)
    response = await request(
        server.port, "POST", "/decide", ROW, headers=[(b"authorization", value)]
    )
    assert response.status == status
    assert len(fake.calls) == (status == 200)  # a refused request never reaches the scorer
    assert (await request(server.port, "GET", "/health", headers=[])).status == 200


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
    "value",
    [
        b"Bearer  " + X_TOKEN + b" ",  # in process nobody stripped the end
        b"Bearer  " + X_TOKEN[1:],
        b"Bearer \x0b" + X_TOKEN,  # only SP is skipped, no other blank
        b"Bearer\xa0" + X_TOKEN,
        b"",
        b"Bearer",
        b"Bearer ",
    ],
)
def test_anything_but_spaces_then_the_exact_token_is_refused(service, value) -> None:
    with pytest.raises(ApiError) as refused:
        service.authorize(value)
    assert (refused.value.code, refused.value.message) == (
        "unauthorized",
        "missing or wrong bearer token",
    )


def test_the_constant_time_comparison_sees_the_token_alone(service, monkeypatch) -> None:
    seen: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    assert service.authorize(b"Bearer   " + X_TOKEN) == "default"
    # The token's digest alone, against every slot of the callers table (service/callers.py, Rule 2).
    assert [a for a, _ in seen] == [hashlib.sha256(X_TOKEN).digest()] * MAX_CALLERS
