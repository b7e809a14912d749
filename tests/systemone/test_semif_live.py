"""SemIf's own System One server as the reference, on real weights: the intent of SemIf's live suite
(`tests/test_api_live.py` at SemIf commit 27bbe96), asked of this server on a real socket with the
real tiny model (torch on the CPU), where a real snapshot's id and revision matter.

Written for this project from the intent alone; nothing of SemIf's test code is reused. Also here:
a calibration file bound to the snapshot as today (SEMIF_MODEL, SEMIF_REVISION) still loads through
the real entry point, while the System One routes name the weights in SemIf's form.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from semif_serve.config import DEFAULT_MODEL, DEFAULT_REVISION
from semif_serve.decisions import calibration_file
from semif_serve.engine.torch_scorer import TorchScorer
from tests.calibration_files import bound_path
from tests.served_process import Process
from tests.systemone_cases import semif_id
from tests.wire_client import Connection, request

STATE = "Customer cannot access an account after a password reset."
QUEUE = {
    "type": "choice",
    "instructions": "Which queue should handle this request?",
    "criteria": {"access": "Account access support.", "billing": "Billing support."},
}


async def ask(port: int, questions: dict[str, Any], **fields: Any) -> Any:
    """One call, waiting as long as a real model on a loaded machine may take."""
    connection = await Connection.open(port)
    try:
        body = {"model": "jev-latest", "state": STATE, "questions": questions, **fields}
        connection.send_request("POST", "/v1/systemone", json.dumps(body).encode())
        return await connection.read_response(timeout=120.0)
    finally:
        await connection.close()


async def test_each_type_gives_a_usable_answer_from_the_named_snapshot(
    start_server, tiny_settings
) -> None:
    server = await start_server(TorchScorer(tiny_settings))
    answered = await ask(
        server.port,
        {
            "is_access": {"type": "noul", "instructions": "Is this an account access problem?"},
            "queue": QUEUE,
            "urgency": {
                "type": "score",
                "instructions": "How urgent is this request?",
                "criteria": ["Not urgent", "Somewhat urgent", "Very urgent"],
            },
        },
    )
    assert answered.status == 200, answered.body
    body = answered.json
    assert 0.0 <= body["answers"]["is_access"]["noul"] <= 1.0
    assert body["answers"]["queue"]["choice"] in {"access", "billing"}
    assert sum(body["answers"]["queue"]["probabilities"].values()) == pytest.approx(1.0)
    assert 0.0 <= body["answers"]["urgency"]["score"] <= 2.0
    named = semif_id(tiny_settings.model, tiny_settings.revision)
    assert body["model"] == named
    healthz = (await request(server.port, "GET", "/healthz", headers=[])).json
    assert (healthz["model"], healthz["backend"], healthz["status"]) == (named, "torch", "ready")
    assert (
        healthz["prompt_version"]
        == (await request(server.port, "GET", "/health", headers=[])).json["prompt_version"]
    )
    assert (await request(server.port, "GET", "/v1/models")).json["models"][0]["name"] == named


async def test_an_answer_is_what_decide_gives_for_the_same_decision(
    start_server, tiny_settings
) -> None:
    """The API is a translation of the scorer, not a second one: same prompt, same probabilities."""
    server = await start_server(TorchScorer(tiny_settings))
    answer = (await ask(server.port, {"route-1": QUEUE})).json["answers"]["route-1"]
    decided = (
        await request(
            server.port,
            "POST",
            "/decide",
            {
                "id": "route-1",
                "state": STATE,
                "question": QUEUE["instructions"],
                "options": [
                    {"id": key, "description": text} for key, text in QUEUE["criteria"].items()
                ],
            },
        )
    ).json
    assert answer["semif"]["prompt_sha256"] == decided["prompt_sha256"]
    assert answer["probabilities"] == dict(
        zip(decided["option_ids"], decided["probabilities"])
    )  # INV-1: exactly


async def test_several_questions_take_the_shared_path_and_count_the_state_once(
    start_server, tiny_settings
) -> None:
    server = await start_server(TorchScorer(tiny_settings))
    answered = await ask(
        server.port,
        {f"q{i}": {"type": "noul", "instructions": f"Is criterion {i} met?"} for i in range(4)},
    )
    assert (
        answered.headers[b"x-semif-mode"] == b"shared"
    )  # never serial here: there is no fallback path
    body = answered.json
    assert body["usage"]["input_tokens"] < sum(
        a["semif"]["input_tokens"] for a in body["answers"].values()
    )
    assert body["usage"]["output_tokens"] == 0


async def test_an_over_budget_question_is_refused_not_truncated(
    start_server, tiny_settings
) -> None:
    server = await start_server(TorchScorer(tiny_settings))
    refused = await ask(
        server.port,
        {"q": {"type": "noul", "instructions": "Is this long?"}},
        state="word " * (2 * tiny_settings.max_tokens),
    )
    assert (
        refused.status == 422
    )  # SemIf: 422 or 500; ours is always the 422 of input the scorer refuses
    assert (
        "exceed" in refused.json["error"]["message"]
        and "no truncation" in refused.json["error"]["message"]
    )


async def test_a_calibration_file_bound_as_today_still_loads(tmp_path: Path) -> None:
    """Through the real entry point: the binding is checked against SEMIF_MODEL and SEMIF_REVISION as
    before; /health keeps them; only the System One routes name the weights in SemIf's form."""
    process = await Process.start(SEMIF_CALIBRATION=bound_path(tmp_path))
    try:
        health = (await request(process.port, "GET", "/health", headers=[])).json
        assert health["model"] == "stub"  # what the stub reports, as before
        assert (
            health["calibration"]["binding"]["model"] == DEFAULT_MODEL
        )  # SEMIF_MODEL, checked at startup
        assert health["calibration"]["binding"]["revision"] == DEFAULT_REVISION
        assert list(health["calibration"]["workloads"]) == ["triage"]
        listed = [
            entry["name"]
            for entry in (await request(process.port, "GET", "/v1/models")).json["models"]
        ]
        assert listed[:2] == ["semif/stub@000000000000+stub-none", "stub"]
    finally:
        process.proc.terminate()
        assert await process.exit_code(30) == 0


