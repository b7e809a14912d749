"""The client's retry policy: which outcomes are retried, the backoff's shape, Retry-After and the deadline.

The policy is tested two ways: pure, on a fake clock and a fixed random source (no
sleeping), and through both clients over an httpx MockTransport that plays a server
answering a scripted series of responses (the stub server on main sends no
Retry-After, so honouring it is proven here; the live retries are in test_client_live).
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from semif_serve.client import (
    ApiError,
    AsyncClient,
    Client,
    DeadlineExceeded,
    RetryPolicy,
    TransportError,
)
from semif_serve.client.retry import parse_retry_after
from tests.client.replies import OK


def envelope(status: int, code: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(
        status,
        json={"error": {"code": code, "message": f"{code} said the server"}},
        headers=headers,
    )


class Script:
    """A MockTransport handler that answers each request with the next scripted response."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []
        self.times: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.times.append(time.monotonic())
        answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    @property
    def ids(self) -> list[str]:
        return [r.headers["x-request-id"] for r in self.requests]


def fast(**overrides: Any) -> RetryPolicy:
    """A policy whose pauses are tiny, so scripted retries cost no wall time."""
    return RetryPolicy(**{"deadline": 5.0, "base": 0.001, "cap": 0.002, **overrides})


def sync_call(script: Script, policy: RetryPolicy, **kwargs: Any) -> Any:
    with Client(
        "http://semif.test", "t" * 32, retry=policy, transport=httpx.MockTransport(script)
    ) as client:
        return client.decide("s", "q?", {"a": "A", "b": "B"}, **kwargs)


async def async_call(script: Script, policy: RetryPolicy, **kwargs: Any) -> Any:
    async with AsyncClient(
        "http://semif.test", "t" * 32, retry=policy, transport=httpx.MockTransport(script)
    ) as client:
        return await client.decide("s", "q?", {"a": "A", "b": "B"}, **kwargs)


async def both(
    script_factory: Callable[[], Script], policy: RetryPolicy, **kwargs: Any
) -> list[tuple[Script, Any]]:
    """Run the same script through the sync and the async client; (script, result or raised error) each."""
    out = []
    for runner in ("sync", "async"):
        script = script_factory()
        try:
            result = (
                sync_call(script, policy, **kwargs)
                if runner == "sync"
                else await async_call(script, policy, **kwargs)
            )
        except Exception as error:  # noqa: BLE001 - the test inspects it
            result = error
        out.append((script, result))
    return out


# -- what is retried ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "bad_request"),
        (401, "unauthorized"),
        (404, "not_found"),
        (405, "method_not_allowed"),
        (413, "request_too_large"),
        (422, "invalid_request"),
        (431, "headers_too_large"),
        (500, "scoring_failed"),
        (429, "quota_exceeded"),  # a 429 that is not the server's full queue
    ],
)
async def test_a_refusal_other_than_busy_503_or_408_is_raised_after_one_request(
    status, code
) -> None:
    for script, raised in await both(
        lambda: Script(envelope(status, code), httpx.Response(200, json=OK)),
        fast(),
        request_id="call-1",
    ):
        assert isinstance(raised, ApiError) and len(script.requests) == 1
        assert (raised.status, raised.code, raised.request_id, raised.attempts) == (
            status,
            code,
            "call-1",
            1,
        )
        assert raised.message == f"{code} said the server"


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (429, "busy"),
        (503, "out_of_memory"),
        (503, "shutting_down"),
        (503, "too_many_connections"),
        (408, "request_timeout"),
    ],
)
async def test_busy_503_and_408_are_retried_with_one_request_id_per_call(status, code) -> None:
    for script, result in await both(
        lambda: Script(
            envelope(status, code), envelope(status, code), httpx.Response(200, json=OK)
        ),
        fast(),
    ):
        assert result.to_json() == OK and len(script.requests) == 3
        assert len(set(script.ids)) == 1 and len(script.ids[0]) == 32
    first, second = await both(lambda: Script(httpx.Response(200, json=OK)), fast())
    assert first[0].ids != second[0].ids  # a new logical call gets a new id


