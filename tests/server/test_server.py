"""The HTTP layer on a real socket: endpoints, auth, limits, admission, errors."""

from __future__ import annotations

import asyncio
import json

import pytest

from semif_serve import config
from semif_serve.engine.scorer import OutOfMemory, ScoringFailed
from tests.fake_scorer import semif_like
from tests.reference import softmax
from tests.request_bodies import BODY, ROW, SHARED
from tests.wire_client import (
    AUTH,
    HEALTH,
    TOKEN,
    Connection,
    assert_serving,
    parse_responses,
    raw_exchange,
    raw_request,
    request,
)

# -- auth -------------------------------------------------------------------


@pytest.mark.parametrize("path,body", [("/decide", ROW), ("/decide/shared", SHARED)])
@pytest.mark.parametrize(
    "headers",
    [
        [],
        [(b"authorization", b"Bearer wrong")],
        [(b"authorization", b"Basic " + TOKEN.encode())],
        [(b"authorization", b"Bearer " + TOKEN.encode() + b"x")],
        [(b"authorization", TOKEN.encode())],
    ],
)
async def test_posts_require_the_bearer_token(start_server, fake, path, body, headers) -> None:
    server = await start_server(fake)
    response = await request(server.port, "POST", path, body, headers=headers)
    assert response.status == 401 and response.code == "unauthorized"
    assert fake.calls == []
    await assert_serving(server.port)


async def test_bearer_scheme_is_case_insensitive(start_server, fake) -> None:
    server = await start_server(fake)
    response = await request(
        server.port,
        "POST",
        "/decide",
        ROW,
        headers=[(b"authorization", b"bearer " + TOKEN.encode())],
    )
    assert response.status == 200


async def test_health_needs_no_token_and_reports_the_contract_fields(start_server, fake) -> None:
    server = await start_server(fake, calibration={"triage": 1.5}, max_tokens=1234, max_decisions=7)
    response = await request(server.port, "GET", "/health", headers=[])
    assert response.status == 200
    body = response.json
    assert (
        body["status"] == "ok"
        and body["semif_commit"] == "fake-commit"
        and body["model"] == "fake-model"
    )
    assert (
        body["vram_cap_gib"] is None and body["max_tokens"] == 1234 and body["max_decisions"] == 7
    )
    assert body["workloads"] == ["triage"]


# -- pass-through -----------------------------------------------------------


async def test_decide_passes_the_row_through_and_returns_the_scorer_dict_unchanged(
    start_server, fake
) -> None:
    server = await start_server(fake)
    response = await request(server.port, "POST", "/decide", ROW)
    assert response.status == 200
    assert fake.calls == [("direct", ROW)]
    assert response.json == {**semif_like(ROW), "forward_seconds": 0.001, "total_seconds": 0.002}


async def test_shared_builds_rows_with_the_shared_state_and_returns_results_and_timing(
    start_server, fake
) -> None:
    server = await start_server(fake)
    response = await request(server.port, "POST", "/decide/shared", SHARED)
    assert response.status == 200
    ((kind, rows),) = fake.calls
    assert kind == "shared"
    assert rows == [
        {
            "id": d["id"],
            "state": SHARED["state"],
            "question": d["question"],
            "options": d["options"],
        }
        for d in SHARED["decisions"]
    ]
    assert response.json == {
        "results": [semif_like(r) for r in rows],
        "timing": {"total_seconds": 0.003, "batch_size": 2},
    }


# -- calibration ------------------------------------------------------------


async def test_calibration_adds_calibrated_and_keeps_the_argmax(start_server, fake) -> None:
    server = await start_server(fake, calibration={"triage": 4.0})
    response = await request(server.port, "POST", "/decide", {**ROW, "workload": "triage"})
    assert response.status == 200
    body = response.json
    native = semif_like(ROW)
    assert {k: body[k] for k in native} == native  # native fields untouched
    calibrated = body["calibrated"]
    assert calibrated["workload"] == "triage" and calibrated["temperature"] == 4.0
    assert calibrated["probabilities"] == pytest.approx(
        softmax(native["option_logits"], 4.0), abs=1e-12
    )

    def argmax(values):
        return max(range(len(values)), key=values.__getitem__)

    assert argmax(calibrated["probabilities"]) == argmax(native["probabilities"])


