"""GET /metrics on a real socket: parsed with prometheus_client's own parser after known traffic.

Every value checked is one the traffic in the test moved (or, for the gauges, the
state the test holds the server in): refusal counters by code, the in-progress
gauge during a blocked scorer call, the scorer histograms by kind, rows, OOM
events, the info metric, and that /metrics answers with the queue full.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import pytest

from semif_serve.decisions import calibration_file
from semif_serve.engine.scorer import OutOfMemory
from semif_serve.engine.worker import Engine
from semif_serve.http.exchange import Exchange, Head, Reply
from semif_serve.service.head_policy import ROUTES, Service
from tests.fake_scorer import FakeScorer
from tests.fakes import settings
from tests.metrics_samples import Samples, scrape, value
from tests.request_bodies import ROW, SHARED
from tests.wire_client import TOKEN, Connection, eventually, request


def delta(after: Samples, before: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


async def test_decisions_are_counted_by_method_and_a_prior_decision_is_one_row(
    start_server, fake
) -> None:
    """semif_decisions_total{method} counts answered decisions; refused ones are not decisions."""
    table = calibration_file.Table(
        priors={
            "triage": {
                2: calibration_file.FittedPrior((0.6, 0.4), 8),
                3: calibration_file.FittedPrior((0.5, 0.3, 0.2), 8),
            }
        }
    )
    server = await start_server(fake, calibration=table)
    before = await scrape(server.port)
    prior = {"orderings": "prior"}
    mixed = {
        **SHARED,
        "workload": "triage",
        "decisions": [{**SHARED["decisions"][0], **prior}, {**SHARED["decisions"][1], **prior}],
    }
    assert (await request(server.port, "POST", "/decide/shared", mixed)).status == 200
    assert (
        await request(server.port, "POST", "/decide", {**ROW, **prior, "workload": "triage"})
    ).status == 200
    assert (
        await request(server.port, "POST", "/decide", {**ROW, "orderings": "rotations"})
    ).status == 200
    assert (await request(server.port, "POST", "/decide/shared", SHARED)).status == 200
    assert (
        await request(server.port, "POST", "/decide", {**ROW, **prior})
    ).status == 422  # no workload: not a decision
    after = await scrape(server.port)
    decisions = "semif_decisions_total"
    assert [
        delta(after, before, decisions, method=m) for m in ("prior", "rotations", "none", "all")
    ] == [3, 1, 2, 0]
    assert (
        delta(after, before, "semif_rows_scored_total") == 2 + 1 + 2 + 2
    )  # a prior decision is one row


async def test_counters_and_histograms_move_with_known_traffic(start_server, fake) -> None:
    server = await start_server(fake, max_body_bytes=4096)
    before = await scrape(server.port)
    assert (await request(server.port, "GET", "/health", headers=[])).status == 200
    assert (await request(server.port, "POST", "/decide", ROW)).status == 200
    assert (await request(server.port, "POST", "/decide/shared", SHARED)).status == 200
    assert (
        await request(server.port, "POST", "/decide", {**ROW, "orderings": "rotations"})
    ).status == 200
    assert (
        await request(
            server.port, "POST", "/decide", ROW, headers=[(b"authorization", b"Bearer wrong")]
        )
    ).status == 401
    assert (await request(server.port, "POST", "/decide", {**ROW, "id": ""})).status == 422
    assert (await request(server.port, "GET", "/nowhere", headers=[])).status == 404
    assert (
        await request(server.port, "POST", "/decide", {**ROW, "state": "x" * 5000})
    ).status == 413
    after = await scrape(server.port)

    requests = "semif_http_requests_total"
    assert delta(after, before, requests, route="/health", status="200") == 1
    assert delta(after, before, requests, route="/decide", status="200") == 2
    assert delta(after, before, requests, route="/decide/shared", status="200") == 1
    assert delta(after, before, requests, route="/decide", status="401") == 1
    assert delta(after, before, requests, route="/decide", status="422") == 1
    assert (
        delta(after, before, requests, route="other", status="404") == 1
    )  # never the raw path as a label
    assert delta(after, before, requests, route="/decide", status="413") == 1
    assert delta(after, before, requests, route="/metrics", status="200") == 1  # the first scrape
    for code in ("unauthorized", "invalid_request", "not_found", "request_too_large"):
        assert delta(after, before, "semif_refusals_total", code=code) == 1, code
    assert value(after, "semif_refusals_total", code="busy") == 0
    assert delta(after, before, "semif_http_request_duration_seconds_count", route="/decide") == 5
    # Scorer calls: one direct /decide; shared for /decide/shared (2 rows) and the rotations (2 rows).
    assert delta(after, before, "semif_scorer_call_duration_seconds_count", kind="direct") == 1
    assert delta(after, before, "semif_scorer_call_duration_seconds_count", kind="shared") == 2
    assert delta(after, before, "semif_scorer_queue_seconds_count", kind="shared") == 2
    assert delta(after, before, "semif_rows_scored_total") == 1 + 2 + 2
    assert value(after, "semif_out_of_memory_events_total") == 0
    assert value(after, "semif_max_queue") == server.settings.max_queue
    assert value(after, "semif_requests_in_progress") == 0
    assert value(after, "semif_open_connections") == 1  # the scrape's own connection
    assert (
        value(
            after,
            "semif_build_info",
            scorer="fake",
            semif_commit="fake-commit",
            model="fake-model",
            revision="r" * 40,
            device="none",
        )
        == 1
    )
    assert not any(
        name.startswith("semif_cuda_") for name, _ in after
    )  # not on CUDA: absent, not zero


async def test_metrics_answer_with_the_queue_full_and_show_the_call_in_progress(
    start_server, fake
) -> None:
    server = await start_server(fake, max_queue=1)
    fake.gate = threading.Event()
    busy = await Connection.open(server.port)
    busy.send_request(
        "POST",
        "/decide",
        b'{"id": "r1", "state": "s", "question": "q", "options": '
        b'[{"id": "a", "description": "A"}, {"id": "b", "description": "B"}]}',
        None,
    )
    await fake.wait_entered()
    try:
        refused = await request(server.port, "POST", "/decide", ROW)
        assert refused.status == 429 and refused.code == "busy"
        during = await scrape(
            server.port
        )  # the queue is full and a scorer call runs: still answered
        assert value(during, "semif_requests_in_progress") == 1
        assert value(during, "semif_refusals_total", code="busy") == 1
        assert value(during, "semif_open_connections") == 2  # the blocked POST and this scrape
        assert (
            value(during, "semif_scorer_call_duration_seconds_count", kind="direct") == 0
        )  # not ended yet
    finally:
        fake.gate.set()
    assert (await busy.read_response()).status == 200
    await busy.close()
    await eventually(lambda: server.service.admission.in_progress == 0)
    after = await scrape(server.port)
    assert value(after, "semif_requests_in_progress") == 0
    assert value(after, "semif_scorer_call_duration_seconds_count", kind="direct") == 1


async def test_out_of_memory_events_are_counted(start_server, fake) -> None:
    server = await start_server(fake)
    fake.raise_ = OutOfMemory("CUDA out of memory")
    response = await request(server.port, "POST", "/decide/shared", SHARED)
    assert response.status == 503 and response.code == "out_of_memory"
    samples = await scrape(server.port)
    assert value(samples, "semif_out_of_memory_events_total") == 1
    assert value(samples, "semif_refusals_total", code="out_of_memory") == 1
    assert value(samples, "semif_rows_scored_total") == 2


class CudaFake:
    """Reports CUDA memory facts the way the torch scorer does on a card."""

    def __init__(self, fake: Any) -> None:
        self.fake = fake

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fake, name)

    def health(self) -> dict[str, Any]:
        return {
            **self.fake.health(),
            "device": "cuda:0",
            "memory_reserved_bytes": 3 << 30,
            "memory_allocated_bytes": 2 << 30,
            "max_memory_reserved_bytes": 4 << 30,
        }


async def test_cuda_memory_gauges_read_the_engine_facts(start_server, fake) -> None:
    server = await start_server(CudaFake(fake))
    samples = await scrape(server.port)
    assert value(samples, "semif_cuda_memory_reserved_bytes") == 3 << 30
    assert value(samples, "semif_cuda_memory_allocated_bytes") == 2 << 30
    assert value(samples, "semif_cuda_memory_peak_reserved_bytes") == 4 << 30


async def test_metrics_expose_no_request_content(start_server, fake) -> None:
    server = await start_server(fake)
    marker = "marker-0f1e2d3c"
    await request(
        server.port,
        "POST",
        "/decide",
        {**ROW, "state": marker},
        headers=[
            (b"authorization", b"Bearer " + marker.encode()),
            (b"x-request-id", marker.encode()),
        ],
    )
    await request(
        server.port,
        "POST",
        "/decide",
        {**ROW, "state": marker},
        headers=[
            (b"authorization", b"Bearer " + TOKEN.encode()),
            (b"x-request-id", marker.encode()),
        ],
    )
    await request(server.port, "GET", "/" + marker, headers=[])
    body = (await request(server.port, "GET", "/metrics", headers=[])).body.decode()
    assert marker not in body and TOKEN not in body


async def test_metrics_need_no_token_and_take_no_admission_slot(start_server, fake) -> None:
    server = await start_server(fake)
    response = await request(
        server.port, "GET", "/metrics", headers=[(b"authorization", b"Bearer wrong")]
    )
    assert response.status == 200
    assert (await request(server.port, "POST", "/metrics", b"", headers=[])).status == 405


async def test_with_metrics_off_the_path_is_404_and_serving_goes_on(start_server, fake) -> None:
    server = await start_server(fake, metrics=False)
    response = await request(server.port, "GET", "/metrics", headers=[])
    assert response.status == 404 and response.code == "not_found"
    assert (await request(server.port, "POST", "/decide", ROW)).status == 200


async def test_without_prometheus_client_the_server_starts_with_metrics_off(
    start_server, fake, monkeypatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.setitem(sys.modules, "semif_serve.ops.metrics", None)
    server = await start_server(fake)
    assert server.ops.metrics is None
    assert (await request(server.port, "GET", "/metrics", headers=[])).status == 404
    assert (await request(server.port, "POST", "/decide", ROW)).status == 200


@pytest.mark.parametrize("value_", ["yes", "ON", ""])
def test_a_bad_metrics_setting_is_refused(value_: str) -> None:
    from semif_serve import config

    with pytest.raises(ValueError, match="SEMIF_METRICS"):
        config.load({"SEMIF_API_TOKEN": TOKEN, "SEMIF_METRICS": value_})


def test_a_service_without_a_server_answers_metrics_404_saying_they_are_off() -> None:
    """Built alone (no server, so no ops handler handed over), the service still routes /metrics,
    to a 404 that says why."""
    service = Service(settings(), Engine(FakeScorer()))
    reply = service.answer(
        Head(b"GET", b"/metrics", {}, draining=False), Exchange("r", "GET", b"/metrics")
    )
    assert isinstance(reply, Reply)
    assert (reply.status, reply.code, reply.route) == (404, "not_found", ROUTES[b"/metrics"])
    assert json.loads(reply.body)["error"]["message"] == "metrics are off (SEMIF_METRICS)"
