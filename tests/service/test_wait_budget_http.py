"""SEMIF_MAX_WAIT_S on a real socket, over the stub scorer paying a fixed delay per row: a burst
of mixed requests gets each answer within the budget (plus the one call the estimate may miss)
or a 429 `busy` at once, naming the budget, with the estimate as its Retry-After; a refused
request never reaches the scorer; the count check before the body stays as it was; the metrics
tell the two refusals apart, and without the budget nothing of this shows."""

from __future__ import annotations

import asyncio
import json
import math
import re
import signal
import threading
import time
from typing import Any

import pytest

from semif_serve.engine.stub import StubScorer
from tests.fakes import settings
from tests.metrics_samples import sample, scrape
from tests.request_bodies import ROW, SHARED
from tests.served_process import Process
from tests.wire_client import eventually, parse_responses, raw_request, raw_responses, request

PER_ROW_S = 0.4  # the stub's delay per row: a direct call 0.4 s, SHARED's two rows 0.8 s
BUDGET_S = 2.0
LONGEST_CALL_S = PER_ROW_S * len(SHARED["decisions"])
ESTIMATE = re.compile(
    r"^estimated wait (\d+\.\d\d) s \(\d+ rows ahead\) exceeds the "
    r"SEMIF_MAX_WAIT_S budget of 2 s; retry later$"
)


class PerRowStub(StubScorer):
    """The stub with its delay paid per row (a shared call over n rows takes n direct calls' time); counts its calls."""

    def __init__(self, per_row_s: float) -> None:
        super().__init__(settings())
        self.per_row_s = per_row_s
        self.calls = 0
        self._lock = threading.Lock()

    def _pay(self, rows: int) -> None:
        with self._lock:
            self.calls += 1
        time.sleep(self.per_row_s * rows)

    def score(self, row: dict[str, Any]) -> dict[str, Any]:
        self._pay(1)
        return super().score(row)

    def score_shared(self, rows: list[dict[str, Any]]) -> Any:
        self._pay(len(rows))
        return super().score_shared(rows)