async def test_a_503_without_an_envelope_is_retried_and_other_bodies_are_still_typed() -> None:
    for script, result in await both(
        lambda: Script(
            httpx.Response(503, text="<html>proxy</html>"), httpx.Response(200, json=OK)
        ),
        fast(),
    ):
        assert result.to_json() == OK and len(script.requests) == 2
    for _script, raised in await both(
        lambda: Script(httpx.Response(502, text="bad gateway")), fast()
    ):
        assert isinstance(raised, ApiError) and (raised.status, raised.code) == (502, "http_502")


async def test_a_connection_failure_before_any_response_is_retried() -> None:
    for script, result in await both(
        lambda: Script(
            httpx.ConnectError("refused"),
            httpx.RemoteProtocolError("Server disconnected"),
            httpx.Response(200, json=OK),
        ),
        fast(),
    ):
        assert result.to_json() == OK and len(script.requests) == 3 and len(set(script.ids)) == 1


def refused() -> httpx.ConnectError:
    """What httpx raises when nothing listens: a ConnectError caused by ConnectionRefusedError."""
    error = httpx.ConnectError("[Errno 111] Connection refused")
    error.__cause__ = ConnectionRefusedError(111, "Connection refused")
    return error


async def test_a_refusal_at_the_first_attempt_is_raised_but_a_later_one_is_a_transient() -> None:
    for script, raised in await both(
        lambda: Script(refused(), httpx.Response(200, json=OK)), fast()
    ):
        assert isinstance(raised, TransportError) and len(script.requests) == 1
        assert raised.message == "cannot connect to http://semif.test: is the server running?"
    for script, result in await both(
        lambda: Script(envelope(503, "shutting_down"), refused(), httpx.Response(200, json=OK)),
        fast(),
    ):
        assert result.to_json() == OK and len(script.requests) == 3
    for script, result in await both(
        lambda: Script(refused(), httpx.Response(200, json=OK)), fast(wait_for_server=True)
    ):
        assert result.to_json() == OK and len(script.requests) == 2


async def test_an_answer_without_the_contracts_shape_is_a_bad_response() -> None:
    for _script, raised in await both(
        lambda: Script(httpx.Response(200, json={"unexpected": 1})), fast()
    ):
        assert (
            isinstance(raised, TransportError)
            and raised.code == "bad_response"
            and raised.status == 200
        )
    for script, raised in await both(lambda: Script(httpx.Response(200, text="not json")), fast()):
        assert (
            isinstance(raised, TransportError)
            and raised.code == "bad_response"
            and len(script.requests) == 1
        )


# -- Retry-After ------------------------------------------------------------------------------------


async def test_retry_after_in_seconds_is_waited_before_the_next_attempt() -> None:
    policy = fast(rng=lambda: 0.0)  # no jitter: the pause is exactly the server's number
    for script, result in await both(
        lambda: Script(
            envelope(503, "out_of_memory", {"retry-after": "1"}), httpx.Response(200, json=OK)
        ),
        policy,
    ):
        assert result.to_json() == OK
        assert script.times[1] - script.times[0] >= 1.0


async def test_retry_after_past_the_deadline_fails_at_once_without_waiting() -> None:
    policy = fast(deadline=2.0)
    began = time.monotonic()
    for script, raised in await both(
        lambda: Script(envelope(429, "busy", {"retry-after": "30"})), policy
    ):
        assert isinstance(raised, DeadlineExceeded) and len(script.requests) == 1
        assert raised.status == 429 and raised.last is not None and raised.last.code == "busy"
        assert "asked for 30 s" in raised.message
    assert time.monotonic() - began < 1.0


