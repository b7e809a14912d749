"""End to end on the real tiny model: the real server, the real engine, real torch.

Each served answer is compared with an in-process call of the same scorer
package on an independently loaded copy of the same checkpoint.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastjev._runtime import direct, shared

from semif_serve.decisions import averaging, calibration_file, prior
from semif_serve.decisions.views import as_json
from semif_serve.engine import prefix
from semif_serve.engine.torch_scorer import TorchScorer
from tests.timing import timeless
from tests.wire_client import request

STATE = {"ticket": "printer on fire", "floor": 3}
OPTIONS = [
    {"id": "yes", "description": "Yes, urgent"},
    {"id": "no", "description": "No"},
    {"id": "later", "description": "It can wait a day"},
]
ROW = {"id": "t1", "state": STATE, "question": "Is this urgent?", "options": OPTIONS}
DECISIONS = [
    {"id": "d1", "question": "Is this urgent?", "options": OPTIONS[:2]},
    {"id": "d2", "question": "Who should act?", "options": OPTIONS},
]


def shared_rows(state: Any) -> list[dict[str, Any]]:
    return [{**d, "state": state} for d in DECISIONS]


def upstream_shared(
    model: Any, tokenizer: Any, rows: list[dict[str, Any]], metadata: dict[str, Any]
) -> list[dict[str, Any]]:
    """score_shared with upstream's own prefix, bypassing the INV-7 wrapper."""
    wrapper = shared._state_prefix
    shared._state_prefix = prefix.original_of(wrapper)
    try:
        return shared.score_shared(model, tokenizer, rows, metadata, 4096)[0]
    finally:
        shared._state_prefix = wrapper


def top(result: dict[str, Any]) -> str:
    return result["option_ids"][result["probabilities"].index(max(result["probabilities"]))]


async def test_decide_equals_an_in_process_direct_score(
    start_server, tiny_settings, tiny_reference, tiny_metadata
) -> None:
    server = await start_server(TorchScorer(tiny_settings))
    health = (await request(server.port, "GET", "/health", headers=[])).json
    assert (health["scorer"], health["model"], health["device"]) == (
        "fastjev",
        tiny_settings.model,
        "cpu",
    )
    model, tokenizer = tiny_reference
    response = await request(server.port, "POST", "/decide", ROW)
    assert response.status == 200
    assert timeless(response.json) == timeless(
        direct.score(model, tokenizer, ROW, tiny_metadata, 4096)
    )


async def test_shared_equals_an_in_process_score_shared(
    start_server, tiny_settings, tiny_reference, tiny_metadata
) -> None:
    server = await start_server(TorchScorer(tiny_settings))
    model, tokenizer = tiny_reference
    response = await request(
        server.port, "POST", "/decide/shared", {"state": STATE, "decisions": DECISIONS}
    )
    assert response.status == 200
    served = response.json["results"]
    theirs = upstream_shared(model, tokenizer, shared_rows(STATE), tiny_metadata)
    assert served == theirs
    for one, many in zip(shared_rows(STATE), served, strict=True):
        alone = direct.score(model, tokenizer, one, tiny_metadata, 4096)
        assert max(abs(a - b) for a, b in zip(alone["probabilities"], many["probabilities"])) < 1e-5
    assert response.json["timing"]["batch_size"] == 2


async def test_the_boundary_state_is_answered_like_its_string_form(
    start_server, tiny_settings, tiny_reference, tiny_metadata
) -> None:
    server = await start_server(TorchScorer(tiny_settings))
    model, tokenizer = tiny_reference
    state = {"person_said": "ok :)"}
    try:
        upstream_shared(model, tokenizer, shared_rows(state), tiny_metadata)
    except ValueError as error:
        assert "fixed state prefix" in str(error)
    else:
        raise AssertionError(
            "upstream score_shared accepted the boundary state: INV-7 is not exercised"
        )
    as_object = await request(
        server.port, "POST", "/decide/shared", {"state": state, "decisions": DECISIONS}
    )
    as_text = await request(
        server.port, "POST", "/decide/shared", {"state": json.dumps(state), "decisions": DECISIONS}
    )
    assert as_object.status == 200 and as_text.status == 200
    assert [top(r) for r in as_object.json["results"]] == [top(r) for r in as_text.json["results"]]


async def test_rotations_end_to_end(
    start_server, tiny_settings, tiny_reference, tiny_metadata
) -> None:
    server = await start_server(TorchScorer(tiny_settings))
    model, tokenizer = tiny_reference
    response = await request(server.port, "POST", "/decide", {**ROW, "orderings": "rotations"})
    assert response.status == 200
    rows = averaging.expand(ROW, "rotations")
    theirs = upstream_shared(model, tokenizer, rows, tiny_metadata)
    assert response.json["orderings"] == theirs
    assert response.json == as_json(averaging.combine(ROW, "rotations", theirs))
    assert response.json["combined"]["orderings"] == 3


async def test_the_prior_end_to_end_fitted_and_served_through_the_server(
    start_server, tiny_settings, tiny_reference, tiny_metadata
) -> None:
    """The position prior on real torch: a prior fitted from served rotations (as the bench fits it) equals the one
    fitted from SemIf's own rotations, and a prior decision is SemIf's one row, divided by it."""
    fitting = await start_server(TorchScorer(tiny_settings))
    questions = [f"Question {k}: is this urgent?" for k in range(prior.MIN_DECISIONS)]
    asked = [
        {"id": f"f{k}", "question": q, "options": OPTIONS, "orderings": "rotations"}
        for k, q in enumerate(questions)
    ]
    fitted = await request(
        fitting.port, "POST", "/decide/shared", {"state": STATE, "decisions": asked}
    )
    assert fitted.status == 200
    entry = prior.entry(
        [prior.decision_prior(result["orderings"]) for result in fitted.json["results"]]
    )
    model, tokenizer = tiny_reference
    theirs = [
        prior.decision_prior(
            upstream_shared(
                model,
                tokenizer,
                averaging.expand({**row, "state": STATE}, "rotations"),
                tiny_metadata,
            )
        )
        for row in asked
    ]
    assert entry["prior"] == pytest.approx(prior.workload_prior(theirs), abs=1e-6)

    table = calibration_file.Table(
        priors={
            "urgent": {3: calibration_file.FittedPrior(tuple(entry["prior"]), entry["decisions"])}
        }
    )
    server = await start_server(TorchScorer(tiny_settings), calibration=table)
    response = await request(
        server.port, "POST", "/decide", {**ROW, "orderings": "prior", "workload": "urgent"}
    )
    assert response.status == 200
    (one,) = upstream_shared(model, tokenizer, averaging.expand(ROW, "prior"), tiny_metadata)
    assert response.json["orderings"] == [one]  # the one row, SemIf's result untouched (INV-1)
    assert response.json == as_json(averaging.combine(ROW, "prior", [one], prior=entry["prior"]))