async def test_shared_calibration_applies_to_every_result(start_server, fake) -> None:
    server = await start_server(fake, calibration={"triage": 0.5})
    response = await request(
        server.port, "POST", "/decide/shared", {**SHARED, "workload": "triage"}
    )
    assert [r["calibrated"]["workload"] for r in response.json["results"]] == ["triage", "triage"]


async def test_no_workload_means_no_calibrated_key(start_server, fake) -> None:
    server = await start_server(fake, calibration={"triage": 4.0})
    response = await request(server.port, "POST", "/decide", ROW)
    assert "calibrated" not in response.json


async def test_an_unknown_workload_is_422_and_never_reaches_the_scorer(start_server, fake) -> None:
    server = await start_server(fake, calibration={"triage": 4.0})
    response = await request(server.port, "POST", "/decide", {**ROW, "workload": "other"})
    assert (
        response.status == 422
        and response.code == "invalid_request"
        and "other" in response.json["error"]["message"]
    )
    assert fake.calls == []


# -- scorer failures --------------------------------------------------------


@pytest.mark.parametrize(
    "error,status,code",
    [
        (
            ValueError("Row r1: 5000 input tokens exceed limit 4096; no truncation allowed"),
            422,
            "invalid_request",
        ),
        (OutOfMemory("CUDA out of memory"), 503, "out_of_memory"),
        (ScoringFailed("scoring failed: RuntimeError"), 500, "scoring_failed"),
        (RuntimeError("boom"), 500, "scoring_failed"),
        (KeyError("x"), 500, "scoring_failed"),
    ],
)
async def test_scorer_failures_map_to_the_contract_table(
    start_server, fake, error, status, code
) -> None:
    server = await start_server(fake)
    fake.raise_ = error
    for path, body in (("/decide", ROW), ("/decide/shared", SHARED)):
        response = await request(server.port, "POST", path, body)
        assert response.status == status and response.code == code
        assert "Traceback" not in response.body.decode()
    fake.raise_ = None
    assert (await request(server.port, "POST", "/decide", ROW)).status == 200
    assert server.service.admission.in_progress == 0


async def test_a_failure_while_building_the_response_is_a_500_envelope(start_server, fake) -> None:
    server = await start_server(fake)
    fake.logits = lambda row: [float("nan")] * len(row["options"])  # NaN cannot be rendered as JSON
    response = await request(server.port, "POST", "/decide", ROW)
    assert response.status == 500 and response.code == "scoring_failed"
    await assert_serving(server.port)


# -- bad bodies -------------------------------------------------------------

BAD_DECIDE = [
    b"{not json",
    b"\xff\xfe",
    b"[]",
    b"null",
    b'{"id": "r1"}',
    json.dumps({**ROW, "id": ""}).encode(),
    json.dumps({**ROW, "id": 5}).encode(),
    json.dumps({**ROW, "state": ""}).encode(),
    json.dumps({**ROW, "state": 3}).encode(),
    json.dumps({**ROW, "state": {}}).encode(),
    json.dumps({**ROW, "question": None}).encode(),
    json.dumps({**ROW, "options": ROW["options"][:1]}).encode(),
    json.dumps(
        {**ROW, "options": [{"id": str(i), "description": "d"} for i in range(17)]}
    ).encode(),
    json.dumps(
        {**ROW, "options": [{"id": "a", "description": "d"}, {"id": "a", "description": "e"}]}
    ).encode(),
    json.dumps({**ROW, "options": [{"id": "a"}, {"id": "b", "description": "e"}]}).encode(),
    json.dumps({**ROW, "options": ["a", "b"]}).encode(),
    json.dumps({**ROW, "extra": 1}).encode(),
    json.dumps({**ROW, "workload": 3}).encode(),
    b'{"id": "r1", "id": "r2", "state": "s", "question": "q", "options": []}',
    b'{"id": "r1", "state": NaN, "question": "q", "options": []}',
    b"[" * 100000 + b"]" * 100000,
]


@pytest.mark.parametrize("body", BAD_DECIDE)
async def test_malformed_json_and_wrong_shapes_are_422(start_server, fake, body) -> None:
    server = await start_server(fake)
    response = await request(server.port, "POST", "/decide", body)
    assert response.status == 422 and response.code == "invalid_request"
    assert fake.calls == []
    await assert_serving(server.port)


