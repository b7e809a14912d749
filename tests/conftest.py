"""Fixtures: a real server on an ephemeral loopback port, driven by a given scorer."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Iterator

import pytest

from semif_serve.config import Settings
from semif_serve.engine import Engine
from semif_serve.scorer import Scorer
from semif_serve.server import Server

from .fake_scorer import FakeScorer
from .fakes import settings  # the one settings factory; test files also import it from here

Start = Callable[..., Awaitable[Server]]


@pytest.fixture
async def start_server() -> Any:
    """start(scorer, **settings) -> Server listening on 127.0.0.1 (server.port set)."""
    servers: list[Server] = []

    async def start(scorer: Scorer | None = None, **overrides: Any) -> Server:
        engine = Engine(scorer if scorer is not None else FakeScorer())
        await engine.start()
        server = Server(settings(**overrides), engine)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.shutdown()


@pytest.fixture
def fake() -> FakeScorer:
    return FakeScorer()


# -- the real tiny model (torch is imported only by the tests that use these) --

TIMING_KEYS = ("forward_seconds", "total_seconds")


def without_timing(result: dict[str, Any]) -> dict[str, Any]:
    """A scorer result without its wall-clock fields, which differ run to run."""
    return {key: value for key, value in result.items() if key not in TIMING_KEYS}


@pytest.fixture(scope="module")
def tiny_built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from semif_serve.builders import tiny as tiny_model

    return tiny_model.build(tmp_path_factory.mktemp("tiny"))


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