async def timed(port: int, path: str, body: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    response = await request(port, "POST", path, body)
    return response, time.perf_counter() - started


async def test_a_burst_is_answered_within_the_budget_or_refused_at_once_with_the_estimate(
    start_server,
) -> None:
    scorer = PerRowStub(PER_ROW_S)
    server = await start_server(scorer, max_wait_s=BUDGET_S)
    # Cold start admits: these two measure each kind's per-row time.
    assert (await request(server.port, "POST", "/decide", ROW)).status == 200
    assert (await request(server.port, "POST", "/decide/shared", SHARED)).status == 200
    burst = [
        ("/decide", ROW) if k % 2 else ("/decide/shared", SHARED) for k in range(10)
    ]  # 15 rows, 6 s of work
    answers = await asyncio.gather(*(timed(server.port, path, body) for path, body in burst))

    admitted = [seconds for response, seconds in answers if response.status == 200]
    refused = [(response, seconds) for response, seconds in answers if response.status != 200]
    assert admitted and refused
    assert max(admitted) <= BUDGET_S + LONGEST_CALL_S, admitted
    for response, seconds in refused:
        assert response.status == 429 and response.code == "busy"
        assert seconds < PER_ROW_S  # at once: before even one row could have been scored
        found = ESTIMATE.match(response.json["error"]["message"])
        assert found, response.json["error"]["message"]
        estimate = float(found.group(1))
        assert estimate > BUDGET_S
        # The estimate rounded up to whole seconds (the message shows it rounded up to 0.01 s), at most 60.
        assert int(response.headers[b"retry-after"]) in {
            min(60, math.ceil(estimate - 0.01)),
            min(60, math.ceil(estimate)),
        }
    assert scorer.calls == 2 + len(admitted)  # a refused request never reached the scorer
    assert server.service.admission.in_progress == 0 and not server.engine.ahead("-")

    metrics = await scrape(server.port)
    assert sample(metrics, "semif_busy_refusals_total", reason="wait") == len(refused)
    assert sample(metrics, "semif_busy_refusals_total", reason="queue") == 0
    assert sample(metrics, "semif_refusals_total", code="busy") == len(
        refused
    )  # its meaning kept: every 429 busy
    assert sample(metrics, "semif_wait_estimate_error_seconds_count") == 2 + len(admitted)


async def test_a_budget_refusal_carries_one_retry_after_its_estimate(start_server) -> None:
    """The refusal brings its own Retry-After (the estimate); ops adds no second one beside it, which
    would leave a client to pick one of two values (read from the raw head: a dict would hide it)."""
    server = await start_server(PerRowStub(0.5), max_wait_s=0.05)
    assert (
        await request(server.port, "POST", "/decide", ROW)
    ).status == 200  # cold start admits; measures >= 0.5 s a row
    ahead = asyncio.ensure_future(request(server.port, "POST", "/decide", ROW))
    await eventually(lambda: server.engine.ahead("-").total() == 1, 5.0)
    body = json.dumps(ROW).encode()
    sent = await raw_responses(
        server.port, raw_request(fields=b"content-length: %d\r\n" % len(body), body=body), 1
    )
    (response,) = parse_responses(sent.data)
    assert (
        response.status == 429
        and "exceeds the SEMIF_MAX_WAIT_S budget" in response.json["error"]["message"]
    )
    head = sent.data.split(b"\r\n\r\n", 1)[0].lower()
    assert head.count(b"\r\nretry-after:") == 1, head
    assert (await ahead).status == 200


async def test_the_count_check_before_the_body_stays_and_is_told_apart(start_server) -> None:
    """With a budget, SEMIF_MAX_QUEUE still refuses before the body with today's message, counted as `queue`."""
    scorer = PerRowStub(PER_ROW_S)
    server = await start_server(scorer, max_wait_s=60.0, max_queue=1)
    first = asyncio.ensure_future(request(server.port, "POST", "/decide", ROW))
    while server.service.admission.in_progress == 0:
        await asyncio.sleep(0.01)
    second = await request(server.port, "POST", "/decide", ROW)
    assert (
        second.status == 429
        and second.json["error"]["message"] == "1 requests already in progress; retry later"
    )
    assert (await first).status == 200
    metrics = await scrape(server.port)
    assert sample(metrics, "semif_busy_refusals_total", reason="queue") == 1
    assert sample(metrics, "semif_busy_refusals_total", reason="wait") == 0


@pytest.mark.parametrize("budget", [None, 30.0])
async def test_without_a_budget_nothing_of_it_shows(start_server, budget: float | None) -> None:
    """Unset, the exposition and the engine's observers are as before; set, both gain the budget's parts."""
    server = await start_server(PerRowStub(0.0), max_wait_s=budget)
    assert (await request(server.port, "POST", "/decide", ROW)).status == 200
    metrics = (await request(server.port, "GET", "/metrics")).body.decode()
    shown = ("semif_busy_refusals" in metrics, "semif_wait_estimate_error_seconds" in metrics)
    assert shown == ((False, False) if budget is None else (True, True))
    assert (server.service.budget is None) == (budget is None)
    assert len(server.service.engine.observers) == (2 if budget is None else 3)


async def test_only_a_successful_call_teaches_the_estimate(start_server, fake) -> None:
    """A call the scorer refused (422) ends in milliseconds: counted, it would price every row at nothing."""
    fake.raise_ = ValueError("the scorer refuses this row")
    server = await start_server(fake, max_wait_s=30.0)
    assert (await request(server.port, "POST", "/decide", ROW)).status == 422
    assert server.service.budget.estimator.recent.per_row("direct") is None
    fake.raise_ = None
    assert (await request(server.port, "POST", "/decide", ROW)).status == 200
    assert server.service.budget.estimator.recent.per_row("direct") is not None


async def test_a_call_longer_than_the_budget_never_refuses_an_idle_server() -> None:
    """The reproduction: one stub call of 1.5 s against a budget of 1 s. Every request sent with nothing
    ahead is served; one sent behind another is refused with Retry-After from the call ahead alone; the
    crossing is logged once and shown by the gauge."""
    process = await Process.start(SEMIF_STUB_DELAY_MS="1500", SEMIF_MAX_WAIT_S="1")
    try:
        for path, body in (("/decide", ROW), ("/decide", ROW), ("/decide/shared", SHARED)):
            assert (await request(process.port, "POST", path, body)).status == 200
        in_flight = asyncio.ensure_future(request(process.port, "POST", "/decide", ROW))
        await asyncio.wait_for(process.in_flight(), 5)
        behind = await request(process.port, "POST", "/decide/shared", SHARED)
        assert behind.status == 429
        found = re.match(
            r"^estimated wait (1\.5\d) s \(1 rows ahead\) exceeds the SEMIF_MAX_WAIT_S budget of 1 s; "
            r"retry later$",
            behind.json["error"]["message"],
        )
        assert found, behind.json["error"]["message"]
        assert behind.headers[b"retry-after"] == b"2"  # the one row ahead, not its own two
        assert (await in_flight).status == 200
        assert (await request(process.port, "POST", "/decide", ROW)).status == 200
        metrics = await scrape(process.port)
        assert sample(metrics, "semif_wait_budget_call_over", kind="direct") == 1
        assert sample(metrics, "semif_wait_budget_call_over", kind="shared") == 1
        assert sample(metrics, "semif_busy_refusals_total", reason="wait") == 1
    finally:
        process.proc.send_signal(signal.SIGTERM)
        assert await process.exit_code(10) == 0
    warnings = [
        line for line in process.stderr if "over the SEMIF_MAX_WAIT_S budget of 1 s" in line
    ]
    assert [w.split("a ", 1)[1].split(" scorer call")[0] for w in warnings] == [
        "direct",
        "shared",
    ], warnings
