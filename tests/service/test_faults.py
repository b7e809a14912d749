"""Faults in the scorer, in building its reply and in a parser, and what error messages may carry.

Each fault is injected through the engine (a scorer given to the server) and must give
the contract's status in the envelope with a nonempty, short, printable message; the
server stays up, the admission count returns to 0 and the next request is served. The
token never reaches a log or a message, and client input is echoed only as a short excerpt.
The last section drives the Service in process, without sockets, to pin /health's payload,
the failure table's exact messages and the answer to a request head (`Service.answer`).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import Any

import pytest

from semif_serve.engine.scorer import OutOfMemory, ScoringFailed
from semif_serve.engine.worker import Engine
from semif_serve.errors import CODES, ApiError, excerpt
from semif_serve.http.exchange import Exchange, Head, Reply, route
from semif_serve.service import body_pipeline, head_policy
from semif_serve.service.admission import Admission
from semif_serve.service.body_pipeline import json_bytes
from semif_serve.service.head_policy import Service
from tests.fake_scorer import FakeScorer
from tests.fakes import calibration, settings
from tests.request_bodies import BODY, ROW, SHARED
from tests.wire_client import (
    HEALTH,
    TOKEN,
    assert_serving,
    parse_responses,
    raw_request,
    raw_responses,
    raw_session,
    request,
)

AVERAGED = {**ROW, "orderings": "rotations"}
ROUTES = [("/decide", ROW), ("/decide/shared", SHARED), ("/decide", AVERAGED)]


def assert_envelope(response, status: int, code: str) -> str:
    """The contract's envelope with a message a caller can read; returns the message."""
    assert response.status == status and response.code == code
    message = response.json["error"]["message"]
    assert message and message.isprintable() and len(message) <= 320
    assert "Traceback" not in message
    return message


