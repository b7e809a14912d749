"""Fuzzing: any JSON body is a 200 or a 422, and any bytes on the wire get well-formed HTTP.

The request model is fuzzed directly (fast, many examples): it returns a validated
request or raises ApiError("invalid_request"), nothing else. A smaller number of bodies
go through the live server on the stub scorer. The connection loop gets random and
mutated request bytes for a few seconds: every response must parse as HTTP, every
non-2xx carries the JSON envelope, and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semif_serve.decisions import averaging, request_model
from semif_serve.engine.stub import StubScorer
from semif_serve.errors import ApiError
from tests.fakes import settings as server_settings
from tests.request_bodies import BODY, POST, ROW, SHARED
from tests.wire_client import (
    HEALTH,
    Connection,
    assert_serving,
    no_error_logs,  # noqa: F401 - fixture
    parse_responses,
    raw_request,
    raw_session,
)

pytestmark = pytest.mark.usefixtures("no_error_logs")

LIMITS = request_model.Limits(max_decisions=8, workloads=frozenset({"triage"}))

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=30,
)
texts = st.text(max_size=12) | st.sampled_from(["", "a", "x#o1", "\ud800", "é", "\x00"])
options = (
    st.lists(st.fixed_dictionaries({"id": texts, "description": texts}) | json_values, max_size=18)
    | json_values
)


def near(base: dict[str, Any], fields: dict[str, st.SearchStrategy]) -> st.SearchStrategy:
    """Dicts shaped like `base`: each field kept, dropped or replaced; sometimes an unknown field added."""

    def build(draw: st.DrawFn) -> dict[str, Any]:
        result = {}
        for key, value in base.items():
            choice = draw(st.sampled_from(["keep"] * 4 + ["drop", "replace"]))  # mostly near-valid
            if choice != "drop":
                result[key] = value if choice == "keep" else draw(fields.get(key, json_values))
        for key, strategy in fields.items():
            if key not in base and draw(st.booleans()):
                result[key] = draw(strategy)
        if draw(st.integers(0, 9)) == 0:
            result[draw(st.text(max_size=8))] = draw(json_values)
        return result

    return st.composite(build)()


DECIDE_FIELDS = {
    "id": texts | json_values,
    "state": json_values,
    "question": texts | json_values,
    "options": options,
    "workload": st.sampled_from(["triage", "other"]) | json_values,
    "orderings": st.sampled_from(["none", "rotations", "all", "All"]) | json_values,
}
decide_bodies = near(ROW, DECIDE_FIELDS) | json_values
decision = near(
    SHARED["decisions"][0],
    {key: DECIDE_FIELDS[key] for key in ("id", "question", "options", "orderings")},
)
shared_bodies = (
    near(
        SHARED,
        {
            "state": json_values,
            "workload": DECIDE_FIELDS["workload"],
            "decisions": st.lists(decision, max_size=10) | json_values,
        },
    )
    | json_values
)


def parse(kind: str, body: bytes) -> request_model.DecideRequest | None:
    """The request model's verdict: a request, or None for a 422; anything else escapes."""
    parser = request_model.parse_shared if kind == "shared" else request_model.parse_decide
    try:
        return parser(body, LIMITS)
    except ApiError as error:
        assert error.code == "invalid_request" and error.message
        return None


def assert_valid(request: request_model.DecideRequest) -> None:
    """What the model promises the scorer: well-formed rows, within the cap."""
    rows = 0
    for item in request.decisions:
        row = item.row
        assert (
            isinstance(row["id"], str)
            and row["id"]
            and isinstance(row["question"], str)
            and row["question"]
        )
        assert isinstance(row["state"], (str, dict, list)) and row["state"]
        ids = [o["id"] for o in row["options"]]
        assert 2 <= len(ids) <= request_model.MAX_OPTIONS and len(set(ids)) == len(ids)
        rows += averaging.row_count(len(ids), item.method)
    assert rows <= LIMITS.max_decisions
    json.dumps(
        [d.row for d in request.decisions], ensure_ascii=False
    ).encode()  # every string can go on the wire


@settings(max_examples=400, deadline=None)
@given(body=decide_bodies)
def test_any_decide_body_is_a_request_or_a_422(body) -> None:
    request = parse("decide", json.dumps(body).encode())
    if request is not None:
        assert_valid(request)


@settings(max_examples=300, deadline=None)
@given(body=shared_bodies)
def test_any_shared_body_is_a_request_or_a_422(body) -> None:
    request = parse("shared", json.dumps(body).encode())
    if request is not None:
        assert_valid(request)


@settings(max_examples=300, deadline=None)
@given(
    body=st.binary(max_size=200)
    | st.sampled_from(
        [
            b"1" * 5000,
            b'{"id": ' + b"9" * 5000 + b"}",
            b"[" * 5000,
            b'"\\ud800"',
            b"[" * 990 + b'"\\u00e9"' + b"]" * 990,
        ]
    )
)
def test_any_bytes_are_a_request_or_a_422(body) -> None:
    for kind in ("decide", "shared"):
        parse(kind, body)


