"""Audits on a real socket over the stub scorer (extension): a sampled share of the decisions served
with the prior, scored afterwards under their other rotations, never touching a reply.

The live prior /v1/audit reports is checked against decisions/prior.py's arithmetic over the same
decisions scored by the same server under "rotations"; /metrics against what was sent.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from typing import Any

import pytest

from semif_serve.decisions import calibration_file, prior
from semif_serve.engine.stub import StubScorer
from semif_serve.engine.worker import CallTiming
from tests.calibration_files import MATCHING, PRIORS, WITH_PRIORS
from tests.fakes import settings
from tests.metrics_samples import scrape, value
from tests.timing import timeless
from tests.wire_client import request

TABLE = calibration_file.bound({**MATCHING, "priors": PRIORS, "workloads": WITH_PRIORS})
WORDS = ["kettle", "ice", "granite", "fog", "ember", "dune", "cedar", "brook", "amber"]


def decisions(count: int, orderings: str = "prior", n: int = 4) -> list[dict[str, Any]]:
    """`count` decisions over n options, each its own content, all under one orderings method."""
    return [
        {
            "id": f"{orderings}-{k}",
            "question": f"Which one fits best ({k})?",
            "orderings": orderings,
            "options": [
                {"id": f"o{i}", "description": WORDS[(k + 2 * i) % len(WORDS)] + str(k)}
                for i in range(n)
            ],
        }
        for k in range(count)
    ]


def shared(items: list[dict[str, Any]], workload: str = "triage") -> dict[str, Any]:
    return {"state": {"ticket": "the printer is on fire"}, "workload": workload, "decisions": items}


async def start(start_server: Any, **overrides: Any) -> Any:
    """A server over the stub scorer serving TABLE (its priors bound to what the stub reports)."""
    return await start_server(
        StubScorer(settings(**overrides)), calibration=TABLE, metrics=True, **overrides
    )


async def settled(server: Any, timeout: float = 20.0) -> None:
    """Until no audit waits or runs."""
    auditor = server.audits
    deadline = asyncio.get_running_loop().time() + timeout
    while auditor._pending or auditor._task is not None:
        assert asyncio.get_running_loop().time() < deadline, "the audits never finished"
        await asyncio.sleep(0.02)


async def post(port: int, body: Any) -> Any:
    response = await request(port, "POST", "/decide/shared", body)
    assert response.status == 200, response.body
    return response.json


async def test_a_reply_is_the_same_audited_or_not(start_server: Any) -> None:
    """Half the decisions drawn (seeded): every reply equals, field by field and float by float, the
    reply of a server with audits off, for the audited decisions and the others alike."""
    plain = await start(start_server)
    audited = await start(start_server, audit_rate=0.5)
    audited.audits.draw = random.Random(7).random
    mixed = decisions(12) + decisions(2, "rotations") + decisions(2, "none")
    for body in (shared(mixed), shared(decisions(3, n=2), "sorting")):
        assert timeless(await post(audited.port, body)) == timeless(await post(plain.port, body))
    await settled(audited)
    done = sum(
        count for (_, _, outcome), count in audited.audits.outcomes.items() if outcome == "done"
    )
    assert 0 < done < 15  # some decisions audited, some not: both kinds of reply were compared
    assert plain.audits.outcomes == {}


async def test_a_failing_audit_never_fails_its_reply_nor_logs_it(
    start_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A fault in the offer itself is logged by its type; the reply goes out as built, and the
    request's content reaches no log line."""
    audited = await start(start_server, audit_rate=1.0)

    def broken() -> float:
        raise RuntimeError("the draw broke")

    audited.audits.draw = broken
    plain = await start(start_server)
    body = shared(decisions(3))
    with caplog.at_level(logging.DEBUG):
        assert timeless(await post(audited.port, body)) == timeless(await post(plain.port, body))
        await asyncio.sleep(0.05)
    assert "failed to queue an audit: RuntimeError" in caplog.text
    assert "printer" not in caplog.text and WORDS[0] not in caplog.text


async def test_the_live_prior_is_prior_py_over_the_same_rotations(start_server: Any) -> None:
    """Every decision audited: /v1/audit's live prior, its standard errors and its agreement equal
    decisions/prior.py and averaging over the same decisions served under "rotations", within 1e-9."""
    server = await start(start_server, audit_rate=1.0)
    items = decisions(10)
    served = await post(server.port, shared(items))
    await settled(server)
    rotated = await post(server.port, shared(decisions(10, "rotations")))
    priors = [prior.decision_prior(result["orderings"]) for result in rotated["results"]]
    tops = [result["combined"]["top"] for result in rotated["results"]]
    response = await request(server.port, "GET", "/v1/audit")
    assert response.status == 200
    (entry,) = response.json["audits"]
    assert (entry["workload"], entry["n"], entry["audits"]) == ("triage", 4, 10)
    assert entry["outcomes"] == {"done": 10, "dropped": 0, "skipped": 0, "failed": 0}
    expected = prior.workload_prior(priors)
    assert all(math.isclose(a, b, abs_tol=1e-9) for a, b in zip(entry["live_prior"], expected))
    errors = [
        math.sqrt(sum((p[i] - expected[i]) ** 2 for p in priors) / (len(priors) - 1) / len(priors))
        for i in range(4)
    ]
    assert all(math.isclose(a, b, abs_tol=1e-9) for a, b in zip(entry["standard_errors"], errors))
    agreed = sum(r["combined"]["top"] == top for r, top in zip(served["results"], tops))
    assert entry["agreements"] == agreed
    assert entry["served_prior"] == list(PRIORS["triage"]["4"]["prior"])
    assert entry["drift"] is not None and entry["drift_window"] == 10
    assert response.json["calibration"]["priors"]["triage"]["4"]["prior"] == entry["served_prior"]