def test_retry_after_values() -> None:
    now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
    date = email.utils.format_datetime(now + timedelta(seconds=7), usegmt=True)
    past = email.utils.format_datetime(now - timedelta(seconds=7), usegmt=True)
    assert parse_retry_after("3") == 3.0 and parse_retry_after(" 12 ") == 12.0
    assert (
        parse_retry_after(date, lambda: now) == 7.0 and parse_retry_after(past, lambda: now) == 0.0
    )
    for bad in (None, "", "-1", "1.5", "soon", "٣", "Mon, 99 Foo 2026 00:00:00"):
        assert parse_retry_after(bad, lambda: now) is None


# -- the backoff and the deadline, on a fake clock ------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def busy(attempts: Any) -> float:
    return attempts.answered(
        429, {}, json.dumps({"error": {"code": "busy", "message": "full"}}).encode()
    ).pause


def test_pauses_are_full_jitter_within_a_doubling_window_up_to_the_cap() -> None:
    clock = FakeClock()
    draws = iter([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0])
    policy = RetryPolicy(deadline=1000.0, base=0.1, cap=1.0, clock=clock, rng=lambda: next(draws))
    attempts = policy.begin()
    pauses = []
    for _ in range(8):
        attempts.start()
        pauses.append(busy(attempts))
    assert pauses == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 0.5, 0.0])


def test_the_pauses_vary_between_calls() -> None:
    policy = RetryPolicy(deadline=1000.0, base=0.1, cap=1.0, clock=FakeClock())
    pauses = set()
    for _ in range(20):
        attempts = policy.begin()
        attempts.start()
        pauses.add(busy(attempts))
    assert len(pauses) > 10 and all(0.0 <= p <= 0.1 for p in pauses)


def test_no_pause_ends_past_the_deadline_and_no_attempt_starts_after_it() -> None:
    clock = FakeClock()
    policy = RetryPolicy(deadline=3.0, base=0.5, cap=2.0, clock=clock, rng=lambda: 1.0)
    attempts = policy.begin(request_id="r")
    spent = []
    with pytest.raises(DeadlineExceeded) as raised:
        while True:
            attempts.start()
            clock.now += 0.1  # the attempt itself
            pause = busy(attempts)
            spent.append(pause)
            clock.now += pause
    assert clock.now - 100.0 < 3.0
    assert spent == [0.5, 1.0] and raised.value.attempts == 3 and raised.value.request_id == "r"
    clock.now = 200.0
    with pytest.raises(DeadlineExceeded):
        attempts.start()


def test_a_policy_refuses_a_deadline_that_is_not_positive() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(deadline=0)
    with pytest.raises(ValueError):
        RetryPolicy().begin(deadline=-1.0)


# -- health is a probe: one attempt ------------------------------------------------------------------

HEALTH = {
    "status": "draining",
    "semif_commit": "c",
    "model": "m",
    "vram_cap_gib": None,
    "max_tokens": 4096,
    "max_decisions": 64,
    "workloads": [],
    "revision": None,
}


async def test_health_reads_a_draining_503_as_its_answer_and_never_retries() -> None:
    for flavour in ("sync", "async"):
        script = Script(
            httpx.Response(503, json=HEALTH), httpx.Response(200, json={**HEALTH, "status": "ok"})
        )
        refused = Script(envelope(503, "too_many_connections"), httpx.Response(200, json=HEALTH))
        if flavour == "sync":
            with Client("http://semif.test", transport=httpx.MockTransport(script)) as client:
                health = client.health()
            with Client("http://semif.test", transport=httpx.MockTransport(refused)) as client:
                with pytest.raises(ApiError) as raised:
                    client.health()
        else:
            async with AsyncClient(
                "http://semif.test", transport=httpx.MockTransport(script)
            ) as client:
                health = await client.health()
            async with AsyncClient(
                "http://semif.test", transport=httpx.MockTransport(refused)
            ) as client:
                with pytest.raises(ApiError) as raised:
                    await client.health()
        assert (
            health.status == "draining"
            and health.vram_cap_gib is None
            and health.to_json() == HEALTH
        )
        assert len(script.requests) == 1 and len(refused.requests) == 1
        assert (raised.value.status, raised.value.code) == (503, "too_many_connections")
