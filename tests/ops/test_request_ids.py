"""X-Request-Id and Retry-After on a real socket, on successes, refusals and the canned 503."""

from __future__ import annotations

import asyncio
import threading

import pytest

from semif_serve.engine.dispatcher import Call, Turns
from semif_serve.engine.recent import RecentCalls
from semif_serve.engine.scorer import OutOfMemory
from semif_serve.engine.worker import AUDIT, BACKGROUND, CallTiming
from semif_serve.http.exchange import MAX_RETRY_AFTER
from semif_serve.ops.retry_after import RetryAfter
from tests.request_bodies import ROW
from tests.wire_client import (
    AUTH,
    GENERATED,
    HEALTH,
    Connection,
    eventually,
    parse_responses,
    raw_exchange,
    raw_request,
    request,
)


async def test_a_valid_id_round_trips_on_success_and_on_errors(start_server, fake) -> None:
    server = await start_server(fake)
    caller_id = (
        b"req-" + bytes(range(0x21, 0x7F)).replace(b",", b"")[:100]
    )  # visible ASCII, punctuation included
    for method, path, body, headers, status in [
        ("POST", "/decide", ROW, [AUTH], 200),
        ("GET", "/health", None, [], 200),
        ("POST", "/decide", ROW, [], 401),
        ("POST", "/decide", {**ROW, "id": ""}, [AUTH], 422),
        ("GET", "/nowhere", None, [], 404),
    ]:
        response = await request(
            server.port, method, path, body, headers=[*headers, (b"x-request-id", caller_id)]
        )
        assert response.status == status and response.headers[b"x-request-id"] == caller_id, path


@pytest.mark.parametrize(
    "bad",
    [b"x" * 129, b"has space", b"caf\xc3\xa9", b"tab\there"],
    ids=["129 chars", "space", "non-ASCII", "tab"],
)
async def test_a_bad_id_is_replaced_not_repaired(start_server, fake, bad) -> None:
    server = await start_server(fake)
    response = await request(
        server.port, "POST", "/decide", ROW, headers=[AUTH, (b"x-request-id", bad)]
    )
    assert response.status == 200 and GENERATED.fullmatch(response.headers[b"x-request-id"])


async def test_an_empty_id_is_replaced_and_128_characters_are_kept(start_server, fake) -> None:
    server = await start_server(fake)
    empty = await raw_exchange(
        server.port,
        raw_request(b"GET", b"/health", b"x-request-id: \r\nconnection: close\r\n", auth=False),
    )
    (response,) = parse_responses(empty)
    assert GENERATED.fullmatch(response.headers[b"x-request-id"])
    longest = b"k" * 128
    assert (
        await request(server.port, "GET", "/health", headers=[(b"x-request-id", longest)])
    ).headers[b"x-request-id"] == longest


async def test_without_an_id_each_response_gets_its_own(start_server, fake) -> None:
    server = await start_server(fake)
    connection = await Connection.open(server.port)
    ids = {
        (await connection.request("GET", "/health", headers=[])).headers[b"x-request-id"]
        for _ in range(3)
    }
    await connection.close()
    assert len(ids) == 3 and all(GENERATED.fullmatch(i) for i in ids)


async def test_a_protocol_error_gets_an_id_and_no_retry_after(start_server, fake) -> None:
    server = await start_server(fake)
    (response,) = parse_responses(
        await raw_exchange(server.port, b"GET /health HTTP/1.1\r\nhost x\r\n\r\n")
    )
    assert response.status == 400 and GENERATED.fullmatch(response.headers[b"x-request-id"])
    assert b"retry-after" not in response.headers


async def test_busy_429_carries_the_id_and_retry_after(start_server, fake) -> None:
    server = await start_server(fake, max_queue=1)
    fake.gate = threading.Event()
    busy = await Connection.open(server.port)
    busy.send_request(
        "POST",
        "/decide",
        b'{"id": "r", "state": "s", "question": "q", "options": '
        b'[{"id": "a", "description": "A"}, {"id": "b", "description": "B"}]}',
        [AUTH],
    )
    await fake.wait_entered()
    try:
        refused = await request(
            server.port, "POST", "/decide", ROW, headers=[AUTH, (b"x-request-id", b"mine-429")]
        )
    finally:
        fake.gate.set()
    assert refused.status == 429 and refused.code == "busy"
    assert refused.headers[b"x-request-id"] == b"mine-429"
    assert 1 <= int(refused.headers[b"retry-after"]) <= MAX_RETRY_AFTER
    assert (await busy.read_response()).status == 200
    await busy.close()


async def test_every_503_carries_retry_after(start_server, fake) -> None:
    server = await start_server(fake)
    fake.raise_ = OutOfMemory("CUDA out of memory")
    oom = await request(
        server.port, "POST", "/decide", ROW, headers=[AUTH, (b"x-request-id", b"oom-1")]
    )
    assert oom.status == 503 and oom.code == "out_of_memory"
    assert oom.headers[b"x-request-id"] == b"oom-1" and int(oom.headers[b"retry-after"]) >= 1
    ok = await request(server.port, "GET", "/health", headers=[])
    assert ok.status == 200 and b"retry-after" not in ok.headers


