"""SemIf's own System One server as the reference: the intent of SemIf's conformance suite
(`tests/test_api_conformance.py` at SemIf commit 27bbe96), asked of this server on a real socket.

Each test says what SemIf's suite checks and whether we hold it, or differ as contract.md
("The System One API", "Coming from SemIf's own server") says we do; a difference is asserted
as that difference, so it cannot drift silently. Written for this project from the intent
alone; nothing of SemIf's test code is reused. The scorer is the recording FakeScorer (its
`calls` prove what reached it; it stands in for a torch scorer, so its backend is `torch`) or
the stub; the real-weights half is test_semif_live.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import h11
import jsonschema
import pytest
import typesafe_sdk
from typesafe_sdk import Choice, Noul, RetryPolicy, Score

from semif_serve import config
from semif_serve.engine.stub import StubScorer
from tests.fake_scorer import FakeScorer
from tests.fakes import settings
from tests.systemone_cases import async_sdk
from tests.wire_client import GENERATED, TOKEN, Connection, eventually, request

SCHEMA = json.loads(
    (Path(__file__).parent / "semif_schema" / "systemone.json").read_text(encoding="utf-8")
)
# The id SemIf's form gives what the FakeScorer reports (model fake-model, revision "r" * 40, float32).
FAKE_ID = "semif/fake-model@rrrrrrrrrrrr+torch-float32"
STUB_ID = "semif/stub@000000000000+stub-none"
SEMIF_NAMES = ("jev-latest", "jev-preview", "jev-1.13.0", "semif-latest")
STATE = "Help! My payouts have been failing for 3 days."
QUESTIONS = {
    "is_urgent": {
        "type": "noul",
        "instructions": "Does this convey urgency?",
        "criteria": {"true": "Explicitly time-sensitive", "false": "No urgency expressed"},
    },
    "department": {
        "type": "choice",
        "instructions": "Which team should handle this?",
        "criteria": {"billing": "Payments", "technical": "Bugs", "sales": "Pricing"},
    },
    "frustration": {
        "type": "score",
        "instructions": "How frustrated is the customer?",
        "criteria": ["Calm", "Frustrated", "Very angry"],
    },
}
NO_RETRY = RetryPolicy(max_retries=0)


def descending(row: dict[str, Any]) -> list[float]:
    """The first option always wins, by a clear margin."""
    return [4.0 - index for index in range(len(row["options"]))]


@pytest.fixture
def ranked() -> FakeScorer:
    fake = FakeScorer()
    fake.logits = descending
    return fake


async def ask(port: int, questions: dict[str, Any] = QUESTIONS, **fields: Any) -> Any:
    return await request(
        port,
        "POST",
        "/v1/systemone",
        {"model": "jev-latest", "state": STATE, "questions": questions, **fields},
    )


# -- holds --------------------------------------------------------------------------------------------


async def test_every_question_is_answered_under_its_own_key(
    start_server, ranked: FakeScorer
) -> None:
    server = await start_server(ranked)
    answered = await ask(server.port)
    assert answered.status == 200
    answers = answered.json["answers"]
    assert list(answers) == list(QUESTIONS)
    assert [answers[key]["type"] for key in answers] == ["noul", "choice", "score"]
    assert answers["department"]["choice"] == "billing"
    assert answers["frustration"]["legend"] == {"0": "Calm", "1": "Frustrated", "2": "Very angry"}


async def test_the_full_response_validates_against_semifs_published_schema(
    start_server, ranked: FakeScorer
) -> None:
    server = await start_server(ranked)
    body = (await ask(server.port)).json
    jsonschema.validate(body, SCHEMA)  # our `semif` blocks are extensions the schema permits
    wrong = {
        **body,
        "answers": {
            **body["answers"],
            "is_urgent": {**body["answers"]["is_urgent"], "confidence": 0.5},
        },
    }
    with pytest.raises(
        jsonschema.ValidationError
    ):  # the schema bites: a noul answer may carry no confidence
        jsonschema.validate(wrong, SCHEMA)


async def test_usage_counts_a_shared_state_once_and_no_output_tokens(
    start_server, ranked: FakeScorer
) -> None:
    server = await start_server(ranked)
    usage = (await ask(server.port)).json["usage"]
    assert usage == {
        "input_tokens": 3 * 17,
        "output_tokens": 0,
    }  # the fake shares no prefix: 17 tokens a row


async def test_every_question_reaches_the_scorer_in_one_call_in_order(
    start_server, ranked: FakeScorer
) -> None:
    server = await start_server(ranked)
    await ask(server.port)
    assert [kind for kind, _ in ranked.calls] == ["shared"]
    assert [row["id"] for row in ranked.calls[0][1]] == list(QUESTIONS)


async def test_one_refused_question_stops_the_request_before_the_scorer(
    start_server, ranked: FakeScorer
) -> None:
    server = await start_server(ranked)
    broken = {**QUESTIONS, "broken": {"type": "choice", "instructions": "Which?", "criteria": {}}}
    assert (await ask(server.port, broken)).status == 422
    assert ranked.calls == []


async def test_a_row_is_the_one_decide_scores_for_the_same_question(
    start_server, ranked: FakeScorer
) -> None:
    """SemIf proves its API is a translation by comparing prompts; here the same row reaches the scorer."""
    server = await start_server(ranked)
    await ask(server.port, {"department": QUESTIONS["department"]})
    decide = {
        "id": "department",
        "state": STATE,
        "question": "Which team should handle this?",
        "options": [
            {"id": "billing", "description": "Payments"},
            {"id": "technical", "description": "Bugs"},
            {"id": "sales", "description": "Pricing"},
        ],
    }
    assert (await request(server.port, "POST", "/decide", decide)).status == 200
    assert ranked.calls[0] == ranked.calls[1] == ("direct", decide)


async def test_an_unknown_path_is_a_404_in_the_same_error_shape(
    start_server, ranked: FakeScorer
) -> None:
    server = await start_server(ranked)
    missing = await request(server.port, "GET", "/v1/nope", headers=[])
    assert missing.status == 404 and missing.json["error"]["type"] == "not_found_error"


async def test_the_sdks_response_models_accept_our_bytes(start_server, ranked: FakeScorer) -> None:
    server = await start_server(ranked)
    parsed = typesafe_sdk.SystemOneResponse.model_validate_json((await ask(server.port)).body)
    assert isinstance(parsed.answers["is_urgent"], typesafe_sdk.NoulAnswer)
    assert isinstance(parsed.answers["department"], typesafe_sdk.ChoiceAnswer)
    assert isinstance(parsed.answers["frustration"], typesafe_sdk.ScoreAnswer)
    assert parsed.usage.output_tokens == 0
    listing = typesafe_sdk.ListModelsResponse.model_validate_json(
        (await request(server.port, "GET", "/v1/models")).body
    )
    assert listing.models[0].name == parsed.model


async def test_the_unmodified_sdk_drives_the_server_with_only_its_base_url_changed(
    start_server, ranked: FakeScorer
) -> None:
    server = await start_server(ranked)
    async with async_sdk(server.port) as client:
        answered = await client.system_one(
            STATE,
            {
                "is_urgent": Noul(instructions="Does this convey urgency?"),
                "department": Choice(
                    instructions="Which team?", criteria={"billing": "Payments", "sales": "Pricing"}
                ),
                "frustration": Score(
                    instructions="How frustrated?", criteria=["Calm", "Frustrated", "Very angry"]
                ),
            },
        )
    assert 0.0 <= answered.answers["is_urgent"].noul <= 1.0
    assert (
        answered.answers["department"].choice == "billing"
        and 0.0 <= answered.answers["department"].confidence <= 1.0
    )
    assert (
        answered.answers["frustration"].legend[0] == "Calm"
    )  # string keys on the wire, ints in the SDK
    assert answered.model == FAKE_ID


# -- the five gaps to SemIf's own server, closed, and the SDK's request id on every answer ------------------------------------------------------


@pytest.mark.parametrize("name", SEMIF_NAMES)
async def test_gap_1_semifs_model_names_are_accepted_by_default(start_server, name: str) -> None:
    fake = FakeScorer()
    server = await start_server(
        fake, model_aliases=config.load({"SEMIF_API_TOKEN": TOKEN}).model_aliases
    )
    answered = await ask(server.port, {"q": QUESTIONS["is_urgent"]}, model=name)
    assert answered.status == 200, answered.body
    assert answered.json["model"] == FAKE_ID  # the weights that answered, never the name sent
    listed = [
        entry["name"] for entry in (await request(server.port, "GET", "/v1/models")).json["models"]
    ]
    assert name in listed


@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_gap_2_healthz_answers_semifs_fields_without_a_token(
    start_server, method: str
) -> None:
    fake = FakeScorer()
    server = await start_server(fake, max_tokens=2048)
    health = await request(server.port, method, "/healthz", headers=[])
    assert health.status == 200
    if method == "HEAD":
        assert health.body == b"" and int(health.headers[b"content-length"]) > 0
        return
    body = health.json
    assert {
        key: body[key]
        for key in ("status", "model", "backend", "prompt_version", "max_input_tokens", "mode")
    } == {
        "status": "ready",
        "model": FAKE_ID,
        "backend": "torch",
        "prompt_version": None,
        "max_input_tokens": 2048,
        "mode": "auto",
    }
    assert fake.calls == []


async def test_gap_2_healthz_names_the_stub_as_the_stub(start_server) -> None:
    server = await start_server(StubScorer(settings()))
    body = (await request(server.port, "GET", "/healthz", headers=[])).json
    assert (body["status"], body["model"], body["backend"], body["prompt_version"]) == (
        "ready",
        STUB_ID,
        "stub",
        "stub-v1",
    )


async def test_gap_2_healthz_takes_no_admission_slot_and_never_reaches_the_scorer(
    start_server,
) -> None:
    """With the only slot held by a call inside the scorer, /healthz still answers and the scorer saw one call."""
    fake = FakeScorer()
    fake.gate = threading.Event()
    server = await start_server(fake, max_queue=1)
    holder = asyncio.ensure_future(ask(server.port, {"q": QUESTIONS["is_urgent"]}))
    await fake.wait_entered()
    try:
        full = await ask(server.port, {"q": QUESTIONS["is_urgent"]})
        assert full.status == 429  # the queue is full...
        for method in ("GET", "HEAD"):
            assert (
                await request(server.port, method, "/healthz", headers=[])
            ).status == 200  # ...and /healthz answers
        assert server.service.admission.in_progress == 1
    finally:
        fake.gate.set()
    assert (await holder).status == 200
    assert len(fake.calls) == 1


async def test_gap_2_healthz_is_503_draining_during_the_drain(start_server) -> None:
    fake = FakeScorer()
    fake.gate = threading.Event()
    server = await start_server(fake, shutdown_grace=5.0)
    holder = asyncio.ensure_future(ask(server.port, {"q": QUESTIONS["is_urgent"]}))
    await fake.wait_entered()  # in flight: the drain waits for it
    probe = await Connection.open(server.port)
    probe.writer.write(b"GET /heal")  # a probe whose head has begun is answered through the drain
    await eventually(lambda: sum(not c.closable for c in server.connections.values()) == 2)
    stopping = asyncio.ensure_future(server.shutdown())
    await asyncio.sleep(0)
    probe.writer.write(b"thz HTTP/1.1\r\nhost: x\r\n\r\n")
    probe.h11.send(
        h11.Request(method="GET", target="/healthz", headers=[(b"host", b"x")])
    )  # what it sent, for its parser
    probe.h11.send(h11.EndOfMessage())
    response = await probe.read_response()
    fake.gate.set()
    assert response.status == 503 and response.json["status"] == "draining"
    assert response.headers[b"retry-after"] == b"1"  # ours, not SemIf's 2: contract.md says why
    assert (await holder).status == 200
    await asyncio.wait_for(stopping, 5)
    assert len(fake.calls) == 1


async def test_gap_3_an_answer_says_direct_or_shared_in_x_semif_mode(
    start_server, ranked: FakeScorer
) -> None:
    server = await start_server(ranked)
    one = await ask(server.port, {"q": QUESTIONS["is_urgent"]})
    several = await ask(server.port)
    assert (one.headers[b"x-semif-mode"], several.headers[b"x-semif-mode"]) == (
        b"direct",
        b"shared",
    )
    assert [kind for kind, _ in ranked.calls] == [
        "direct",
        "shared",
    ]  # the header names the call that was made


async def test_gap_4_an_answer_names_its_backend_in_x_semif_backend(
    start_server, ranked: FakeScorer
) -> None:
    server = await start_server(ranked)
    assert (await ask(server.port)).headers[b"x-semif-backend"] == b"torch"
    stub = await start_server(StubScorer(settings()))
    assert (await ask(stub.port)).headers[b"x-semif-backend"] == b"stub"


async def test_every_system_one_response_and_every_404_carry_the_sdks_request_id(
    start_server, ranked: FakeScorer
) -> None:
    server = await start_server(ranked)
    answers = [
        await request(server.port, "GET", "/no-such-path", headers=[(b"x-request-id", b"req-404")]),
        await request(server.port, "GET", "/healthz", headers=[]),
        await request(server.port, "GET", "/v1/models"),
        await request(server.port, "GET", "/v1/models", headers=[]),  # 401
        await ask(server.port),
        await ask(server.port, {}),  # 422
    ]
    assert [a.status for a in answers] == [404, 200, 200, 401, 200, 422]
    assert (
        answers[0].headers[b"x-typesafe-request-id"]
        == answers[0].headers[b"x-request-id"]
        == b"req-404"
    )
    for answered in answers[1:]:
        assert GENERATED.fullmatch(answered.headers[b"x-typesafe-request-id"])
        assert answered.headers[b"x-typesafe-request-id"] == answered.headers[b"x-request-id"]


async def test_the_sdk_reads_a_request_id_from_a_404_at_a_wrong_base_url(
    start_server, ranked: FakeScorer
) -> None:
    server = await start_server(ranked)
    async with typesafe_sdk.AsyncTypeSafeClient(
        api_key=TOKEN,
        base_url=f"http://127.0.0.1:{server.port}/wrong",
        compression=False,
        retry=NO_RETRY,
    ) as client:
        with pytest.raises(typesafe_sdk.TypeSafeError) as caught:
            await client.system_one(
                STATE,
                {"q": Noul(instructions="Urgent?")},
                extra_headers={"x-request-id": "req-wrong-base"},
            )
    assert caught.value.status == 404 and caught.value.request_id == "req-wrong-base"
    assert ranked.calls == []


async def test_gap_5_the_model_id_names_the_weights_on_the_system_one_routes_only(
    start_server, ranked: FakeScorer
) -> None:
    server = await start_server(ranked)
    assert (await ask(server.port)).json["model"] == FAKE_ID
    listed = [
        entry["name"] for entry in (await request(server.port, "GET", "/v1/models")).json["models"]
    ]
    assert listed[0] == FAKE_ID and "fake-model" in listed  # today's id stays accepted, as an alias
    assert (await ask(server.port, model="fake-model")).json["model"] == FAKE_ID
    assert (await ask(server.port, model=FAKE_ID)).status == 200
    assert (await request(server.port, "GET", "/health", headers=[])).json[
        "model"
    ] == "fake-model"  # /health as today


# -- documented differences, asserted as contract.md states them ------------------------------------


async def test_differs_semif_switches_the_jev_aliases_off_by_a_flag_we_by_listing_the_names(
    start_server,
) -> None:
    """SemIf: SEMIF_ACCEPT_JEV_ALIASES=0 refuses jev-*. Here: SEMIF_MODEL_ALIASES names what is accepted,
    and the flag itself is refused at startup, naming it."""
    fake = FakeScorer()
    server = await start_server(
        fake,
        model_aliases=config.load(
            {"SEMIF_API_TOKEN": TOKEN, "SEMIF_MODEL_ALIASES": "semif-latest"}
        ).model_aliases,
    )
    refused = await ask(server.port, {"q": QUESTIONS["is_urgent"]}, model="jev-latest")
    assert refused.status == 422 and refused.json["error"]["param"] == "model"
    assert refused.json["error"]["code"] == "invalid_request"  # SemIf: unknown_model
    assert (
        await ask(server.port, {"q": QUESTIONS["is_urgent"]}, model="semif-latest")
    ).status == 200
    with pytest.raises(
        ValueError, match="^SEMIF_ACCEPT_JEV_ALIASES='0' is SemIf's setting .*SEMIF_MODEL_ALIASES"
    ):
        config.load({"SEMIF_API_TOKEN": TOKEN, "SEMIF_ACCEPT_JEV_ALIASES": "0"})
    assert fake.calls[0][0] == "direct" and len(fake.calls) == 1


async def test_differs_auth_is_always_on(start_server, ranked: FakeScorer) -> None:
    """SemIf without a key accepts anyone; here a token is required to start, and every call needs it."""
    server = await start_server(ranked)
    bare = await request(
        server.port,
        "POST",
        "/v1/systemone",
        {"model": "jev-latest", "state": STATE, "questions": QUESTIONS},
        headers=[],
    )
    assert bare.status == 401 and bare.json["error"]["type"] == "authentication_error"
    assert bare.json["error"]["code"] == "unauthorized"  # SemIf: invalid_api_key
    assert (
        await request(
            server.port, "GET", "/v1/models", headers=[(b"authorization", b"Bearer wrong")]
        )
    ).status == 401
    assert (await ask(server.port)).status == 200
    with pytest.raises(ValueError, match="^SEMIF_API_TOKEN is required: "):
        config.load({})


async def test_differs_a_field_is_blamed_by_param_under_our_code(
    start_server, ranked: FakeScorer
) -> None:
    """SemIf: code option_count_unsupported; ours invalid_request, with the same param and the count in the message."""
    server = await start_server(ranked)
    many = {
        "department": {
            "type": "choice",
            "instructions": "Which?",
            "criteria": {f"o{i}": None for i in range(42)},
        }
    }
    error = (await ask(server.port, many)).json["error"]
    assert (error["code"], error["type"], error["param"]) == (
        "invalid_request",
        "invalid_request_error",
        "questions.department.criteria",
    )
    assert "42" in error["message"]


async def test_differs_malformed_json_is_a_422_under_our_code(
    start_server, ranked: FakeScorer
) -> None:
    """SemIf: 422 invalid_body; ours 422 invalid_request, the envelope of every other refusal."""
    server = await start_server(ranked)
    refused = await request(server.port, "POST", "/v1/systemone", b"{not json")
    assert refused.status == 422 and refused.json["error"]["code"] == "invalid_request"
    assert ranked.calls == []


async def test_differs_models_lists_every_accepted_name_with_a_fixed_date(
    start_server, ranked: FakeScorer
) -> None:
    """SemIf lists its id alone, dated today; ours the id first, then every name `model` accepts, dated as
    the API reference."""
    server = await start_server(ranked)
    models = (await request(server.port, "GET", "/v1/models")).json["models"]
    assert [entry["name"] for entry in models] == [FAKE_ID, "fake-model", *SEMIF_NAMES]
    assert all(set(entry) == {"name", "description", "release_date"} for entry in models)
    assert {entry["release_date"] for entry in models} == {"2026-09-22"}


async def test_differs_there_is_no_loading_state_and_a_503_says_retry_after_1(
    start_server, ranked: FakeScorer
) -> None:
    """SemIf answers 503 with Retry-After 2 while its model loads. Here the port opens only once the model
    has loaded (a refused connection is 'not ready'), so /healthz is `ready` from its first answer; our 503s
    (drain, out of memory, connection cap) say 1 (the drain test above reads it)."""
    server = await start_server(ranked)
    assert (await request(server.port, "GET", "/healthz", headers=[])).json["status"] == "ready"


async def test_differs_the_sdks_typed_error_carries_our_code_message_and_request_id(
    start_server, ranked: FakeScorer
) -> None:
    server = await start_server(ranked, model_aliases=())
    async with async_sdk(server.port, retry=NO_RETRY) as client:
        with pytest.raises(typesafe_sdk.TypeSafeUnprocessableEntityError) as caught:
            await client.system_one(
                STATE,
                {"q": Noul(instructions="Urgent?")},
                model="jev-latest",
                extra_headers={"x-request-id": "req-alias-off"},
            )
    error = caught.value
    assert (
        error.body["error"]["code"] == "invalid_request" and error.body["error"]["param"] == "model"
    )  # SemIf: unknown_model
    assert error.body["error"]["message"] in str(error)
    assert error.request_id == "req-alias-off"
    assert ranked.calls == []
