"""The application layer in process, without sockets: /health's payload and status, the
scorer-failure table's exact messages, and a scorer that returns the wrong number of
results. The wire tests see the same through HTTP; these pin the details exactly.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from semif_serve.engine import Engine
from semif_serve.errors import OutOfMemory, ScoringFailed
from semif_serve.service import Service

from .bodies import BODY, ROW, SHARED
from .conftest import settings
from .fake_scorer import FakeScorer


@pytest.fixture
async def service(fake: FakeScorer) -> Any:
    engine = Engine(fake)
    yield Service(settings(max_queue=3, max_decisions=5, max_tokens=77, vram_cap_gib=2.5,
                           calibration={"b": 1.0, "a": 2.0}), engine)
    engine.close()


async def test_health_reports_the_engine_facts_and_the_limits(service: Service) -> None:
    reply = service.health()
    assert reply.status == 200
    assert json.loads(reply.body) == {
        "scorer": "fake", "semif_commit": "fake-commit", "model": "fake-model", "revision": "r" * 40, "device": "none",
        "status": "ok", "vram_cap_gib": 2.5, "max_tokens": 77, "max_decisions": 5, "max_queue": 3,
        "in_progress": 0, "workloads": ["a", "b"],
    }


async def test_health_while_draining_is_503_draining(service: Service) -> None:
    reply = service.health(draining=True)
    assert reply.status == 503 and json.loads(reply.body)["status"] == "draining"


@pytest.mark.parametrize("error,status,code,message", [
    (ValueError("v" * 400), 422, "invalid_request", "v" * 300 + "…"),
    (ValueError(""), 422, "invalid_request", "the scorer refused the input"),
    (OutOfMemory(""), 503, "out_of_memory", "CUDA out of memory"),
    (OutOfMemory("CUDA out of memory. Tried to allocate 2 GiB"), 503, "out_of_memory",
     "CUDA out of memory. Tried to allocate 2 GiB"),
    (ScoringFailed("s" * 400), 500, "scoring_failed", "s" * 300 + "…"),
    (ScoringFailed(""), 500, "scoring_failed", "scoring failed"),
    (RuntimeError("internal detail"), 500, "scoring_failed", "scoring failed"),
])
async def test_scorer_failures_give_the_tables_status_and_exact_message(service, fake, caplog, error, status, code,
                                                                       message) -> None:
    fake.raise_ = error
    for name, body in (("decide", BODY), ("shared", json.dumps(SHARED).encode())):
        reply = await service.post(name, body)
        assert reply.status == status
        assert json.loads(reply.body) == {"error": {"code": code, "message": message}}
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
    if isinstance(error, RuntimeError):
        assert [r.getMessage() for r in logged] == ["scorer call failed"] * 2
        assert all(r.exc_info and r.exc_info[1] is error for r in logged)  # the traceback goes to the log only
    else:
        assert logged == []


async def test_a_scorer_returning_the_wrong_number_of_results_is_a_logged_500(service, fake, caplog) -> None:
    original = fake.score_shared
    fake.score_shared = lambda rows: (original(rows)[0] * 2, {})  # one result too many per row
    reply = await service.post("shared", json.dumps(SHARED).encode())
    assert reply.status == 500
    assert json.loads(reply.body) == {"error": {"code": "scoring_failed", "message": "failed to build the response"}}
    (record,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.getMessage() == "failed to build a response from a scorer result"
    assert str(record.exc_info[1]) == "scorer returned 4 results for 2 rows"


async def test_a_refused_body_never_takes_an_admission_slot(service, fake) -> None:
    reply = await service.post("decide", b"[]")
    assert reply.status == 422 and service.admission.in_progress == 0 and fake.calls == []
    assert (await service.post("decide", json.dumps(ROW).encode())).status == 200