@pytest.mark.parametrize(
    "kind,body",
    [
        ("decide", {**ROW, "id": "\ud800"}),
        ("decide", {**ROW, "state": ["ok", {"k": "\udfff"}]}),
        ("shared", {**SHARED, "state": {"\ud83d": 1}}),
    ],
)
def test_a_lone_surrogate_escape_is_refused(kind, body) -> None:
    """Valid JSON, but no UTF-8 can carry it: neither the scorer nor the reply could."""
    assert parse(kind, json.dumps(body).encode()) is None


def test_a_surrogate_pair_escape_is_an_ordinary_character() -> None:
    request = parse("decide", json.dumps({**ROW, "id": "\U0001f600"}).encode())
    assert request is not None and request.decisions[0].row["id"] == "\U0001f600"


# -- through the live server on the stub scorer -------------------------------------------------


@pytest.mark.parametrize(
    "path,bodies",
    [("/decide", decide_bodies), ("/decide/shared", shared_bodies)],
    ids=["decide", "shared"],
)
async def test_any_json_body_on_the_live_server_is_a_200_or_a_422(
    start_server, path, bodies
) -> None:
    stub = StubScorer(server_settings(max_decisions=LIMITS.max_decisions))
    server = await start_server(
        stub, max_decisions=LIMITS.max_decisions, calibration={"triage": 2.0}
    )
    connection = await Connection.open(server.port)
    loop = asyncio.get_running_loop()
    seen: list[int] = []

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
    @given(body=bodies)
    def check(body) -> None:
        response = asyncio.run_coroutine_threadsafe(
            connection.request("POST", path, json.dumps(body).encode()), loop
        ).result(10)
        assert response.status in (200, 422), response.body[:300]
        if response.status == 422:
            assert response.code == "invalid_request" and response.json["error"]["message"]
        seen.append(response.status)

    await loop.run_in_executor(
        None, check
    )  # hypothesis drives from a thread; requests run on this loop
    assert 200 in seen and 422 in seen
    await connection.close()
    await assert_serving(server.port)


# -- bytes on the wire ----------------------------------------------------------------------------

SEEDS = [
    POST,
    raw_request(
        fields=b"transfer-encoding: chunked\r\n",
        body=b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n",
    ),
    HEALTH,
    raw_request(
        b"POST", b"/decide/shared", b"content-length: 2\r\nexpect: 100-continue\r\n", b"{}"
    ),
]
TOKENS = [
    b"\r\n",
    b"\n",
    b"\r",
    b" ",
    b":",
    b"\x00",
    b"\t",
    b"0",
    b"-1",
    b"chunked",
    b"content-length: 5\r\n",
    b"transfer-encoding: chunked\r\n",
    b"\r\n\r\n",
    b"HTTP/1.0",
    b"\xff",
    b"ffffffff",
    b"{",
    b"}",
]


def mutate(rng: random.Random, data: bytes) -> bytes:
    """A few random edits: flip, insert a token, delete or duplicate a span, truncate."""
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data) + 1)
        edit = rng.randrange(5)
        if edit == 0 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif edit == 1:
            data[at:at] = rng.choice(TOKENS)
        elif edit == 2:
            del data[at : at + rng.randint(1, 8)]
        elif edit == 3:
            data[at:at] = data[at : at + rng.randint(1, 40)]
        else:
            del data[at:]
    return bytes(data)


def assert_well_formed(data: bytes) -> None:
    """Every byte the server sent belongs to a complete HTTP response; each non-2xx is the envelope."""
    for response in parse_responses(data, strict=True):
        assert 200 <= response.status < 600
        if response.status >= 300:
            assert response.headers[b"content-type"] == b"application/json"
            assert (
                set(response.json) == {"error"}
                and response.code
                and response.json["error"]["message"]
            )


async def test_random_and_mutated_bytes_get_well_formed_answers_or_a_close(start_server) -> None:
    server = await start_server(
        StubScorer(server_settings()), header_timeout=0.2, body_timeout=0.2, idle_timeout=0.2
    )
    rng = random.Random(20260927)
    loop = asyncio.get_running_loop()
    until, sent = loop.time() + 4.0, 0
    while loop.time() < until:
        if rng.random() < 0.1:
            data = rng.randbytes(rng.randint(1, 300))
        else:
            data = b"".join(mutate(rng, rng.choice(SEEDS)) for _ in range(rng.randint(1, 3)))
        batch = [
            raw_session(
                server.port, data if i == 0 else mutate(rng, rng.choice(SEEDS)), timeout=1.0
            )
            for i in range(16)
        ]
        for exchange in await asyncio.gather(*batch):
            assert_well_formed(exchange.data)
        sent += len(batch)
    assert sent >= 100
    await assert_serving(server.port)
    assert server.service.admission.in_progress == 0
