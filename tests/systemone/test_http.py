"""/v1/systemone and /v1/models on a real socket: routing, head checks, refusals that never reach the scorer.

The scorer is the recording FakeScorer: its `calls` list is the proof of what reached
it (and of which engine call a request made).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fake_scorer import FakeScorer
from tests.systemone_cases import REFUSALS
from tests.wire_client import AUTH, TOKEN, parse_responses, raw_request, raw_session, request

STATE = {"ticket": "Help! My payouts have been failing for 3 days."}
NOUL = {"type": "noul", "instructions": "Does this convey urgency?"}
CHOICE = {
    "type": "choice",
    "instructions": "Which team?",
    "criteria": {"billing": "Payments", "technical": None, "sales": ""},
}
# The System One id SemIf's form gives what the FakeScorer reports; its SEMIF_MODEL, fake-model, stays an alias.
FAKE_ID = "semif/fake-model@rrrrrrrrrrrr+torch-float32"
SCORE = {
    "type": "score",
    "instructions": "How frustrated?",
    "criteria": ["Calm", "Frustrated", "Very angry"],
}


def body(questions: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "jev-latest", "state": STATE, "questions": questions, **extra}


async def test_one_question_is_one_direct_call_and_several_are_one_shared_call(
    start_server, fake: FakeScorer
) -> None:
    server = await start_server(fake)
    one = await request(server.port, "POST", "/v1/systemone", body({"u": NOUL}))
    several = await request(
        server.port, "POST", "/v1/systemone", body({"u": NOUL, "d": CHOICE, "f": SCORE})
    )
    assert one.status == several.status == 200
    assert [kind for kind, _ in fake.calls] == ["direct", "shared"]
    assert [row["id"] for row in fake.calls[1][1]] == ["u", "d", "f"]
    assert one.json["semif"] == {"mode": "direct", "timing": None}
    assert (
        several.json["semif"]["mode"] == "shared"
        and several.json["semif"]["timing"]["batch_size"] == 3
    )


async def test_answers_equal_what_the_same_rows_give_through_decide_shared(
    start_server, fake: FakeScorer
) -> None:
    server = await start_server(fake)
    answered = (
        await request(
            server.port, "POST", "/v1/systemone", body({"u": NOUL, "d": CHOICE, "f": SCORE})
        )
    ).json
    rows = fake.calls[0][1]
    shared = (
        await request(
            server.port,
            "POST",
            "/decide/shared",
            {
                "state": STATE,
                "decisions": [{k: row[k] for k in ("id", "question", "options")} for row in rows],
            },
        )
    ).json
    assert fake.calls[1][1] == rows  # the same rows reached the scorer
    results = {r["id"]: r for r in shared["results"]}
    answers = answered["answers"]
    assert [answers[key]["semif"] for key in ("u", "d", "f")] == shared[
        "results"
    ]  # INV-1: native, unchanged
    assert answers["u"] == {
        "type": "noul",
        "noul": results["u"]["probabilities"][0],
        "semif": results["u"],
    }
    d = results["d"]["probabilities"]
    assert answers["d"]["probabilities"] == dict(zip(["billing", "technical", "sales"], d))
    assert answers["d"]["choice"] == ["billing", "technical", "sales"][d.index(max(d))]
    assert answers["d"]["confidence"] == pytest.approx((3 * max(d) - 1) / 2)
    f = results["f"]["probabilities"]
    assert answers["f"]["score"] == pytest.approx(f[1] + 2 * f[2])
    assert answers["f"]["legend"] == {"0": "Calm", "1": "Frustrated", "2": "Very angry"}
    assert answered["model"] == FAKE_ID
    assert answered["usage"] == {"input_tokens": 3 * 17, "output_tokens": 0}


@pytest.mark.parametrize(
    ("case", "payload", "param", "says"), REFUSALS, ids=[case for case, *_ in REFUSALS]
)
async def test_each_refusal_is_a_422_naming_its_field_and_never_reaches_the_scorer(
    start_server, fake: FakeScorer, case: str, payload: Any, param: str | None, says: str
) -> None:
    server = await start_server(fake, calibration={"triage": 1.5}, max_decisions=64)
    fixed = json.loads(json.dumps(payload).replace('"served"', '"jev-latest"'))
    response = await request(server.port, "POST", "/v1/systemone", fixed)
    assert response.status == 422, response.body
    assert (
        response.json["error"]["code"] == "invalid_request"
        and response.json["error"]["type"] == "invalid_request_error"
    )
    assert response.json["error"].get("param") == param
    assert response.json["error"]["message"].startswith(says), response.json["error"]["message"]
    assert fake.calls == []
    assert (
        await request(server.port, "GET", "/health", headers=[])
    ).status == 200  # and the server keeps serving


async def test_a_repeated_question_key_is_a_422_naming_questions(
    start_server, fake: FakeScorer
) -> None:
    server = await start_server(fake)
    raw = b'{"model": "jev-latest", "state": "s", "questions": {"q": {"type": "noul", "instructions": "A?"}, "q": {"type": "noul"}}}'
    response = await request(server.port, "POST", "/v1/systemone", raw)
    assert (response.status, response.json["error"]["param"]) == (422, "questions")
    assert fake.calls == []


REFUSED_CODING = " is not supported; send the body uncompressed (identity)"


@pytest.mark.parametrize(
    ("path", "coding", "message"),
    [
        ("/v1/systemone", b"zstd", "Content-Encoding 'zstd'" + REFUSED_CODING),
        ("/decide", b"zstd", "Content-Encoding 'zstd'" + REFUSED_CODING),
        ("/decide/shared", b"zstd", "Content-Encoding 'zstd'" + REFUSED_CODING),
        ("/v1/systemone", b"gzip", "Content-Encoding 'gzip'" + REFUSED_CODING),
        ("/decide", b"identity, zstd", "Content-Encoding 'identity, zstd'" + REFUSED_CODING),
        (
            "/decide",
            b"x" * 50,
            "Content-Encoding '" + "x" * 40 + "\u2026'" + REFUSED_CODING,
        ),  # a long value, cut to its excerpt
    ],
)
async def test_a_compressed_body_is_a_415_on_every_post_before_the_body_is_read(
    start_server, fake: FakeScorer, path: str, coding: bytes, message: str
) -> None:
    server = await start_server(fake)
    # The head declares a body that never comes: the answer cannot have waited for it.
    head = raw_request(
        target=path.encode(), fields=b"content-encoding: " + coding + b"\r\ncontent-length: 500\r\n"
    )
    exchange = await raw_session(server.port, head)
    (response,) = parse_responses(exchange.data)
    assert exchange.closed
    assert response.status == 415 and response.json["error"]["code"] == "unsupported_media_type"
    assert response.json["error"]["message"] == message
    assert fake.calls == []


async def test_an_identity_coding_is_accepted(start_server, fake: FakeScorer) -> None:
    server = await start_server(fake)
    response = await request(
        server.port,
        "POST",
        "/v1/systemone",
        json.dumps(body({"u": NOUL})).encode(),
        headers=[AUTH, (b"content-encoding", b"Identity")],
    )
    assert response.status == 200


async def test_a_multipart_asset_upload_is_refused_naming_assets(
    start_server, fake: FakeScorer
) -> None:
    server = await start_server(fake)
    parts = (
        b'--b\r\nContent-Disposition: form-data; name="request"\r\nContent-Type: application/json\r\n\r\n'
        + json.dumps(body({"u": NOUL}, assets={"x": {"type": "image", "part": "asset-0"}})).encode()
        + b'\r\n--b\r\nContent-Disposition: form-data; name="asset-0"\r\nContent-Type: image/png\r\n\r\n\x89PNG\r\n--b--\r\n'
    )
    response = await request(
        server.port,
        "POST",
        "/v1/systemone",
        parts,
        headers=[AUTH, (b"content-type", b"multipart/form-data; boundary=b")],
    )
    assert response.status == 422 and response.json["error"]["param"] == "assets"
    assert (
        response.json["error"]["message"]
        == "image assets are refused: this service scores text only"
    )
    assert fake.calls == []


async def test_system_one_responses_carry_the_request_id_under_the_sdks_header_too(
    start_server, fake: FakeScorer
) -> None:
    server = await start_server(fake)
    sent = [AUTH, (b"x-request-id", b"abc-123")]
    for method, path, payload in (
        ("POST", "/v1/systemone", body({"u": NOUL})),
        ("GET", "/v1/models", None),
        ("POST", "/v1/systemone", {"model": "nope"}),
    ):
        response = await request(server.port, method, path, payload, headers=sent)
        assert (
            response.headers[b"x-typesafe-request-id"]
            == response.headers[b"x-request-id"]
            == b"abc-123"
        )
    unauthorized = await request(
        server.port, "POST", "/v1/systemone", body({"u": NOUL}), headers=[]
    )
    assert (
        unauthorized.status == 401
        and unauthorized.headers[b"x-typesafe-request-id"] == unauthorized.headers[b"x-request-id"]
    )
    decide = await request(server.port, "GET", "/health", headers=[])
    assert b"x-typesafe-request-id" not in decide.headers  # only the System One routes


async def test_models_lists_the_system_one_id_then_today_s_id_and_each_alias_behind_the_bearer(
    start_server, fake: FakeScorer
) -> None:
    server = await start_server(fake, model_aliases=("jev-latest", "semif-latest"))
    listed = await request(server.port, "GET", "/v1/models")
    assert listed.status == 200
    assert [m["name"] for m in listed.json["models"]] == [
        FAKE_ID,
        "fake-model",
        "jev-latest",
        "semif-latest",
    ]
    assert {m["release_date"] for m in listed.json["models"]} == {"2026-09-22"}
    assert (await request(server.port, "GET", "/v1/models", headers=[])).status == 401
    assert (
        await request(
            server.port, "GET", "/v1/models", headers=[(b"authorization", b"Bearer wrong")]
        )
    ).status == 401
    assert (await request(server.port, "POST", "/v1/models", b"{}")).status == 405
    assert (await request(server.port, "GET", "/v1/systemone")).status == 405


async def test_an_alias_is_served_and_the_response_names_the_served_model(
    start_server, fake: FakeScorer
) -> None:
    server = await start_server(fake, model_aliases=("house-model",))
    assert (
        await request(
            server.port, "POST", "/v1/systemone", {**body({"u": NOUL}), "model": "house-model"}
        )
    ).json["model"] == FAKE_ID
    assert (
        await request(
            server.port, "POST", "/v1/systemone", {**body({"u": NOUL}), "model": "fake-model"}
        )
    ).status == 200
    refused = await request(
        server.port, "POST", "/v1/systemone", body({"u": NOUL})
    )  # jev-latest is no longer an alias
    assert (refused.status, refused.json["error"]["param"]) == (422, "model")
    assert len(fake.calls) == 2


async def test_the_bearer_is_checked_before_anything_else(start_server, fake: FakeScorer) -> None:
    """A body that would be a 422 (an unknown model) with a wrong token: the 401 comes first."""
    server = await start_server(fake)
    response = await request(
        server.port,
        "POST",
        "/v1/systemone",
        {**body({"u": NOUL}), "model": "gpt"},
        headers=[(b"authorization", b"Bearer " + TOKEN.encode() + b"x")],
    )
    assert response.status == 401 and response.json["error"]["type"] == "authentication_error"
    assert fake.calls == []


async def test_the_body_limit_and_the_metrics_cover_system_one_like_the_other_posts(
    start_server, fake: FakeScorer
) -> None:
    server = await start_server(fake, max_body_bytes=200)
    large = await request(
        server.port, "POST", "/v1/systemone", body({"u": {**NOUL, "instructions": "x" * 300}})
    )
    assert large.status == 413 and fake.calls == []
    assert (await request(server.port, "POST", "/v1/systemone", body({"u": NOUL}))).status == 200
    exposition = (await request(server.port, "GET", "/metrics", headers=[])).body.decode()
    assert (
        'semif_http_requests_total{caller="default",route="/v1/systemone",status="413"} 1.0'
        in exposition
    )
    assert (
        'semif_http_requests_total{caller="default",route="/v1/systemone",status="200"} 1.0'
        in exposition
    )


async def test_the_servers_default_workload_applies_to_a_request_that_sends_none(
    start_server, fake: FakeScorer
) -> None:
    """SEMIF_SYSTEMONE_WORKLOAD holds only a `none` temperature: averaging this request could not be calibrated."""
    server = await start_server(fake, calibration={"triage": 1.5}, systemone_workload="triage")
    response = await request(
        server.port, "POST", "/v1/systemone", body({"u": NOUL}, semif={"orderings": "rotations"})
    )
    assert (response.status, response.json["error"]["param"]) == (422, "semif.orderings"), (
        response.body
    )
    assert response.json["error"]["message"].startswith(
        "workload 'triage' has no temperature for method 'rotations'"
    )
    assert fake.calls == []
