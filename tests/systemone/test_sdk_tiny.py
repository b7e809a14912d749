"""TypeSafe's SDK, both clients, against the real server on the real tiny model (torch on the CPU).

Each answer equals what the same rows give through /decide/shared (several questions:
one score_shared call each way) or /decide (one question: direct.score each way).
"""

from __future__ import annotations

from semif_serve.engine.torch_scorer import TorchScorer
from tests.systemone_cases import (
    QUESTIONS,
    ROWS,
    STATE,
    async_sdk,
    both_clients_on_a_model,
    check_answers,
    native_hashes,
)
from tests.wire_client import request


async def test_every_type_through_both_clients_equals_decide_shared_and_models_lists_it(
    start_server, tiny_settings
) -> None:
    server = await start_server(TorchScorer(tiny_settings))
    result, views = await both_clients_on_a_model(
        server.port, tiny_settings.model, tiny_settings.revision
    )
    assert result.usage.input_tokens < sum(
        v["input_tokens"] for v in views
    )  # the state prefilled once


async def test_one_question_equals_decide(start_server, tiny_settings) -> None:
    server = await start_server(TorchScorer(tiny_settings))
    async with async_sdk(server.port, timeout=60.0) as client:
        result = await client.system_one(STATE, {"department": QUESTIONS["department"]})
    decided = (await request(server.port, "POST", "/decide", {**ROWS[2], "state": STATE})).json
    assert native_hashes(result) == [decided["prompt_sha256"]]
    check_answers(result, [decided], keys=["department"])
    assert result.usage.input_tokens == decided["input_tokens"]
