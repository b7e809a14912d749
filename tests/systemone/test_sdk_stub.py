"""TypeSafe's own SDK (typesafe-sdk 0.7.5), unchanged, against a live server on the stub scorer.

The server is the real one on this test's event loop: AsyncTypeSafeClient runs on the
loop, TypeSafeClient in a worker thread so the loop keeps serving. Each answer is
compared with what the same rows give through /decide/shared on the same server;
counts of what was scored come from the server's scorer, never from the client.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from typesafe_sdk import (
    Box,
    Choice,
    Image,
    Noul,
    RetryPolicy,
    TypeSafeAuthenticationError,
    TypeSafeInternalServerError,
    TypeSafeRateLimitError,
    TypeSafeUnprocessableEntityError,
)

from semif_serve.decisions import calibration_file
from semif_serve.engine.stub import StubScorer
from tests.fake_scorer import FakeScorer
from tests.fakes import settings
from tests.systemone_cases import (
    QUESTIONS,
    ROWS,
    STATE,
    async_sdk,
    check_answers,
    native_hashes,
    sdk,
    shared_views,
    synchronous_answer,
    view_hashes,
)
from tests.wire_client import request

NO_RETRY = RetryPolicy(max_retries=0)
STUB_ID = "semif/stub@000000000000+stub-none"  # the stub's fixed System One id; "stub", what it reports, is an alias


async def stub(start_server: Any, **overrides: Any) -> Any:
    return await start_server(StubScorer(settings()), **overrides)


async def test_every_type_round_trips_through_both_clients_and_equals_decide_shared(
    start_server,
) -> None:
    server = await stub(start_server)
    async with async_sdk(server.port) as client:
        asynchronous = await client.system_one(STATE, QUESTIONS)
    synchronous = await synchronous_answer(server.port)
    views = await shared_views(server.port)
    for result in (asynchronous, synchronous):
        assert native_hashes(result) == view_hashes(views)  # the same rows were scored
        check_answers(result, views)
        assert result.model == STUB_ID and result.usage.output_tokens == 0
        assert result.usage.input_tokens == sum(v["input_tokens"] for v in views)
        assert result.scores["frustration"].legend == {0: "Calm", 1: "Frustrated", 2: "Very angry"}
        assert result.request_id == result.raw_http_response.headers["x-request-id"]
        assert not hasattr(result.nouls["is_urgent"], "confidence")


async def test_models_list_works_through_both_clients(start_server) -> None:
    server = await stub(start_server, model_aliases=("jev-latest", "semif-latest"))
    async with async_sdk(server.port) as client:
        listed = await client.models.list()

    def ask() -> Any:
        with sdk(server.port) as client:
            return client.models.list()

    synchronous = await asyncio.to_thread(ask)
    assert (
        [m.name for m in listed.models]
        == [m.name for m in synchronous.models]
        == [STUB_ID, "stub", "jev-latest", "semif-latest"]
    )
    assert all(m.release_date == "2026-09-22" and m.description for m in listed.models)


async def test_extreme_probabilities_still_parse_in_the_sdks_strict_models(start_server) -> None:
    """1.0 and 0.0 go out as floats: the SDK's strict models refuse an integer there."""
    fake = FakeScorer()
    fake.logits = lambda row: [1000.0] + [0.0] * (len(row["options"]) - 1)
    server = await start_server(fake)
    async with async_sdk(server.port) as client:
        result = await client.system_one(STATE, QUESTIONS)
    assert result.nouls["is_urgent"].noul == 1.0 and result.choices["department"].confidence == 1.0
    assert result.scores["frustration"].score == 0.0
    assert result.choices["department"].probabilities == {
        "billing": 1.0,
        "technical": 0.0,
        "sales": 0.0,
    }


async def test_averaged_and_calibrated_answers_equal_the_combined_and_calibrated_views(
    start_server,
) -> None:
    table = calibration_file.Table({"triage": {"none": 1.5, "rotations": 2.0}})
    server = await stub(start_server, calibration=table)
    async with async_sdk(server.port) as client:
        averaged = await client.system_one(
            STATE, QUESTIONS, extra_body={"semif": {"orderings": "rotations"}}
        )
        both = await client.system_one(
            STATE, QUESTIONS, extra_body={"semif": {"orderings": "rotations", "workload": "triage"}}
        )
        tempered = await client.system_one(
            STATE, QUESTIONS, extra_body={"semif": {"workload": "triage"}}
        )
    for result, orderings, workload, path in (
        (averaged, "rotations", None, ("combined",)),
        (both, "rotations", "triage", ("combined", "calibrated")),
        (tempered, None, "triage", ("calibrated",)),
    ):
        views = await shared_views(server.port, orderings, workload)
        assert native_hashes(result) == view_hashes(views)
        check_answers(result, views, path)
    department = both.raw_http_response.json()["answers"]["department"]["semif"]
    assert department["combined"]["orderings"] == 3 and len(department["orderings"]) == 3


