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
from typing import Any, Iterator

import huggingface_hub.constants
import pytest
import torch
import transformers
from fastjev._runtime import direct, shared

from semif_serve import prefix, tiny_model
from semif_serve.config import Settings
from semif_serve.torch_engine import TorchScorer

REFUSAL = "The fixed state prefix does not match every full prompt"
TIMING_KEYS = ("forward_seconds", "total_seconds")
ORDINARY_STATE = {"person_said": "I am fine, thanks"}


def row(row_id: str, state: Any, descriptions: list[str]) -> dict[str, Any]:
    return {
        "id": row_id,
        "state": state,
        "question": f"Criterion {row_id}: is the person upset?",
        "options": [{"id": f"o{index}", "description": text} for index, text in enumerate(descriptions)],
    }


def rows_over(state: Any) -> list[dict[str, Any]]:
    return [row("a", state, ["Yes", "No"]), row("b", state, ["calm", "upset", "unclear", "other"]),
            row("c", state, ["no", "yes"])]


def without_timing(result: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in result.items() if key not in TIMING_KEYS}


def top(result: dict[str, Any]) -> str:
    return result["option_ids"][result["probabilities"].index(max(result["probabilities"]))]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return tiny_model.build(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def scorer(built: dict[str, str]) -> Iterator[TorchScorer]:
    """A loaded TorchScorer; upstream's hook and the process settings are restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # ~30 ms per forward on one thread; seconds when threads compete
    try:
        with pytest.MonkeyPatch.context() as patch:
            for key in ("HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE"):
                patch.setenv(key, built[key])
            patch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", built["HF_HUB_CACHE"])
            patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
            patch.setattr(shared, "_state_prefix", shared._state_prefix)  # undoes install() at teardown
            settings = Settings(api_token="t" * 40, model=built["SEMIF_MODEL"], revision=built["SEMIF_REVISION"],
                                device="cpu", scorer="fastjev")
            loaded = TorchScorer(settings)
            loaded.load()
            yield loaded
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def reference(built: dict[str, str], scorer: TorchScorer) -> tuple[Any, Any]:
    """The same checkpoint loaded independently, the way SemIf loads it."""
    common = {"revision": built["SEMIF_REVISION"], "cache_dir": built["HF_HUB_CACHE"], "local_files_only": True}
    config = transformers.AutoConfig.from_pretrained(built["SEMIF_MODEL"], **common)
    tokenizer = transformers.AutoTokenizer.from_pretrained(built["SEMIF_MODEL"], **common)
    model = transformers.Qwen3_5ForCausalLM.from_pretrained(
        built["SEMIF_MODEL"], config=config.get_text_config(), dtype=torch.float32, **common
    )
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def metadata(built: dict[str, str]) -> dict[str, Any]:
    return {"source": built["SEMIF_MODEL"], "revision": built["SEMIF_REVISION"], "dtype": "float32",
            "device": "cpu", "torch_version": torch.__version__, "transformers_version": transformers.__version__}


def test_load_reports_what_serves(scorer: TorchScorer, built: dict[str, str]) -> None:
    assert scorer.health() == {
        "scorer": "fastjev", "semif_commit": "0.2.0", "model": built["SEMIF_MODEL"],
        "revision": built["SEMIF_REVISION"], "device": "cpu", "dtype": "float32",
    }
    assert prefix.original_of(shared._state_prefix) is not shared._state_prefix  # the wrapper is in place


def test_score_equals_upstream_direct_score(scorer: TorchScorer, reference: tuple[Any, Any],
                                            metadata: dict[str, Any]) -> None:
    model, tokenizer = reference
    for one in rows_over(ORDINARY_STATE) + rows_over("a plain string state"):
        ours = scorer.score(one)
        theirs = direct.score(model, tokenizer, one, metadata, 4096)
        assert without_timing(ours) == without_timing(theirs)
        assert max(ours["probabilities"]) - min(ours["probabilities"]) > 0.05  # a real top choice


def test_score_shared_equals_upstream_score_shared(scorer: TorchScorer, reference: tuple[Any, Any],
                                                   metadata: dict[str, Any]) -> None:
    model, tokenizer = reference
    rows = rows_over(ORDINARY_STATE)
    ours, our_timing = scorer.score_shared(rows)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shared, "_state_prefix", prefix.original_of(shared._state_prefix))
        theirs, their_timing = shared.score_shared(model, tokenizer, rows, metadata, 4096)
    assert ours == theirs
    assert our_timing["prefix_tokens"] == their_timing["prefix_tokens"]  # an ordinary state keeps the split


@pytest.mark.parametrize("state", [ORDINARY_STATE, {"person_said": "ok :)"}], ids=["ordinary", "boundary"])
def test_shared_agrees_with_direct_within_1e_5(scorer: TorchScorer, state: Any) -> None:
    rows = rows_over(state)
    shared_results, _ = scorer.score_shared(rows)
    for one, many in zip(rows, shared_results, strict=True):
        alone = scorer.score(one)
        assert alone["prompt_sha256"] == many["prompt_sha256"]
        assert max(abs(a - b) for a, b in zip(alone["probabilities"], many["probabilities"])) < 1e-5


def test_the_boundary_state_is_refused_upstream_and_answered_through_the_wrapper(
    scorer: TorchScorer, reference: tuple[Any, Any], metadata: dict[str, Any]
) -> None:
    model, tokenizer = reference
    state = {"person_said": "ok :)"}
    rows = rows_over(state)
    upstream = prefix.original_of(shared._state_prefix)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shared, "_state_prefix", upstream)
        with pytest.raises(ValueError, match=REFUSAL):
            shared.score_shared(model, tokenizer, rows, metadata, 4096)
    answered, timing = scorer.score_shared(rows)
    assert timing["prefix_tokens"] == len(upstream(tokenizer, state)) - 1  # exactly the merged token given up
    as_text, _ = scorer.score_shared(rows_over(json.dumps(state)))
    assert [top(result) for result in answered] == [top(result) for result in as_text]
