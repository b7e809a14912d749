"""The auditor in process (service/audits.py, extension): what is drawn, what waits, what is dropped or
skipped and counted, and that rows are never logged. Its engine call is a gated stand-in here; on a
socket with the stub scorer it is tests/service/test_audits_http.py."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from typing import Any

import pytest

from semif_serve.decisions import calibration_file, request_model
from semif_serve.engine.scorer import Row, SharedResult
from semif_serve.engine.stub import StubScorer
from semif_serve.service.audits import Auditor
from tests.calibration_files import MATCHING, PRIORS, WITH_PRIORS
from tests.fakes import settings

TABLE = calibration_file.bound({**MATCHING, "priors": PRIORS, "workloads": WITH_PRIORS})
LIMITS = request_model.Limits(64, frozenset(TABLE), TABLE.methods(), TABLE.prior_counts())
SECRET = "the-patient-name-nobody-may-log"


class Engine:
    """Scores with the stub once let through (`gate`), recording the rows it was given."""

    def __init__(self, fail: bool = False) -> None:
        self.stub = StubScorer(settings())
        self.gate = asyncio.Event()
        self.calls: list[list[Row]] = []
        self.fail = fail

    async def submit(self, rows: list[Row]) -> SharedResult:
        await self.gate.wait()
        self.calls.append(rows)
        if self.fail:
            raise ValueError(f"Row {rows[0]['id']}: {SECRET} too long")
        return self.stub.score_shared(rows)


def body(count: int, n: int = 4, orderings: str = "prior", workload: str = "triage") -> bytes:
    return json.dumps(
        {
            "state": SECRET,
            "workload": workload,
            "decisions": [
                {
                    "id": f"d{k}",
                    "question": "which?",
                    "orderings": orderings,
                    "options": [
                        {"id": f"o{i}", "description": f"{SECRET} {k} {i}"} for i in range(n)
                    ],
                }
                for k in range(count)
            ],
        }
    ).encode()


def answered(count: int, **shape: Any) -> tuple[request_model.DecideRequest, list[dict[str, Any]]]:
    """A parsed request and the stub's results for its rows, as the body pipeline holds them."""
    parsed = request_model.parse_shared(body(count, **shape), LIMITS)
    results, _ = StubScorer(settings()).score_shared(parsed.rows())
    return parsed, results


def auditor(engine: Engine, **overrides: Any) -> Auditor:
    made = Auditor(
        settings(**{"audit_rate": 1.0, **overrides}), engine.submit, clock=lambda: 1234.5
    )
    made.draw = random.Random(1).random
    return made


async def finished(audits: Auditor) -> None:
    while audits._pending or audits._task is not None:
        await asyncio.sleep(0.01)


async def test_a_drawn_decision_is_audited_under_its_other_rotations() -> None:
    engine = Engine()
    audits = auditor(engine)
    audits.offer(*answered(1), TABLE)
    engine.gate.set()
    await finished(audits)
    (rows,) = engine.calls
    assert [row["id"] for row in rows] == [
        "d0#o1",
        "d0#o2",
        "d0#o3",
    ]  # never the caller's order again
    assert [o["id"] for o in rows[0]["options"]] == ["o1", "o2", "o3", "o0"]
    assert audits.outcomes == {("triage", 4, "done"): 1}
    assert audits.last == {"triage": 1234.5}


async def test_only_decisions_served_from_the_prior_are_drawn() -> None:
    engine = Engine()
    audits = auditor(engine)
    drawn: list[float] = []
    audits.draw = lambda: drawn.append(0.0) or 0.0
    for orderings in ("none", "rotations"):
        audits.offer(*answered(2, orderings=orderings), TABLE)
    assert drawn == [] and not audits._pending
    audits.offer(*answered(2), TABLE)
    assert len(drawn) == 2


async def test_rate_zero_never_draws() -> None:
    engine = Engine()
    audits = Auditor(settings(), engine.submit)
    drawn: list[float] = []
    audits.draw = lambda: drawn.append(0.0) or 0.0
    audits.offer(*answered(3), TABLE)
    assert drawn == [] and not audits._pending and not audits.outcomes


async def test_the_rate_is_the_share_drawn() -> None:
    engine = Engine()
    audits = auditor(
        engine, audit_rate=0.25, audit_max_pending=10_000, audit_max_pending_bytes=1 << 30
    )
    for _ in range(40):
        audits.offer(*answered(50), TABLE)
    share = len(audits._pending) / 2000
    assert 0.22 < share < 0.28