@pytest.mark.parametrize(
    "body",
    [
        {"state": "s"},
        {"state": "s", "decisions": []},
        {"state": "s", "decisions": {}},
        {
            "state": "s",
            "decisions": [{"id": "a", "question": "q", "options": ROW["options"], "state": "x"}],
        },
        {"state": "s", "decisions": [{"id": "a", "question": "q", "options": ROW["options"]}] * 2},
        {**SHARED, "decisions": SHARED["decisions"] + ["x"]},
    ],
)
async def test_shared_wrong_shapes_are_422(start_server, fake, body) -> None:
    server = await start_server(fake)
    response = await request(server.port, "POST", "/decide/shared", body)
    assert response.status == 422 and response.code == "invalid_request"
    assert fake.calls == []


async def test_too_many_decisions_is_422(start_server, fake) -> None:
    server = await start_server(fake, max_decisions=3)
    decisions = [{"id": str(i), "question": "q", "options": ROW["options"]} for i in range(4)]
    response = await request(
        server.port, "POST", "/decide/shared", {"state": "s", "decisions": decisions}
    )
    assert response.status == 422 and "3" in response.json["error"]["message"]
    assert (
        await request(
            server.port, "POST", "/decide/shared", {"state": "s", "decisions": decisions[:3]}
        )
    ).status == 200


# -- body limits ------------------------------------------------------------


async def test_a_declared_oversized_body_is_413_before_it_is_sent(start_server, fake) -> None:
    server = await start_server(fake, max_body_bytes=100)
    connection = await Connection.open(server.port)
    connection.writer.write(raw_request(fields=b"content-length: 101\r\n"))
    response = await connection.read_response()  # no body byte was sent
    assert response.status == 413 and response.code == "request_too_large"
    assert response.headers[b"connection"] == b"close" and await connection.closed_by_peer()
    assert fake.calls == []
    await assert_serving(server.port)


async def test_a_body_at_the_limit_is_accepted(start_server, fake) -> None:
    server = await start_server(fake, max_body_bytes=len(BODY))
    assert (await request(server.port, "POST", "/decide", BODY)).status == 200


async def test_a_chunked_body_over_the_limit_is_413_and_never_kept(start_server, fake) -> None:
    server = await start_server(fake, max_body_bytes=100)
    chunk = b"x" * 60
    data = raw_request(
        fields=b"transfer-encoding: chunked\r\n", body=(b"3c\r\n" + chunk + b"\r\n") * 2
    )
    responses = parse_responses(await raw_exchange(server.port, data))
    assert [r.status for r in responses] == [413]
    assert responses[0].code == "request_too_large"
    assert fake.calls == []
    await assert_serving(server.port)


@pytest.mark.parametrize(
    "length", [b"+5", b"-1", b"0x5", b"5 5", "\u0665".encode(), b"5,6", b"1e3", b""]
)
async def test_content_length_must_be_plain_ascii_digits(start_server, fake, length) -> None:
    server = await start_server(fake)
    data = raw_request(fields=b"content-length: " + length + b"\r\n", body=b"hello")
    responses = parse_responses(await raw_exchange(server.port, data))
    assert [r.status for r in responses] == [400]
    assert responses[0].code == "bad_request"
    assert fake.calls == []
    await assert_serving(server.port)


# -- admission --------------------------------------------------------------


async def test_429_busy_is_answered_before_the_body_is_read(start_server, fake) -> None:
    server = await start_server(fake, max_queue=1)
    fake.gate = __import__("threading").Event()
    first = asyncio.ensure_future(request(server.port, "POST", "/decide", ROW))
    await asyncio.get_running_loop().run_in_executor(None, fake.entered.wait, 5)
    connection = await Connection.open(server.port)
    connection.writer.write(raw_request(fields=b"content-length: 50\r\n"))
    response = await connection.read_response(
        timeout=5
    )  # body never sent: the refusal cannot wait for it (30 s)
    assert response.status == 429 and response.code == "busy"
    assert await connection.closed_by_peer()
    fake.gate.set()
    assert (await first).status == 200
    assert len(fake.calls) == 1 and server.service.admission.in_progress == 0


async def test_health_answers_while_a_scorer_call_is_blocked(start_server, fake) -> None:
    server = await start_server(fake)
    fake.gate = __import__("threading").Event()
    pending = asyncio.ensure_future(request(server.port, "POST", "/decide", ROW))
    await asyncio.get_running_loop().run_in_executor(None, fake.entered.wait, 5)
    health = await asyncio.wait_for(
        request(server.port, "GET", "/health", headers=[]), 3.0
    )  # the gate holds 10 s
    assert health.status == 200 and health.json["in_progress"] == 1
    assert not pending.done()
    fake.gate.set()
    assert (await pending).status == 200