def test_a_file_bound_to_the_real_snapshot_binds_what_health_reports(
    tmp_path: Path, tiny_settings
) -> None:
    """The tiny snapshot's binding is its SEMIF_MODEL, SEMIF_REVISION and prompt version, as today: the
    check startup runs accepts a file bound so, and refuses one bound to the System One id."""
    facts = TorchScorer(tiny_settings).health()
    loaded = (tiny_settings.model, tiny_settings.revision, facts["prompt_version"], facts["dtype"])
    today = calibration_file.load(
        bound_path(
            tmp_path,
            model=tiny_settings.model,
            revision=tiny_settings.revision,
            prompt_version=facts["prompt_version"],
        )
    )
    calibration_file.check_binding(today, *loaded)
    renamed = calibration_file.load(
        bound_path(
            tmp_path,
            model=semif_id(tiny_settings.model, tiny_settings.revision),
            revision=tiny_settings.revision,
            prompt_version=facts["prompt_version"],
        )
    )
    with pytest.raises(calibration_file.BindingMismatch):
        calibration_file.check_binding(renamed, *loaded)


async def test_semifs_names_for_the_token_and_the_token_limit_configure_the_real_process() -> None:
    """An environment written for SemIf's server: SEMIF_API_KEY is the bearer, SEMIF_MAX_INPUT_TOKENS the limit."""
    key = "semif-key-" + "k" * 30
    process = await Process.start(
        without=("SEMIF_API_TOKEN",), SEMIF_API_KEY=key, SEMIF_MAX_INPUT_TOKENS="512"
    )
    try:
        assert (await request(process.port, "GET", "/health", headers=[])).json["max_tokens"] == 512
        assert (
            await request(
                process.port,
                "GET",
                "/v1/models",
                headers=[(b"authorization", b"Bearer " + key.encode())],
            )
        ).status == 200
        assert (
            await request(process.port, "GET", "/v1/models")
        ).status == 401  # the tests' usual token is not it
    finally:
        process.proc.terminate()
        assert await process.exit_code(30) == 0