async def test_the_server_defaults_average_and_calibrate_a_caller_that_sends_only_the_apis_fields(
    start_server,
) -> None:
    table = calibration_file.Table({"triage": {"rotations": 2.0}})
    server = await stub(
        start_server,
        calibration=table,
        systemone_orderings="rotations",
        systemone_workload="triage",
    )
    async with async_sdk(server.port) as client:
        result = await client.system_one(STATE, QUESTIONS)
    check_answers(
        result, await shared_views(server.port, "rotations", "triage"), ("combined", "calibrated")
    )


# -- orderings "prior" (extension): one row per question, the debiased view, or its calibrated view ----

# "triage" has a temperature for "prior", "sorting" none; both have priors over 2 and 3 options (QUESTIONS' counts).
PRIORS = {
    2: calibration_file.FittedPrior((0.6, 0.4), 8),
    3: calibration_file.FittedPrior((0.5, 0.3, 0.2), 8),
}
PRIOR_TABLE = calibration_file.Table(
    {"triage": {"prior": 2.0}}, priors={"triage": PRIORS, "sorting": PRIORS}
)


@pytest.mark.parametrize(
    ("workload", "path"),
    [("sorting", ("combined",)), ("triage", ("combined", "calibrated"))],
    ids=["debiased", "calibrated"],
)
async def test_prior_answers_through_both_clients_equal_the_prior_views(
    start_server, workload: str, path: tuple[str, ...]
) -> None:
    server = await stub(start_server, calibration=PRIOR_TABLE)
    extra = {"semif": {"orderings": "prior", "workload": workload}}
    async with async_sdk(server.port) as client:
        asynchronous = await client.system_one(STATE, QUESTIONS, extra_body=extra)
    synchronous = await synchronous_answer(server.port, extra)
    views = await shared_views(server.port, "prior", workload)
    assert [view["combined"]["method"] for view in views] == ["prior"] * len(QUESTIONS)
    assert ("calibrated" in views[0]["combined"]) == (workload == "triage")
    for result in (asynchronous, synchronous):
        assert native_hashes(result) == view_hashes(views) and len(native_hashes(result)) == len(
            QUESTIONS
        )  # a row each
        check_answers(result, views, path)
        department = result.raw_http_response.json()["answers"]["department"]["semif"]
        assert (
            department["combined"]["prior"] == [0.5, 0.3, 0.2] and len(department["orderings"]) == 1
        )


async def test_the_prior_by_default_sends_one_row_per_question(start_server) -> None:
    fake = FakeScorer()
    server = await start_server(
        fake, calibration=PRIOR_TABLE, systemone_orderings="prior", systemone_workload="sorting"
    )
    async with async_sdk(server.port) as client:
        result = await client.system_one(STATE, QUESTIONS)
    assert [(kind, [row["id"] for row in rows]) for kind, rows in fake.calls] == [
        ("shared", [f"{key}#o0" for key in QUESTIONS])
    ]
    check_answers(result, await shared_views(server.port, "prior", "sorting"), ("combined",))


async def test_a_prior_the_workload_lacks_is_the_sdks_422_and_nothing_is_scored(
    start_server,
) -> None:
    fake = FakeScorer()
    table = calibration_file.Table(priors={"sorting": {2: PRIORS[2]}})  # no prior over 3 options
    server = await start_server(fake, calibration=table)
    async with async_sdk(server.port, retry=NO_RETRY) as client:
        with pytest.raises(TypeSafeUnprocessableEntityError) as missing:
            await client.system_one(
                STATE,
                QUESTIONS,
                extra_body={"semif": {"orderings": "prior", "workload": "sorting"}},
            )
        with pytest.raises(TypeSafeUnprocessableEntityError) as unnamed:
            await client.system_one(STATE, QUESTIONS, extra_body={"semif": {"orderings": "prior"}})
    assert missing.value.body["error"] == {
        "code": "invalid_request",
        "type": "invalid_request_error",
        "param": "semif.workload",
        "message": "workload 'sorting' has no prior for 3 options (decision 'department'); it has priors for: 2",
    }
    assert unnamed.value.body["error"]["param"] == "semif.workload"
    assert unnamed.value.body["error"]["message"] == (
        "decision 'is_urgent' has orderings \"prior\" over 2 options, which needs "
        "a workload naming the prior; the request names no workload"
    )
    assert fake.calls == []


# -- refusals as the SDK's typed exceptions ---------------------------------------------------


