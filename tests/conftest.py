"""Fixtures: a real server on an ephemeral loopback port, driven by a given scorer."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import pytest

from semif_serve.engine import Engine
from semif_serve.scorer import Scorer
from semif_serve.server import Server

from tests.fake_scorer import FakeScorer
from tests.fakes import settings

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


# -- the real tiny model: built once per module; tests/models/conftest.py serves it --

@pytest.fixture(scope="module")
def tiny_built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from semif_serve.builders import tiny as tiny_model

    return tiny_model.build(tmp_path_factory.mktemp("tiny"))
