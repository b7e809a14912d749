"""Fixtures: a real server on an ephemeral loopback port, driven by a given scorer; the real
tiny model, SmolLM2 and the 0.5B reading model, built once, and the settings that serve each
through the production path."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from semif_serve.builders import reading, smollm2
from semif_serve.config import Settings
from semif_serve.engine.scorer import Scorer
from semif_serve.engine.worker import Engine
from semif_serve.http.connection import Drain
from semif_serve.server import Server
from tests.fake_scorer import FakeScorer
from tests.fakes import calibration, settings
from tests.http.memory import FakeClock, Memory
from tests.reading_wheels import require_parts
from tests.smollm2_wheel import require_gguf

Start = Callable[..., Awaitable[Server]]


@pytest.fixture
async def start_server() -> Any:
    """start(scorer, **settings) -> Server listening on 127.0.0.1 (server.port set)."""
    servers: list[Server] = []

    async def start(scorer: Scorer | None = None, **overrides: Any) -> Server:
        engine = Engine(scorer if scorer is not None else FakeScorer())
        await engine.start()
        table = calibration(overrides.pop("calibration", None))
        server = Server(settings(**overrides), engine, calibration=table)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.shutdown()


@pytest.fixture
def fake() -> FakeScorer:
    return FakeScorer()


@pytest.fixture
async def memory_server(fake: FakeScorer) -> Any:
    """memory_server(**settings) -> Memory: the fake scorer behind a Server that does not listen, its
    connections in memory on a fake clock (tests/http/memory.py)."""
    engines: list[Engine] = []

    async def start(**overrides: object) -> Memory:
        engine = Engine(fake)
        await engine.start()
        engines.append(engine)
        clock = FakeClock()
        table = calibration(overrides.pop("calibration", None))
        return Memory(Server(settings(**overrides), engine, calibration=table), clock, Drain(clock))

    yield start
    for engine in engines:
        engine.close()


# -- the real models: the tiny one built once per module, SmolLM2 once per session ----------------


@pytest.fixture(scope="module")
def tiny_built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from semif_serve.builders import tiny as tiny_model

    return tiny_model.build(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def smollm2_build() -> dict[str, str]:
    """Build (or find) SmolLM2 in the per-machine cache; skip, or under CI=true fail, without the wheel."""
    require_gguf()
    return smollm2.build()


def _reading(size: str) -> dict[str, str]:
    """Build (or find) a reading model in the per-machine cache; skip, or under CI=true fail,
    without its parts."""
    model = reading.MODELS[size]
    require_parts(model)
    return reading.build(model)


@pytest.fixture(scope="session")
def reading_build() -> dict[str, str]:
    """The 0.5B reading model: quick to load twice (served and in-process)."""
    return _reading("0.5b")


@pytest.fixture(scope="session")
def reading_large_build() -> dict[str, str]:
    """The 1.5B reading model: the one that reads (7.1 GB of float32 weights)."""
    return _reading("1.5b")


@contextlib.contextmanager
def _served(built: dict[str, str]) -> Iterator[Settings]:
    """Settings that serve a built model through the production path, with the process
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
                patch.setenv(key, built[key])
            patch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", built["HF_HUB_CACHE"])
            patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
            patch.setattr(
                shared, "_state_prefix", shared._state_prefix
            )  # undoes install() at teardown
            yield settings(
                model=built["SEMIF_MODEL"],
                revision=built["SEMIF_REVISION"],
                device="cpu",
                scorer="fastjev",
            )
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_settings(tiny_built: dict[str, str]) -> Iterator[Settings]:
    """The tiny model served (a module that overrides `tiny_built` serves that model instead)."""
    with _served(tiny_built) as served:
        yield served


@pytest.fixture(scope="module")
def smollm2_settings(smollm2_build: dict[str, str]) -> Iterator[Settings]:
    """SmolLM2 served."""
    with _served(smollm2_build) as served:
        yield served