async def test_each_refusal_is_the_sdks_typed_exception_with_our_message_and_request_id(
    start_server,
) -> None:
    fake = FakeScorer()
    server = await start_server(fake)
    client = async_sdk(server.port, retry=NO_RETRY)
    intruder = async_sdk(server.port, api_key="wrong-key", retry=NO_RETRY)
    cases = [
        (
            TypeSafeUnprocessableEntityError,
            "questions.find.type",
            client.system_one(
                STATE,
                {"find": Box(instructions="Find the dog")},
                extra_headers={"x-request-id": "req-box"},
            ),
            "req-box",
        ),
        (
            TypeSafeUnprocessableEntityError,
            "assets",
            client.system_one(
                Image(b"\x89PNG\r\n\x1a\n" + bytes(32)),
                {"q": Noul(instructions="Damaged?")},
                extra_headers={"x-request-id": "req-img"},
            ),
            "req-img",
        ),
        (
            TypeSafeUnprocessableEntityError,
            "questions.c.criteria",
            client.system_one(
                STATE,
                {"c": Choice(criteria={f"o{i}": None for i in range(17)})},
                extra_headers={"x-request-id": "req-17"},
            ),
            "req-17",
        ),
        (
            TypeSafeUnprocessableEntityError,
            "model",
            client.system_one(
                STATE, QUESTIONS, model="jev-2.0.0", extra_headers={"x-request-id": "req-model"}
            ),
            "req-model",
        ),
        (
            TypeSafeAuthenticationError,
            None,
            intruder.system_one(STATE, QUESTIONS, extra_headers={"x-request-id": "req-auth"}),
            "req-auth",
        ),
    ]
    async with client, intruder:
        for kind, param, call, request_id in cases:
            with pytest.raises(kind) as caught:
                await call
            error = caught.value
            assert error.request_id == request_id
            assert (
                error.body["error"]["message"] in str(error)
                and error.body["error"].get("param") == param
            )
    assert fake.calls == []


async def test_a_scorer_failure_is_the_sdks_server_error(start_server) -> None:
    fake = FakeScorer()
    fake.raise_ = RuntimeError("boom")
    server = await start_server(fake)
    with pytest.raises(TypeSafeInternalServerError) as caught:
        await synchronous_answer(server.port, retry=NO_RETRY)
    assert caught.value.status == 500 and "scoring failed" in str(caught.value)
    assert caught.value.request_id == caught.value.headers["x-request-id"]


async def test_a_full_queue_is_a_rate_limit_error_carrying_retry_after(start_server) -> None:
    fake = FakeScorer()
    fake.gate = threading.Event()
    server = await start_server(fake, max_queue=1)
    holder = asyncio.ensure_future(
        request(
            server.port,
            "POST",
            "/decide",
            {"id": "x", "state": "s", "question": "q?", "options": ROWS[0]["options"]},
        )
    )
    await fake.wait_entered()
    try:
        async with async_sdk(server.port, retry=NO_RETRY) as client:
            with pytest.raises(TypeSafeRateLimitError) as caught:
                await client.system_one(STATE, QUESTIONS)
        assert caught.value.retry_after_ms == 1000.0 and "in progress" in str(caught.value)
    finally:
        fake.gate.set()
        await holder
    assert [kind for kind, _ in fake.calls] == ["direct"]


async def test_the_sdks_retry_waits_our_retry_after_and_nothing_is_scored_twice(
    start_server,
) -> None:
    """Backoff is off in this policy, so a wait of a second can only be our Retry-After."""
    fake = FakeScorer()
    fake.gate = threading.Event()
    server = await start_server(fake, max_queue=1)
    refusals: list[float] = []
    enter = server.service.admission.enter

    def counting_enter(caller: str) -> None:
        try:
            enter(caller)
        except Exception:
            refusals.append(time.monotonic())
            fake.gate.set()  # the slot frees once the holder's call returns
            raise

    server.service.admission.enter = counting_enter
    holder = asyncio.ensure_future(
        request(
            server.port,
            "POST",
            "/decide",
            {"id": "x", "state": "s", "question": "q?", "options": ROWS[0]["options"]},
        )
    )
    await fake.wait_entered()
    policy = RetryPolicy(max_retries=3, backoff_initial=0.0, backoff_max=0.0)
    async with async_sdk(server.port, retry=policy) as client:
        result = await client.system_one(STATE, QUESTIONS)
    answered = time.monotonic()
    assert (await holder).status == 200
    assert len(refusals) == 1 and answered - refusals[0] >= 0.95
    assert [kind for kind, _ in fake.calls] == [
        "direct",
        "shared",
    ]  # the holder once, the SDK's rows once
    assert [row["id"] for row in fake.calls[1][1]] == list(QUESTIONS) and set(
        result.answers
    ) == set(QUESTIONS)
