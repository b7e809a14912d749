"""Fixtures of the real tiny model: a loaded scorer, SemIf's own independent load of the same
checkpoint, and the metadata SemIf reports; the SmolLM2 and reading-model tests point them at
their model by overriding `tiny_built`. Only the model tests use them; the checkpoints and their served
settings (`tiny_built`, `tiny_settings`, `smollm2_build`, `smollm2_settings`) are in
tests/conftest.py because the engine, ops, bench and System One tests use them too.
torch is imported only inside these fixtures.
"""

from __future__ import annotations

from typing import Any

import pytest

from semif_serve.config import Settings


@pytest.fixture(scope="module")
def tiny_scorer(tiny_settings: Settings) -> Any:
    """A loaded TorchScorer on the tiny model."""
    from semif_serve.engine.torch_scorer import TorchScorer

    loaded = TorchScorer(tiny_settings)
    loaded.load()
    return loaded


@pytest.fixture(scope="module")
def tiny_reference(tiny_built: dict[str, str], tiny_scorer: Any) -> tuple[Any, Any]:
    """The same checkpoint loaded independently, the way SemIf loads it."""
    import torch
    import transformers

    name = tiny_built["SEMIF_MODEL"]
    common = {
        "revision": tiny_built["SEMIF_REVISION"],
        "cache_dir": tiny_built["HF_HUB_CACHE"],
        "local_files_only": True,
    }
    config = transformers.AutoConfig.from_pretrained(name, **common)
    tokenizer = transformers.AutoTokenizer.from_pretrained(name, **common)
    model = transformers.Qwen3_5ForCausalLM.from_pretrained(
        name, config=config.get_text_config(), dtype=torch.float32, **common
    )
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def tiny_metadata(tiny_built: dict[str, str]) -> dict[str, Any]:
    """The metadata SemIf's loader would report for the tiny model on CPU."""
    import torch
    import transformers

    return {
        "source": tiny_built["SEMIF_MODEL"],
        "revision": tiny_built["SEMIF_REVISION"],
        "dtype": "float32",
        "device": "cpu",
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
    }


@pytest.fixture(scope="module")
def reference(tiny_built: dict[str, str], tiny_settings: Settings) -> tuple[Any, Any]:
    """A real model's snapshot (a module's `tiny_built`) loaded independently with transformers,
    as a caller of fastjev would."""
    import torch
    import transformers

    common = {
        "revision": tiny_built["SEMIF_REVISION"],
        "cache_dir": tiny_built["HF_HUB_CACHE"],
        "local_files_only": True,
    }
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_built["SEMIF_MODEL"], **common)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        tiny_built["SEMIF_MODEL"], dtype=torch.float32, **common
    )
    return model.eval(), tokenizer