def errors_logged(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


# -- scorer exceptions ----------------------------------------------------------------------------

FAULTS = [
    (OutOfMemory(""), 503, "out_of_memory", False),
    (OutOfMemory("CUDA out of memory"), 503, "out_of_memory", False),
    (OutOfMemory("CUDA out of memory. Tried to allocate 2.00 GiB"), 503, "out_of_memory", False),
    (ScoringFailed("scoring failed: RuntimeError"), 500, "scoring_failed", False),
    (ScoringFailed(""), 500, "scoring_failed", False),
    (RuntimeError("CUDA error: device-side assert triggered"), 500, "scoring_failed", True),
    (RuntimeError(), 500, "scoring_failed", True),
    (
        ValueError("Row r1: 5000 input tokens exceed limit 4096; no truncation allowed"),
        422,
        "invalid_request",
        False,
    ),
    (ValueError(""), 422, "invalid_request", False),
    (ValueError("x" * 100_000 + "\x1b[2J\u202e"), 422, "invalid_request", False),
    (MemoryError(), 500, "scoring_failed", True),
    (KeyError("option_logits"), 500, "scoring_failed", True),
]


@pytest.mark.parametrize("path,body", ROUTES, ids=["decide", "shared", "averaged"])
@pytest.mark.parametrize(
    "error,status,code,traceback",
    FAULTS,
    ids=lambda v: repr(v)[:40] if isinstance(v, BaseException) else None,
)
async def test_a_scorer_fault_gets_its_status_and_the_server_stays_up(
    start_server, fake, caplog, path, body, error, status, code, traceback
) -> None:
    server = await start_server(fake)
    fake.raise_ = error
    message = assert_envelope(await request(server.port, "POST", path, body), status, code)
    if isinstance(error, OutOfMemory):
        assert "out of memory" in message
    assert server.service.admission.in_progress == 0
    # an unexpected exception is logged once with its traceback; an expected one is not noise
    logged = errors_logged(caplog)
    assert [bool(r.exc_info) for r in logged] == ([True] if traceback else [])
    fake.raise_ = None
    assert (await request(server.port, "POST", path, body)).status == 200
    await assert_serving(server.port)


# -- failures while building the reply ------------------------------------------------------------


class Mangling(FakeScorer):
    """A scorer that breaks its contract: `mangle` rewrites the results of every call."""

    def __init__(self, mangle: Callable[[list[dict[str, Any]]], list[Any]]) -> None:
        super().__init__()
        self.mangle = mangle

    def score(self, row: dict[str, Any]) -> dict[str, Any]:
        (result,) = self.mangle([super().score(row)])
        return result

    def score_shared(self, rows: list[dict[str, Any]]) -> tuple[list[Any], dict[str, Any]]:
        results, timing = super().score_shared(rows)
        return self.mangle(results), timing


def without(key: str) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    return lambda results: [{k: v for k, v in r.items() if k != key} for r in results]


def with_logits(value: float) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    return lambda results: [
        {**r, "option_logits": [value] * len(r["option_logits"])} for r in results
    ]


BROKEN = {
    "nan-logits-shared": (with_logits(math.nan), "/decide/shared", SHARED),
    "nan-logits-averaged": (with_logits(math.nan), "/decide", AVERAGED),
    "inf-logits-averaged": (with_logits(math.inf), "/decide", AVERAGED),
    "no-logits-averaged": (without("option_logits"), "/decide", AVERAGED),
    "no-option-ids-averaged": (without("option_ids"), "/decide", AVERAGED),
    "no-logits-calibrated": (without("option_logits"), "/decide", {**ROW, "workload": "triage"}),
    "one-result-short": (lambda results: results[:-1], "/decide/shared", SHARED),
    "one-result-extra": (lambda results: results + results[:1], "/decide/shared", SHARED),
    "none-results-averaged": (lambda results: [None] * len(results), "/decide", AVERAGED),
}


@pytest.mark.parametrize("mangle,path,body", BROKEN.values(), ids=BROKEN.keys())
async def test_a_failure_while_building_the_reply_is_a_500_envelope(
    start_server, caplog, mangle, path, body
) -> None:
    scorer = Mangling(mangle)
    server = await start_server(scorer, calibration={"triage": 2.0})
    response = await request(server.port, "POST", path, body)
    assert_envelope(response, 500, "scoring_failed")
    assert [r.getMessage() for r in errors_logged(caplog)] == [
        "failed to build a response from a scorer result"
    ]
    assert server.service.admission.in_progress == 0
    scorer.mangle = lambda results: results
    assert (await request(server.port, "POST", path, body)).status == 200


# -- a bug in a parser ----------------------------------------------------------------------------

SYSTEM_ONE = {
    "model": "fake-model",
    "state": "s",
    "questions": {"q": {"type": "noul", "instructions": "Urgent?"}},
}
PARSING = [
    ("/decide", ROW, "parse_decide"),
    ("/decide/shared", SHARED, "parse_shared"),
    ("/v1/systemone", SYSTEM_ONE, None),
]


@pytest.mark.parametrize("path,body,parser", PARSING, ids=[path for path, _, _ in PARSING])
async def test_a_parser_that_raises_its_own_bug_is_a_logged_500_envelope_not_a_dropped_connection(
    start_server, fake, caplog, monkeypatch, path, body, parser
) -> None:
    """The injected fault stands for a bug like the unhashable `type` of 5e07d16; the scorer is never reached."""

    def bug(*_: Any) -> Any:
        raise TypeError("unhashable type: 'list'")

    if parser is None:
        monkeypatch.setattr(body_pipeline.translate, "translate", bug)
    else:
        monkeypatch.setattr(body_pipeline.request_model, parser, bug)
    server = await start_server(fake)
    response = await request(server.port, "POST", path, body)
    assert assert_envelope(response, 500, "scoring_failed") == "failed to read the request"
    assert response.json["error"]["type"] == "api_error"
    assert [(r.getMessage(), bool(r.exc_info)) for r in errors_logged(caplog)] == [
        ("failed to read a request body", True)
    ]
    assert fake.calls == [] and server.service.admission.in_progress == 0
    exposition = (await request(server.port, "GET", "/metrics", headers=[])).body.decode()
    assert (
        f'semif_http_requests_total{{caller="default",route="{path}",status="500"}} 1.0'
        in exposition
    )  # answered and counted
    monkeypatch.undo()
    assert (await request(server.port, "POST", path, body)).status == 200


# -- what messages and logs may carry -------------------------------------------------------------


async def test_the_token_never_reaches_a_log_or_a_message(start_server, fake, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    server = await start_server(fake, calibration={"triage": 2.0})
    bodies = []
    for value in (
        b"Bearer " + TOKEN.encode() + b"x",
        b"Bearer " + TOKEN.encode()[:-1],
        b"Basic " + TOKEN.encode(),
        TOKEN.encode(),
    ):
        response = await request(
            server.port, "POST", "/decide", ROW, headers=[(b"authorization", value)]
        )
        assert response.status == 401
        bodies.append(response.body)
    malformed = raw_request(
        b"GET", b"/health", b"authorization : Bearer " + TOKEN.encode() + b"\r\n", auth=False
    )
    bodies.append((await raw_session(server.port, malformed)).data)
    for error in (
        RuntimeError("boom"),
        ScoringFailed("scoring failed"),
        OutOfMemory(""),
        ValueError("bad row"),
    ):
        fake.raise_ = error
        bodies.append((await request(server.port, "POST", "/decide", ROW)).body)
    fake.raise_ = None
    fake.logits = lambda row: [math.nan] * len(row["options"])
    bodies.append((await request(server.port, "POST", "/decide", ROW)).body)
    assert (
        len(errors_logged(caplog)) == 2
    )  # the run did log: the unexpected failure and the build failure
    assert TOKEN not in caplog.text
    assert all(
        TOKEN not in (record.exc_text or "") + record.getMessage() for record in caplog.records
    )
    assert all(TOKEN.encode() not in body for body in bodies)


HUGE = "\x1b[31m\u202e" + "x" * 100_000


@pytest.mark.parametrize(
    "path,body",
    [
        ("/decide", {**ROW, "workload": HUGE}),
        ("/decide", {**ROW, HUGE: 1}),
        ("/decide", {**ROW, "id": HUGE + "#o1", "orderings": "rotations"}),
        ("/decide", {**ROW, "orderings": HUGE}),
        (
            "/decide/shared",
            {**SHARED, "decisions": [{"id": HUGE, "question": "q", "options": ROW["options"]}] * 2},
        ),
        ("/decide/shared", {**SHARED, "workload": [HUGE]}),
        ("/decide", json.dumps(ROW).encode()[:-1] + HUGE.encode()),
        ("/decide", b'{"id": "a", "id": "' + HUGE.encode() + b'"}'),
    ],
    ids=[
        "workload",
        "field-name",
        "reserved-id",
        "orderings",
        "duplicate-id",
        "workload-list",
        "trailing-garbage",
        "duplicate-key",
    ],
)
async def test_a_100_kb_client_value_is_echoed_only_as_a_short_printable_excerpt(
    start_server, fake, path, body
) -> None:
    server = await start_server(fake, calibration={"triage": 2.0})
    assert_envelope(await request(server.port, "POST", path, body), 422, "invalid_request")
    assert fake.calls == []


async def test_a_long_scorer_refusal_quoting_the_input_is_cut_short(start_server, fake) -> None:
    server = await start_server(fake)
    fake.raise_ = ValueError(
        f"Row {HUGE}: 99999 input tokens exceed limit 4096; no truncation allowed"
    )
    assert_envelope(
        await request(server.port, "POST", "/decide", {**ROW, "id": HUGE}), 422, "invalid_request"
    )


@pytest.mark.parametrize(
    "target,status,code",
    [
        (b"/" + b"%E2%80%AE" * 1000, 404, "not_found"),
        (b"/" + b"y" * 100_000, 431, "headers_too_large"),
    ],
)
async def test_a_long_path_is_echoed_only_as_a_short_printable_excerpt(
    start_server, fake, target, status, code
) -> None:
    server = await start_server(fake)
    data = raw_request(
        b"GET", target, b"connection: close\r\n", auth=False
    )  # or the 404 keeps the connection open
    (response,) = parse_responses((await raw_session(server.port, data)).data)
    assert_envelope(response, status, code)


async def test_health_stays_answerable_after_every_kind_of_fault(start_server, fake) -> None:
    """One server through every fault in turn: nothing accumulates (slots, connections)."""
    server = await start_server(fake)
    for error, status, _code, _ in FAULTS:
        fake.raise_ = error
        assert (await request(server.port, "POST", "/decide", ROW)).status == status
    fake.raise_ = None
    exchange = await raw_responses(server.port, HEALTH, 1)
    assert [r.status for r in parse_responses(exchange.data, strict=True)] == [200]
    assert server.service.admission.in_progress == 0 and len(fake.calls) == len(FAULTS)


# -- the Service in process: exact payloads and messages ------------------------------------------


@pytest.fixture
async def service(fake: FakeScorer) -> Any:
    engine = Engine(fake)
    yield Service(
        settings(
            max_queue=3,
            max_decisions=5,
            max_tokens=77,
            vram_cap_gib=2.5,
        ),
        engine,
        calibration=calibration({"b": 1.0, "a": 2.0}),
    )
    engine.close()


async def test_health_reports_the_engine_facts_and_the_limits(service: Service) -> None:
    reply = service.health()
    assert reply.status == 200
    assert json.loads(reply.body) == {
        "scorer": "fake",
        "semif_commit": "fake-commit",
        "model": "fake-model",
        "revision": "r" * 40,
        "device": "none",
        "dtype": "float32",
        "status": "ok",
        "vram_cap_gib": 2.5,
        "max_tokens": 77,
        "max_decisions": 5,
        "max_queue": 3,
        "in_progress": 0,
        "workloads": ["a", "b"],
        "calibration": {
            "binding": None,
            "fitted": None,
            "workloads": {"a": {"none": 2.0}, "b": {"none": 1.0}},
            "priors": {},
        },
        "calibration_sha256": None,  # no SEMIF_CALIBRATION file: the table came from the settings
    }


async def test_health_while_draining_is_503_draining(service: Service) -> None:
    reply = service.health(draining=True)
    assert reply.status == 503 and json.loads(reply.body)["status"] == "draining"


@pytest.mark.parametrize(
    "error,status,code,message",
    [
        (ValueError("v" * 400), 422, "invalid_request", "v" * 300 + "…"),
        (ValueError(""), 422, "invalid_request", "the scorer refused the input"),
        (OutOfMemory(""), 503, "out_of_memory", "CUDA out of memory"),
        (
            OutOfMemory("CUDA out of memory. Tried to allocate 2 GiB"),
            503,
            "out_of_memory",
            "CUDA out of memory. Tried to allocate 2 GiB",
        ),
        (ScoringFailed("s" * 400), 500, "scoring_failed", "s" * 300 + "…"),
        (ScoringFailed(""), 500, "scoring_failed", "scoring failed"),
        (RuntimeError("internal detail"), 500, "scoring_failed", "scoring failed"),
    ],
)
async def test_scorer_failures_give_the_tables_status_and_exact_message(
    service, fake, caplog, error, status, code, message
) -> None:
    fake.raise_ = error
    systemone = {
        "model": "jev-latest",
        "state": "s",
        "questions": {"q": {"type": "noul", "instructions": "Q?"}},
    }
    for path, body in (
        (b"/decide", BODY),
        (b"/decide/shared", json.dumps(SHARED).encode()),
        (b"/v1/systemone", json.dumps(systemone).encode()),
    ):
        reply = await service.post(head_policy.ROUTES[path], body)
        assert reply.status == status
        assert json.loads(reply.body) == {
            "error": {"code": code, "message": message, "type": CODES[code][1]}
        }
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
    if isinstance(error, RuntimeError):
        assert [r.getMessage() for r in logged] == ["scorer call failed"] * 3
        assert all(
            r.exc_info and r.exc_info[1] is error for r in logged
        )  # the traceback goes to the log only
    else:
        assert logged == []


async def test_a_scorer_returning_the_wrong_number_of_results_is_a_logged_500(
    service, fake, caplog
) -> None:
    original = fake.score_shared
    fake.score_shared = lambda rows: (original(rows)[0] * 2, {})  # one result too many per row
    reply = await service.post(head_policy.ROUTES[b"/decide/shared"], json.dumps(SHARED).encode())
    assert reply.status == 500
    assert json.loads(reply.body) == {
        "error": {
            "code": "scoring_failed",
            "message": "failed to build the response",
            "type": "api_error",
        }
    }
    (record,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.getMessage() == "failed to build a response from a scorer result"
    assert str(record.exc_info[1]) == "scorer returned 4 results for 2 rows"


async def test_a_refused_body_never_takes_an_admission_slot(service, fake) -> None:
    reply = await service.post(head_policy.ROUTES[b"/decide"], b"[]")
    assert reply.status == 422 and service.admission.in_progress == 0 and fake.calls == []
    assert (
        await service.post(head_policy.ROUTES[b"/decide"], json.dumps(ROW).encode())
    ).status == 200


def test_an_unknown_error_code_is_a_programming_error() -> None:
    with pytest.raises(KeyError) as refused:
        ApiError("nope", "message")
    assert refused.value.args == ("unknown error code 'nope'",)


@pytest.mark.parametrize(
    "value,limit,expected",
    [
        (5, 80, "5"),
        (["a"], 80, "['a']"),
        ("a\x00b\u202ec", 80, "a?b?c"),
        ("x" * 80, 80, "x" * 80),
        ("x" * 81, 80, "x" * 80 + "…"),
        ("x" * 500, 10, "x" * 10 + "…"),
    ],
)
def test_an_excerpt_is_printable_and_cut_at_its_limit(
    value: Any, limit: int, expected: str
) -> None:
    assert excerpt(value, limit) == expected


def test_an_excerpt_is_cut_at_80_characters_by_default() -> None:
    assert excerpt("x" * 100) == "x" * 80 + "…" and excerpt("x" * 80) == "x" * 80


@pytest.mark.parametrize(
    "method,target,name",
    [
        (b"GET", b"/health", "health"),
        (b"GET", b"/health?verbose=1", "health"),
        (b"POST", b"/decide?a?b", "decide"),
        (b"POST", b"/decide/shared", "shared"),
    ],
)
def test_routing_ignores_the_query(method: bytes, target: bytes, name: str) -> None:
    assert route(method, target, None, head_policy.ROUTES).name == name


def test_routing_refusals_are_exact() -> None:
    with pytest.raises(ApiError) as missing:
        route(b"GET", b"/" + b"n" * 100 + b"?q", None, head_policy.ROUTES)
    assert (missing.value.code, missing.value.message) == (
        "not_found",
        "no endpoint at /" + "n" * 59 + "…; the endpoints: GET /health, POST /decide, "
        "POST /decide/shared, GET /metrics, POST /v1/systemone, GET /v1/models, GET /v1/audit, GET /healthz",
    )
    with pytest.raises(ApiError) as scrape_only:
        route(b"GET", b"/health", None, head_policy.METRICS_ROUTES)
    assert scrape_only.value.message == "no endpoint at /health; the endpoints: GET /metrics"
    with pytest.raises(ApiError) as wrong:
        route(b"GET", b"/decide/shared?x", None, head_policy.ROUTES)
    assert (wrong.value.code, wrong.value.message) == (
        "method_not_allowed",
        "/decide/shared accepts POST only",
    )
    assert wrong.value.headers == ((b"allow", b"POST"),)


async def test_every_reply_made_once_its_route_is_found_carries_that_route(
    service: Service,
) -> None:
    """The head policy's Rule 3: ops labels a reply by the route it carries (and the wire keeps a
    ticket's for its own refusals). A refusal after routing (401, 503, 413, 429), a GET's reply and a
    ticket's reply each carry the route that answered."""
    decide, health = head_policy.ROUTES[b"/decide"], head_policy.ROUTES[b"/health"]
    auth = {b"authorization": b"Bearer " + TOKEN.encode()}

    def answer(
        fields: dict[bytes, bytes], draining: bool = False, target: bytes = b"/decide"
    ) -> Any:
        method = b"POST" if target == b"/decide" else b"GET"
        head = Head(method, target, fields, draining)
        return service.answer(head, Exchange("r", method.decode(), target))

    assert [(r.status, r.route) for r in (answer({}), answer(auth, draining=True))] == [
        (401, decide),
        (503, decide),
    ]
    assert answer({}, target=b"/health").route is health
    too_large = answer({**auth, b"content-length": b"999999999"})
    assert (too_large.status, too_large.route) == (413, decide)
    ticket = answer(auth)
    taken = await ticket.take(b"{")
    ticket.release()
    assert (taken.status, taken.route) == (422, decide)
    for _ in range(3):
        answer(auth)
    full = answer(auth)
    assert (full.status, full.route) == (429, decide)


async def test_a_get_route_handed_to_post_is_a_bug_named_as_such(service: Service) -> None:
    """`post` runs a POST route's reader; a GET route has none, which only a bug in the wiring could
    hand it (a ticket exists only for a POST)."""
    with pytest.raises(RuntimeError) as bug:
        await service.post(head_policy.ROUTES[b"/health"], b"")
    assert str(bug.value) == "health is not a POST route"


def test_admission_counts_each_entry_and_refuses_past_the_limit() -> None:
    admission = Admission(3)
    for _ in range(3):
        admission.enter("default")
    assert admission.in_progress == 3
    with pytest.raises(ApiError) as busy:
        admission.enter("default")
    assert (busy.value.code, busy.value.message) == (
        "busy",
        "3 requests already in progress; retry later",
    )
    admission.leave("default")
    assert admission.in_progress == 2


def test_admission_counts_every_refusal_by_its_reason() -> None:
    """Each refusal adds one to its reason's count (the queue's, or the caller's share), which the
    metrics read at scrape time as semif_busy_refusals_total."""
    admission = Admission(3, share=1)
    admission.enter("ranker")
    for _ in range(2):
        with pytest.raises(ApiError):
            admission.enter("ranker")  # over its share of one
    admission.enter("batch")
    admission.enter("eval")
    for caller in ("ranker", "batch", "other"):
        with pytest.raises(ApiError):
            admission.enter(caller)  # the queue is full: its reason whoever asks
    assert (admission.refused_share, admission.refused) == (2, 3)


def test_rendering_keeps_unicode_and_refuses_non_finite_numbers() -> None:
    assert json_bytes({"a": "é\u202e"}) == '{"a": "é\u202e"}'.encode()
    with pytest.raises(ValueError):
        json_bytes({"a": math.inf})


async def test_a_refused_token_says_so_exactly(service: Service) -> None:
    none = "no bearer token: send the header 'Authorization: Bearer <token>'"
    invalid = "the bearer token is not one this server accepts"
    for header, message, challenge in (
        (None, none, b"Bearer"),
        (b"Bearer", none, b"Bearer"),
        (b"Basic " + TOKEN.encode(), none, b"Bearer"),
        (b"Bearer wrong", invalid, b'Bearer error="invalid_token"'),
    ):
        with pytest.raises(ApiError) as refused:
            service.authorize(header)
        assert (refused.value.code, refused.value.message) == ("unauthorized", message)
        assert refused.value.headers == ((b"www-authenticate", challenge),)
    service.authorize(b"BEARER " + TOKEN.encode())


# -- Service.answer: the one answer to a request head, in process -----------------------------------------


def head(method: bytes, target: bytes, draining: bool = False, **fields: bytes) -> Head:
    """A framed head with the bearer, plus `fields` (content_length -> content-length)."""
    sent = {b"host": b"x", b"authorization": b"Bearer " + TOKEN.encode()}
    sent.update({name.replace("_", "-").encode(): value for name, value in fields.items()})
    return Head(method, target, sent, draining)


def record() -> Exchange:
    """The wire's record of a fresh exchange, where `answer` names the caller."""
    return Exchange("test-1", "GET", b"/")


async def test_the_caller_is_named_on_the_exchange_once_its_bearer_passes(service: Service) -> None:
    """Only a bearer that passes names a caller; an open route checks none and names none."""
    named, wrong, open_route = record(), record(), record()
    service.answer(head(b"GET", b"/v1/models"), named)
    service.answer(head(b"GET", b"/v1/models", authorization=b"Bearer wrong"), wrong)
    service.answer(head(b"GET", b"/health"), open_route)
    assert (named.caller, wrong.caller, open_route.caller) == ("default", "-", "-")


async def test_draining_refuses_a_protected_route_before_its_bearer(service: Service) -> None:
    for method, target in ((b"POST", b"/decide"), (b"GET", b"/v1/models")):
        refused = service.answer(
            Head(method, target, {b"host": b"x"}, True), record()
        )  # no token: the drain answers first
        assert isinstance(refused, Reply) and (refused.status, refused.code) == (
            503,
            "shutting_down",
        )
        assert (
            json.loads(refused.body)["error"]["message"]
            == "the server is shutting down; retry on another instance"
        )
    health = service.answer(Head(b"GET", b"/health", {b"host": b"x"}, True), record())
    assert (
        isinstance(health, Reply)
        and health.status == 503
        and json.loads(health.body)["status"] == "draining"
    )
    assert service.admission.in_progress == 0


async def test_a_refusal_after_the_slot_gives_it_back_and_closes(service: Service) -> None:
    limit = service.settings.max_body_bytes
    for fields, status, message in (
        (
            {"content_length": b"%d" % (limit + 1)},
            413,
            f"declared body over the {limit}-byte limit; the server's SEMIF_MAX_BODY_BYTES raises it",
        ),
        (
            {"content_encoding": b"gzip"},
            415,
            "Content-Encoding 'gzip' is not supported; send the body uncompressed (identity)",
        ),
    ):
        refused = service.answer(head(b"POST", b"/decide", **fields), record())
        assert isinstance(refused, Reply) and refused.status == status and refused.close
        assert json.loads(refused.body)["error"]["message"] == message
        assert service.admission.in_progress == 0


async def test_a_ticket_holds_its_slot_until_released(service: Service) -> None:
    tickets = [
        service.answer(head(b"POST", b"/decide", content_length=b"%d" % len(BODY)), record())
        for _ in range(3)
    ]
    assert (
        not any(isinstance(ticket, Reply) for ticket in tickets)
        and service.admission.in_progress == 3
    )
    busy = service.answer(head(b"POST", b"/decide"), record())
    assert isinstance(busy, Reply) and (busy.status, busy.code, busy.close) == (429, "busy", False)
    reply = await tickets[0].take(BODY)
    assert reply.status == 200 and json.loads(reply.body)["id"] == ROW["id"]
    assert (
        service.admission.in_progress == 3
    )  # the reply is not written yet: the slot is still held
    for ticket in tickets:
        ticket.release()
    assert service.admission.in_progress == 0


async def test_a_refusal_before_the_slot_leaves_the_connection_to_the_wire(
    service: Service,
) -> None:
    for refused, status in (
        (service.answer(Head(b"POST", b"/decide", {b"host": b"x"}, False), record()), 401),
        (service.answer(head(b"GET", b"/nowhere"), record()), 404),
        (service.answer(head(b"GET", b"/decide"), record()), 405),
    ):
        assert isinstance(refused, Reply) and refused.status == status and not refused.close
    assert service.admission.in_progress == 0