async def test_audits_are_counted_apart_on_metrics(start_server: Any) -> None:
    server = await start(start_server, audit_rate=1.0)
    timings: list[CallTiming] = []
    server.engine.observers.append(timings.append)
    await post(server.port, shared(decisions(9)))
    await settled(server)
    samples = await scrape(server.port)
    labels = {"workload": "triage", "n": "4"}
    assert value(samples, "semif_audits_total", outcome="done", **labels) == 9
    assert value(samples, "semif_audits_total", outcome="dropped", **labels) == 0
    assert (
        value(samples, "semif_audit_agreements_total", **labels)
        == server.audits.tallies[("triage", 4)].agreements
    )
    assert value(samples, "semif_prior_drift", **labels) > 0
    assert value(samples, "semif_prior_drift_threshold", **labels) == pytest.approx(
        3.0233, abs=1e-3
    )
    assert value(samples, "semif_audits_pending", workload="triage") == 0
    assert value(samples, "semif_audit_last_seconds", workload="triage") > 0
    # the request's one row per decision, and the audits' three each, counted apart
    assert value(samples, "semif_rows_scored_total") == 9
    assert value(samples, "semif_audit_rows_scored_total") == 27
    assert value(samples, "semif_scorer_call_duration_seconds_count", kind="audit") == 9
    assert [timing.kind for timing in timings] == ["shared"] + ["audit"] * 9


async def test_audits_off_keep_the_exposition_as_before(start_server: Any) -> None:
    server = await start(start_server)
    text = (await request(server.port, "GET", "/metrics")).body.decode()
    assert "semif_audit" not in text and "semif_prior_drift" not in text


async def test_the_audit_route_needs_the_bearer(start_server: Any) -> None:
    server = await start(start_server, audit_rate=1.0)
    response = await request(server.port, "GET", "/v1/audit", headers=[])
    assert (response.status, response.code) == (401, "unauthorized")


async def test_a_drain_drops_what_waits_and_what_runs(start_server: Any) -> None:
    """Five decisions drawn with room for two: three dropped at once, then the drain drops the one
    waiting and the one whose call was running; none is done."""
    server = await start(start_server, audit_rate=1.0, audit_max_pending=2, stub_delay_ms=400)
    await post(server.port, shared(decisions(5)))
    await asyncio.sleep(0.1)  # the first audit's call is running
    assert server.audits.outcomes[("triage", 4, "dropped")] == 3
    await server.shutdown()
    await settled(server)
    assert server.audits.outcomes[("triage", 4, "dropped")] == 5
    assert server.audits.outcomes[("triage", 4, "done")] == 0


async def test_an_audit_waits_while_a_callers_call_is_queued(start_server: Any) -> None:
    """D (audited) runs; R2 queues behind it; D's reply queues its audit; R3 comes while R2 runs. The
    audit runs only once no caller's call waits: after R3."""
    server = await start(start_server, audit_rate=1.0, stub_delay_ms=500)
    started: list[tuple[str, float]] = []
    server.engine.observers.append(lambda t: started.append((t.kind, t.started or 0.0)))
    first = asyncio.create_task(post(server.port, shared(decisions(1))))
    await asyncio.sleep(0.15)
    second = asyncio.create_task(post(server.port, shared(decisions(1, "none"))))
    await first  # R2's call runs now, the audit waits
    third = asyncio.create_task(post(server.port, shared(decisions(2, "none"))))
    await asyncio.gather(second, third)
    await settled(server)
    order = [kind for kind, _ in sorted(started, key=lambda pair: pair[1])]
    assert order == ["shared", "shared", "shared", "audit"]


@pytest.mark.parametrize("threshold,audited", [(0.0, 3), (1.0, 0)], ids=["sure", "escalated"])
async def test_adaptive_decisions_are_audited_only_where_they_did_not_escalate(
    start_server: Any, threshold: float, audited: int
) -> None:
    """Threshold 0: no margin is below it, every adaptive decision is its one row, and audited.
    Threshold 1: every decision escalated, was scored under every rotation, and is not."""
    priors = {"triage": {"4": {**PRIORS["triage"]["4"], "threshold": threshold}}}
    table = calibration_file.bound({**MATCHING, "priors": priors})
    server = await start_server(
        StubScorer(settings()), calibration=table, metrics=True, audit_rate=1.0
    )
    await post(server.port, shared(decisions(3, "adaptive")))
    await settled(server)
    assert server.audits.outcomes[("triage", 4, "done")] == audited