async def test_the_canned_503_over_the_connection_cap_carries_an_id_and_retry_after(
    start_server, fake
) -> None:
    server = await start_server(fake, max_connections=1)
    held = await Connection.open(server.port)
    assert (await held.request("GET", "/health", headers=[])).status == 200
    (refused,) = parse_responses(await raw_exchange(server.port, HEALTH))
    assert refused.status == 503 and refused.code == "too_many_connections"
    assert (
        GENERATED.fullmatch(refused.headers[b"x-request-id"])
        and int(refused.headers[b"retry-after"]) >= 1
    )
    await held.close()


async def test_draining_503_carries_retry_after(start_server, fake) -> None:
    server = await start_server(fake, shutdown_grace=5.0)
    probe = await Connection.open(server.port)
    probe.writer.write(HEALTH[:10])  # a head in progress keeps its connection through the drain
    await eventually(
        lambda: any(not c.closable for c in server.connections.values())
    )  # the server holds those bytes
    stopping = asyncio.ensure_future(server.shutdown())
    await asyncio.sleep(0)
    probe.writer.write(HEALTH[10:])
    response = await probe.read_response()
    assert response.status == 503 and response.json["status"] == "draining"
    assert int(response.headers[b"retry-after"]) >= 1 and GENERATED.fullmatch(
        response.headers[b"x-request-id"]
    )
    await asyncio.wait_for(stopping, 5)


# -- the busy estimate, without a server -------------------------------------------------


def test_busy_estimate_prices_the_rows_before_the_callers_next_call() -> None:
    """A count refusal's Retry-After is the refused caller's wait had it been admitted: the running call,
    its own queued calls, and at most as many of each other caller's as it waits turns for."""
    recent = RecentCalls(window=4)
    turns = Turns()
    estimate = RetryAfter(recent, turns.ahead)
    turns.put(Call("bulk", "direct", 1))
    assert turns.take() is not None  # bulk's first call runs
    for _ in range(5):
        turns.put(Call("bulk", "direct", 1))
    assert estimate.busy("bulk") == 1  # nothing scored yet: the floor
    for seconds in (0.5, 1.5, 1.0, 1.0):
        recent.observe("direct", 1, seconds)  # 1 s a row
    assert estimate.busy("bulk") == 6  # its own five behind the running one
    assert estimate.busy("interactive") == 2  # the running one, then one of bulk's before its turn
    turns.put(Call("interactive", "shared", 4))
    assert (
        estimate.busy("interactive") == 3
    )  # its queued call is priced at nothing: shared unmeasured
    recent.observe("shared", 4, 8.0)  # 2 s a row
    assert estimate.busy("interactive") == 1 + 8 + 2  # running, its own, then two of bulk's
    assert estimate.busy("bulk") == 1 + 5 + 8
    for _ in range(60):
        turns.put(Call("bulk", "direct", 1))
    assert estimate.busy("bulk") == MAX_RETRY_AFTER
    assert RetryAfter.unavailable() == 1


def test_an_audit_call_has_its_own_window_and_a_running_one_is_priced_as_a_shared_call() -> None:
    """Audits (extension) are timed apart, as kind "audit"; while one runs it is background work
    priced at the shared rate, so a caller's Retry-After errs high, never low."""
    recent = RecentCalls()
    turns = Turns()
    estimate = RetryAfter(recent, turns.ahead)
    recent.scorer_call(CallTiming("shared", 4, 0.0, 0.0, 4.0))  # 1 s a row
    recent.scorer_call(CallTiming(AUDIT, 3, 0.0, 0.0, 30.0))  # 10 s a row, its own window
    assert recent.per_row(AUDIT) == 10.0 and recent.per_row("shared") == 1.0
    assert estimate.busy("-") == 1  # nothing running: the floor
    turns.put(Call(BACKGROUND, "shared", 3, background=True))
    assert turns.take() is not None  # the audit runs
    assert estimate.busy("-") == 3  # its 3 rows at the shared rate


def test_the_busy_estimate_reads_only_requests_successful_calls() -> None:
    """One window serves Retry-After and the wait budget: a refused, failed or unfinished call, and
    the engine's load, teach neither."""
    recent = RecentCalls()
    turns = Turns()
    estimate = RetryAfter(recent, turns.ahead)
    turns.put(Call("-", "direct", 2))
    turns.put(Call("-", "shared", 8))
    for outcome, kind in (("refused", "direct"), ("failed", "shared"), ("ok", "load")):
        recent.scorer_call(CallTiming(kind, 1, 0.0, 0.0, 9.0, outcome))
    recent.scorer_call(CallTiming("direct", 1, 0.0, 0.0, None))  # never ended
    assert estimate.busy("-") == 1 and recent.per_call("direct") is None
    recent.scorer_call(CallTiming("shared", 8, 0.0, 0.0, 2.5))  # 0.3125 s a row
    recent.scorer_call(CallTiming("direct", 1, 0.0, 1.0, 1.5))  # 0.5 s a row
    assert estimate.busy("-") == 4  # 2 x 0.5 + 8 x 0.3125 = 3.5 s
