"""The scorer package called in this process, on the model the server serves.

Reference predictions (`python -m bench reference`) and the in-process side of
the tiny-model benchmark both come from here. The model is loaded by the torch
engine's own `load_model`, with the model, revision, device and dtype the
server reports on /health, so there is no second loader to drift from it. The
hub cache location must be in the environment before transformers is first
imported (it is read once, at import): callers set HF_HOME/HF_HUB_CACHE first.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Row = dict[str, Any]


@dataclass(frozen=True)
class Facts:
    """What identifies the served model: package, checkpoint, device, dtype and token limit."""

    scorer: str
    model: str
    revision: str
    device: str
    dtype: str
    max_tokens: int

    @classmethod
    def from_health(cls, health: Mapping[str, Any]) -> Facts:
        if health.get("scorer") == "stub":
            raise ValueError(
                "the server runs the stub scorer: there is no model to load in-process"
            )
        return cls(
            health["scorer"],
            health["model"],
            health["revision"],
            health["device"],
            health["dtype"],
            int(health["max_tokens"]),
        )


@dataclass(frozen=True)
class Loaded:
    """A loaded model and the scorer package that scores with it."""

    facts: Facts
    direct: Any
    shared: Any
    model: Any
    tokenizer: Any
    metadata: dict[str, Any]


def _check_cache_env() -> None:
    """Refuse when huggingface_hub was imported before HF_HUB_CACHE was set (wrong cache)."""
    wanted = os.environ.get("HF_HUB_CACHE")
    constants = sys.modules.get("huggingface_hub.constants")
    if (
        wanted
        and constants is not None
        and os.path.abspath(constants.HF_HUB_CACHE) != os.path.abspath(wanted)
    ):
        raise RuntimeError(
            f"huggingface_hub was imported with cache {constants.HF_HUB_CACHE}, not {wanted}; "
            "set HF_HOME/HF_HUB_CACHE before importing transformers"
        )


def load(facts: Facts) -> Loaded:
    """Load the checkpoint exactly as the torch engine does, offline (INV-5)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    _check_cache_env()
    import importlib

    from semif_serve.config import Settings
    from semif_serve.engine import scorer_package, torch_scorer

    package = scorer_package.resolve(facts.scorer)
    settings = Settings(
        api_token="-" * 32,
        model=facts.model,
        revision=facts.revision,
        device=facts.device,
        max_tokens=facts.max_tokens,
        scorer=facts.scorer,
    )
    torch = importlib.import_module("torch")
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if (
        threads.isdigit() and int(threads) > 0
    ):  # the server takes its thread count from the same variable
        torch.set_num_threads(int(threads))
    model, tokenizer, metadata = torch_scorer.load_model(settings, facts.device, facts.dtype, torch)
    return Loaded(facts, package.direct, package.shared, model, tokenizer, metadata)


def reference(loaded: Loaded, rows: list[Row], progress: Any = None) -> list[dict[str, Any]]:
    """SemIf's own `direct.score` result for each row, unchanged (the parity reference)."""
    results = []
    for row in rows:
        results.append(
            loaded.direct.score(
                loaded.model, loaded.tokenizer, row, loaded.metadata, loaded.facts.max_tokens
            )
        )
        if progress is not None:
            progress.tick()
    return results


def time_shared(loaded: Loaded, rows: list[Row], repeats: int) -> list[float]:
    """Wall seconds of `repeats` in-process `score_shared` calls over the same rows."""
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        loaded.shared.score_shared(
            loaded.model, loaded.tokenizer, rows, loaded.metadata, loaded.facts.max_tokens
        )
        seconds.append(time.perf_counter() - started)
    return seconds
