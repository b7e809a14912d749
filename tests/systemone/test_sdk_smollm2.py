"""TypeSafe's SDK, both clients, against the real server on SmolLM2-135M-Instruct (CPU).

One server start (the model loads in about ten seconds): every type through both
clients, each answer equal to what the same rows give through /decide/shared, and
one averaged request equal to the combined view. The model comes from the wheel
exactly as in tests/real_models/test_smollm2_model.py, through tests/conftest.py's
`smollm2_settings` (skipped without the wheel, a failure under CI=true).
"""

from __future__ import annotations

from semif_serve.config import Settings
from semif_serve.engine.torch_scorer import TorchScorer
from tests.systemone_cases import (
    QUESTIONS,
    STATE,
    async_sdk,
    both_clients_on_a_model,
    check_answers,
    native_hashes,
    shared_views,
    view_hashes,
)


async def test_every_type_and_an_averaged_request_through_both_clients(
    start_server, smollm2_settings: Settings
) -> None:
    server = await start_server(TorchScorer(smollm2_settings))
    await both_clients_on_a_model(server.port, smollm2_settings.model, smollm2_settings.revision)
    async with async_sdk(server.port, timeout=120.0) as client:
        averaged = await client.system_one(
            STATE, QUESTIONS, extra_body={"semif": {"orderings": "rotations"}}
        )
    rotated = await shared_views(server.port, "rotations")
    assert native_hashes(averaged) == view_hashes(rotated)
    check_answers(averaged, rotated, ("combined",))