async def test_an_audit_taken_from_the_queue_shows_as_running_until_its_call_returns() -> None:
    engine = Engine()
    audits = auditor(engine)
    audits.offer(*answered(1), TABLE)
    assert audits.as_json()["pending"]["audits"] == 1
    assert audits.as_json()["pending"]["running"] == 0
    await asyncio.sleep(0)  # the task took it: it waits at the gate, no longer pending
    assert audits.as_json()["pending"]["audits"] == 0
    assert audits.as_json()["pending"]["running"] == 1
    engine.gate.set()
    await finished(audits)
    assert audits.as_json()["pending"]["running"] == 0
    assert audits.outcomes == {("triage", 4, "done"): 1}


async def test_the_count_bound_drops_the_oldest_and_counts_it() -> None:
    engine = Engine()
    audits = auditor(engine, audit_max_pending=3)
    audits.offer(*answered(5), TABLE)
    await asyncio.sleep(0)  # the task took the oldest: it waits at the gate, no longer pending
    audits.offer(*answered(2, n=2, workload="sorting"), TABLE)
    assert [(a.workload, a.row["id"]) for a in audits._pending] == [
        ("triage", "d4"),
        ("sorting", "d0"),
        ("sorting", "d1"),
    ]
    assert audits.outcomes[("triage", 4, "dropped")] == 3
    engine.gate.set()
    await finished(audits)
    assert audits.outcomes[("triage", 4, "done")] == 2
    assert audits.outcomes[("sorting", 2, "done")] == 2


async def test_the_byte_bound_drops_the_oldest_and_counts_it() -> None:
    engine = Engine()
    audits = auditor(engine)
    audits.offer(*answered(1), TABLE)
    size = audits._pending[0].size
    audits = auditor(engine, audit_max_pending_bytes=2 * size + size // 2)
    audits.offer(*answered(4), TABLE)
    assert len(audits._pending) == 2 and audits._bytes <= 2 * size + size // 2
    assert audits.outcomes[("triage", 4, "dropped")] == 2


async def test_more_options_than_the_cap_are_skipped() -> None:
    engine = Engine()
    audits = auditor(engine, audit_max_options=3)
    audits.offer(*answered(2), TABLE)  # 4 options
    audits.offer(*answered(1, n=2, workload="sorting"), TABLE)
    assert audits.outcomes[("triage", 4, "skipped")] == 2
    assert [a.workload for a in audits._pending] == ["sorting"]


async def test_a_drain_drops_what_waits_and_skips_what_comes_after() -> None:
    engine = Engine()
    audits = auditor(engine)
    audits.offer(*answered(3), TABLE)
    await asyncio.sleep(0)
    audits.drain()
    audits.offer(*answered(2), TABLE)
    await asyncio.sleep(0)
    assert audits.outcomes[("triage", 4, "dropped")] == 3  # two waiting, one at the gate
    assert audits.outcomes[("triage", 4, "skipped")] == 2
    assert not audits._pending and audits._bytes == 0 and engine.calls == []


async def test_a_failed_audit_is_counted_and_its_rows_never_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = Engine(fail=True)
    engine.gate.set()
    audits = auditor(engine)
    with caplog.at_level(logging.DEBUG):
        audits.offer(*answered(2), TABLE)
        await finished(audits)
    assert audits.outcomes == {("triage", 4, "failed"): 2}
    assert caplog.records and SECRET not in caplog.text and "d0" not in caplog.text


async def test_a_new_served_prior_starts_the_tally_over() -> None:
    """After a reload changed the prior, agreement and margins read against the old one are gone."""
    engine = Engine()
    engine.gate.set()
    audits = auditor(engine)
    audits.offer(*answered(3), TABLE)
    await finished(audits)
    assert audits.tallies[("triage", 4)].count == 3
    priors = {**PRIORS, "triage": {"4": {"prior": [0.25, 0.25, 0.25, 0.25], "decisions": 9}}}
    reloaded = calibration_file.bound({**MATCHING, "priors": priors, "workloads": WITH_PRIORS})
    audits.offer(*answered(2), reloaded)
    await finished(audits)
    tally = audits.tallies[("triage", 4)]
    assert tally.count == 2 and tally.served == (0.25, 0.25, 0.25, 0.25)
    assert audits.outcomes[("triage", 4, "done")] == 5
