"""Fixtures: a real server on an ephemeral loopback port, driven by a given scorer."""

from __future__ import annotations

import dataclasses
from typing import Any, Awaitable, Callable

import pytest

from semif_serve.config import Settings
from semif_serve.engine import Engine, Scorer
from semif_serve.server import Server

from .fake_scorer import FakeScorer
from .wire_client import TOKEN

Start = Callable[..., Awaitable[Server]]


def settings(**overrides: Any) -> Settings:
    base = Settings(api_token=TOKEN, host="127.0.0.1", port=0, scorer="stub")
    return dataclasses.replace(base, **overrides)


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