async def test_scorer_calls_are_serialised(start_server, fake) -> None:
    server = await start_server(fake)
    fake.delay = 0.02
    bodies = [("/decide", ROW), ("/decide/shared", SHARED)] * 4
    responses = await asyncio.gather(*(request(server.port, "POST", p, b) for p, b in bodies))
    assert [r.status for r in responses] == [200] * 8
    assert len(fake.calls) == 8 and fake.max_active == 1


# -- connection handling ----------------------------------------------------


async def test_keep_alive_reuses_one_connection(start_server, fake) -> None:
    server = await start_server(fake)
    connection = await Connection.open(server.port)
    statuses = [(await connection.request("POST", "/decide", ROW)).status for _ in range(3)]
    statuses.append((await connection.request("GET", "/health", headers=[])).status)
    statuses.append((await connection.request("POST", "/decide", {"bad": 1})).status)
    statuses.append((await connection.request("POST", "/decide", b"")).status)
    statuses.append((await connection.request("POST", "/decide", ROW)).status)
    assert statuses == [200, 200, 200, 200, 422, 422, 200]
    await connection.close()


async def test_pipelined_requests_are_answered_in_order(start_server, fake) -> None:
    server = await start_server(fake)
    two = json.dumps({**ROW, "id": "second"}).encode()
    data = (
        raw_request(fields=b"content-length: %d\r\n" % len(BODY), body=BODY)
        + HEALTH
        + raw_request(fields=b"content-length: %d\r\nconnection: close\r\n" % len(two), body=two)
    )
    responses = parse_responses(await raw_exchange(server.port, data))
    assert [r.status for r in responses] == [200, 200, 200]
    assert (
        responses[0].json["id"] == "r1"
        and responses[1].json["status"] == "ok"
        and responses[2].json["id"] == "second"
    )


async def test_100_continue_is_sent_only_after_the_head_checks(start_server, fake) -> None:
    server = await start_server(fake)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(raw_request(fields=b"expect: 100-continue\r\ncontent-length: %d\r\n" % len(BODY)))
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
    assert interim.startswith(b"HTTP/1.1 100 ")
    writer.write(BODY)
    final = parse_responses(await asyncio.wait_for(reader.read(65536), 2))
    assert final[0].status == 200
    writer.close()


async def test_100_continue_is_not_sent_to_a_refused_request(start_server, fake) -> None:
    server = await start_server(fake)
    data = b"POST /decide HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 10\r\n\r\n"
    raw = await raw_exchange(server.port, data)
    assert b" 100 " not in raw.split(b"\r\n", 1)[0]
    responses = parse_responses(raw)
    assert [r.status for r in responses] == [401] and responses[0].headers[
        b"connection"
    ] == b"close"


@pytest.mark.parametrize(
    "method,path,status,code",
    [
        ("GET", "/nope", 404, "not_found"),
        ("POST", "/decide/other", 404, "not_found"),
        ("GET", "/decide", 405, "method_not_allowed"),
        ("POST", "/health", 405, "method_not_allowed"),
        ("DELETE", "/decide/shared", 405, "method_not_allowed"),
    ],
)
async def test_unknown_paths_and_wrong_methods_are_enveloped(
    start_server, fake, method, path, status, code
) -> None:
    server = await start_server(fake)
    response = await request(server.port, method, path, headers=[AUTH])
    assert response.status == status and response.code == code
    if status == 405:
        assert response.headers[b"allow"] == (b"GET, HEAD" if path == "/health" else b"POST")
    await assert_serving(server.port)


async def test_a_protocol_error_is_a_400_envelope_and_closes(start_server, fake) -> None:
    server = await start_server(fake)
    raw = await raw_exchange(server.port, b"GARBAGE\r\n\r\nGET /health HTTP/1.1\r\nhost: x\r\n\r\n")
    responses = parse_responses(raw)
    assert [r.status for r in responses] == [400]
    assert responses[0].code == "bad_request" and responses[0].headers[b"connection"] == b"close"
    await assert_serving(server.port)


def test_the_settings_never_print_the_token() -> None:
    loaded = config.load({"SEMIF_API_TOKEN": TOKEN})
    assert loaded.api_token == TOKEN and TOKEN not in repr(loaded) and TOKEN not in str(loaded)
