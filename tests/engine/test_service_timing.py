"""The CallTiming a /decide reply carries to the access log and metrics (routes.Reply.timing).

The server reads `Reply.timing` after each POST to log and count the scorer call; it
must be the very CallTiming the engine filled, on success, on a scorer failure and on
a reply that could not be built. In process: the real Service and Engine, the fake
scorer behind them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from semif_serve.engine.scorer import OutOfMemory
from semif_serve.engine.worker import Engine
from semif_serve.http.exchange import Reply
from semif_serve.service.head_policy import ROUTES, Service
from tests.fakes import settings
from tests.request_bodies import BODY, SHARED

SHARED_BODY = json.dumps(SHARED).encode()


async def post(fake: Any, path: bytes, body: bytes) -> Reply:
    engine = Engine(fake)
    try:
        return await Service(settings(), engine).post(ROUTES[path], body)
    finally:
        engine.close()


def assert_filled(reply: Reply, kind: str, rows: int, outcome: str) -> None:
    timing = reply.timing
    assert timing is not None
    assert (timing.kind, timing.rows, timing.outcome) == (kind, rows, outcome)
    assert timing.started is not None and timing.ended is not None  # the engine filled this one


@pytest.mark.parametrize(
    "path,body,kind,rows",
    [(b"/decide", BODY, "direct", 1), (b"/decide/shared", SHARED_BODY, "shared", 2)],
    ids=["direct", "shared"],
)
async def test_a_scored_reply_carries_the_call_the_engine_timed(
    fake, path: bytes, body: bytes, kind: str, rows: int
) -> None:
    reply = await post(fake, path, body)
    assert reply.status == 200
    assert_filled(reply, kind, rows, "ok")


async def test_a_scorer_failure_carries_its_timing_and_outcome(fake) -> None:
    fake.raise_ = OutOfMemory("no room")
    reply = await post(fake, b"/decide", BODY)
    assert (reply.status, reply.code) == (503, "out_of_memory")
    assert_filled(reply, "direct", 1, "out_of_memory")


async def test_a_reply_that_cannot_be_built_still_carries_the_call(
    fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one result short: the reply cannot be assembled after the call has run
    monkeypatch.setattr(fake, "score_shared", lambda rows: fake._enter("shared", rows) or ([], {}))
    reply = await post(fake, b"/decide/shared", SHARED_BODY)
    assert (reply.status, reply.code) == (500, "scoring_failed")
    assert json.loads(reply.body)["error"]["message"] == "failed to build the response"
    assert_filled(reply, "shared", 2, "ok")


async def test_a_refused_body_has_no_call(fake) -> None:
    reply = await post(fake, b"/decide", b"{}")
    assert reply.status == 422 and reply.timing is None and fake.calls == []
