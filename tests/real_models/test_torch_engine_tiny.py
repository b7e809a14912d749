"""TorchScorer on the real tiny Qwen3.5 (CPU, fastjev): the production load path, unchanged
results, and the INV-7 boundary state answered through the installed wrapper.

TorchScorer loads with `local_files_only=True` and no cache_dir, as in production, so the
hub cache is found the way a fresh process finds it: huggingface_hub reads HF_HOME /
HF_HUB_CACHE into `huggingface_hub.constants` once, at import, and transformers reads
that constant on each call. The test sets the environment and that constant; the
reference model is loaded independently with an explicit cache_dir.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastjev._runtime import direct, shared

from semif_serve.engine import prefix
from semif_serve.engine.torch_scorer import TorchScorer
from tests.timing import timeless

REFUSAL = "The fixed state prefix does not match every full prompt"
ORDINARY_STATE = {"person_said": "I am fine, thanks"}


def row(row_id: str, state: Any, descriptions: list[str]) -> dict[str, Any]:
    return {
        "id": row_id,
        "state": state,
        "question": f"Criterion {row_id}: is the person upset?",
        "options": [
            {"id": f"o{index}", "description": text} for index, text in enumerate(descriptions)
        ],
    }


def rows_over(state: Any) -> list[dict[str, Any]]:
    return [
        row("a", state, ["Yes", "No"]),
        row("b", state, ["calm", "upset", "unclear", "other"]),
        row("c", state, ["no", "yes"]),
    ]


def top(result: dict[str, Any]) -> str:
    return result["option_ids"][result["probabilities"].index(max(result["probabilities"]))]


def test_load_reports_what_serves(tiny_scorer: TorchScorer, tiny_built: dict[str, str]) -> None:
    assert tiny_scorer.health() == {
        "scorer": "fastjev",
        "semif_commit": "0.2.0",
        "model": tiny_built["SEMIF_MODEL"],
        "revision": tiny_built["SEMIF_REVISION"],
        "device": "cpu",
        "dtype": "float32",
        "prompt_version": direct.PROMPT_VERSION,
    }
    assert (
        prefix.original_of(shared._state_prefix) is not shared._state_prefix
    )  # the wrapper is in place


def test_score_equals_upstream_direct_score(
    tiny_scorer: TorchScorer, tiny_reference: tuple[Any, Any], tiny_metadata: dict[str, Any]
) -> None:
    model, tokenizer = tiny_reference
    for one in rows_over(ORDINARY_STATE) + rows_over("a plain string state"):
        ours = tiny_scorer.score(one)
        theirs = direct.score(model, tokenizer, one, tiny_metadata, 4096)
        assert timeless(ours) == timeless(theirs)
        assert max(ours["probabilities"]) - min(ours["probabilities"]) > 0.05  # a real top choice


def test_score_shared_equals_upstream_score_shared(
    tiny_scorer: TorchScorer, tiny_reference: tuple[Any, Any], tiny_metadata: dict[str, Any]
) -> None:
    model, tokenizer = tiny_reference
    rows = rows_over(ORDINARY_STATE)
    ours, our_timing = tiny_scorer.score_shared(rows)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shared, "_state_prefix", prefix.original_of(shared._state_prefix))
        theirs, their_timing = shared.score_shared(model, tokenizer, rows, tiny_metadata, 4096)
    assert ours == theirs
    assert (
        our_timing["prefix_tokens"] == their_timing["prefix_tokens"]
    )  # an ordinary state keeps the split


@pytest.mark.parametrize(
    "state", [ORDINARY_STATE, {"person_said": "ok :)"}], ids=["ordinary", "boundary"]
)
def test_shared_agrees_with_direct_within_1e_5(tiny_scorer: TorchScorer, state: Any) -> None:
    rows = rows_over(state)
    shared_results, _ = tiny_scorer.score_shared(rows)
    for one, many in zip(rows, shared_results, strict=True):
        alone = tiny_scorer.score(one)
        assert alone["prompt_sha256"] == many["prompt_sha256"]
        assert max(abs(a - b) for a, b in zip(alone["probabilities"], many["probabilities"])) < 1e-5


def test_the_boundary_state_is_refused_upstream_and_answered_through_the_wrapper(
    tiny_scorer: TorchScorer, tiny_reference: tuple[Any, Any], tiny_metadata: dict[str, Any]
) -> None:
    model, tokenizer = tiny_reference
    state = {"person_said": "ok :)"}
    rows = rows_over(state)
    upstream = prefix.original_of(shared._state_prefix)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shared, "_state_prefix", upstream)
        with pytest.raises(ValueError, match=REFUSAL):
            shared.score_shared(model, tokenizer, rows, tiny_metadata, 4096)
    answered, timing = tiny_scorer.score_shared(rows)
    assert (
        timing["prefix_tokens"] == len(upstream(tokenizer, state)) - 1
    )  # exactly the merged token given up
    as_text, _ = tiny_scorer.score_shared(rows_over(json.dumps(state)))
    assert [top(result) for result in answered] == [top(result) for result in as_text]
