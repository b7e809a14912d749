"""The client against a live stub server on a real loopback socket, and against raw servers that misbehave.

The server is the real one (wire, admission, service) over the stub scorer, on this
test's event loop; the sync client runs in a worker thread so the loop keeps serving.
Counts come from the server's side (its service and scorer), never from the client.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from semif_serve.client import (
    ApiError,
    AsyncClient,
    Averaged,
    Client,
    DeadlineExceeded,
    Health,
    MissingToken,
    Question,
    Result,
    RetryPolicy,
    SemifError,
    Shared,
    TransportError,
)
from semif_serve.decisions import calibration_file
from semif_serve.engine.stub import StubScorer
from semif_serve.errors import ApiError as ServerApiError
from tests.fakes import settings as server_settings
from tests.request_bodies import ROW, SHARED
from tests.timing import timeless
from tests.wire_client import TOKEN, eventually, request


def url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


async def stub(
    start_server: Callable[..., Awaitable[Any]], delay_ms: int = 0, **overrides: Any
) -> Any:
    """A live server over the stub scorer; `delay_ms` per scorer call."""
    return await start_server(StubScorer(server_settings(stub_delay_ms=delay_ms)), **overrides)


def counted(server: Any) -> dict[str, int]:
    """Count what reached the server: POST bodies handled (`posts`) and admission refusals (`busy`)."""
    counts = {"posts": 0, "busy": 0}
    post, enter = server.service.post, server.service.admission.enter

    async def counting_post(name: str, body: bytes, caller: str) -> Any:
        counts["posts"] += 1
        return await post(name, body, caller)

    def counting_enter(caller: str) -> None:
        try:
            enter(caller)
        except ServerApiError:
            counts["busy"] += 1
            raise

    server.service.post = counting_post
    server.service.admission.enter = counting_enter
    return counts


# -- shapes -------------------------------------------------------------------------------------


async def test_every_shape_round_trips_unchanged_through_the_typed_results(start_server) -> None:
    server = await stub(start_server, calibration={"triage": 1.5})
    options = [(o["id"], o["description"]) for o in ROW["options"]]
    decisions = [
        Question(d["id"], d["question"], {o["id"]: o["description"] for o in d["options"]})
        for d in SHARED["decisions"]
    ]
    decisions[1] = Question(
        decisions[1].id, decisions[1].question, decisions[1].options, orderings="rotations"
    )
    wire_shared = {
        **SHARED,
        "decisions": [SHARED["decisions"][0], {**SHARED["decisions"][1], "orderings": "rotations"}],
    }
    async with AsyncClient(url(server.port), TOKEN) as client:
        plain = await client.decide(ROW["state"], ROW["question"], options, id=ROW["id"])
        calibrated = await client.decide(
            ROW["state"], ROW["question"], options, id=ROW["id"], workload="triage"
        )
        averaged = await client.decide(
            ROW["state"], ROW["question"], options, id=ROW["id"], orderings="all"
        )
        shared = await client.decide_shared(SHARED["state"], decisions)
        health = await client.health()
    wire = [
        (await request(server.port, "POST", "/decide", body)).json
        for body in (ROW, {**ROW, "workload": "triage"}, {**ROW, "orderings": "all"})
    ]
    wire.append((await request(server.port, "POST", "/decide/shared", wire_shared)).json)

    assert (
        isinstance(plain, Result) and plain.calibrated is None and plain.option_ids == ["yes", "no"]
    )
    assert isinstance(calibrated, Result) and calibrated.calibrated is not None
    assert calibrated.calibrated.probabilities == wire[1]["calibrated"]["probabilities"]
    assert isinstance(averaged, Averaged) and averaged.combined.orderings == 2
    assert averaged.combined.probabilities == wire[2]["combined"]["probabilities"]
    assert all(isinstance(r, Result) for r in averaged.orderings)
    assert isinstance(shared, Shared) and [type(r) for r in shared.results] == [Result, Averaged]
    assert shared.timing.batch_size == wire[3]["timing"]["batch_size"] == 4
    for typed, raw in zip((plain, calibrated, averaged, shared), wire):
        assert timeless(typed.to_json()) == timeless(raw)
    assert isinstance(health, Health) and health.status == "ok" and health.max_queue == 32
    assert health.to_json() == {
        **(await request(server.port, "GET", "/health", headers=[])).json,
        "in_progress": 0,
    }


async def test_a_calibrated_averaged_view_is_typed_and_unchanged(start_server) -> None:
    table = calibration_file.Table({"triage": {"none": 1.5, "rotations": 2.0}})
    server = await stub(start_server, calibration=table)
    options = [(o["id"], o["description"]) for o in ROW["options"]]
    async with AsyncClient(url(server.port), TOKEN) as client:
        averaged = await client.decide(
            ROW["state"],
            ROW["question"],
            options,
            id=ROW["id"],
            orderings="rotations",
            workload="triage",
        )
    wire = (
        await request(
            server.port, "POST", "/decide", {**ROW, "orderings": "rotations", "workload": "triage"}
        )
    ).json
    assert isinstance(averaged, Averaged) and averaged.combined.calibrated is not None
    view = averaged.combined.calibrated
    assert (view.workload, view.method, view.temperature) == ("triage", "rotations", 2.0)
    assert view.probabilities == wire["combined"]["calibrated"]["probabilities"]
    assert timeless(averaged.to_json()) == timeless(wire)


async def test_the_sync_client_returns_the_same_answers(start_server) -> None:
    server = await stub(start_server)

    def ask() -> tuple[Any, Any]:
        with Client(url(server.port), TOKEN) as client:
            return (
                client.decide(ROW["state"], ROW["question"], ROW["options"], id=ROW["id"]),
                client.decide_shared(
                    SHARED["state"],
                    [Question(d["id"], d["question"], d["options"]) for d in SHARED["decisions"]],
                ),
            )

    plain, shared = await asyncio.to_thread(ask)
    assert timeless(plain.to_json()) == timeless(
        (await request(server.port, "POST", "/decide", ROW)).json
    )
    assert timeless(shared.to_json()) == timeless(
        (await request(server.port, "POST", "/decide/shared", SHARED)).json
    )


# -- retries against a full queue ------------------------------------------------------------------


async def test_concurrent_calls_on_a_queue_of_one_all_succeed_through_retries(start_server) -> None:
    server = await stub(start_server, delay_ms=200, max_queue=1)
    counts = counted(server)

    def sync_call(index: int) -> Any:
        with Client(url(server.port), TOKEN, deadline=20.0) as client:
            return client.decide("s", "q?", {"a": "A", "b": "B"}, id=f"sync{index}")

    async with AsyncClient(url(server.port), TOKEN, deadline=20.0) as client:
        answers = await asyncio.gather(
            *(client.decide("s", "q?", {"a": "A", "b": "B"}, id=f"async{i}") for i in range(4)),
            *(asyncio.to_thread(sync_call, i) for i in range(2)),
        )
    assert sorted(a.id for a in answers) == sorted(
        [f"async{i}" for i in range(4)] + ["sync0", "sync1"]
    )
    assert counts["posts"] == 6  # each call scored once
    assert counts["busy"] >= 1  # and some were refused 429 busy first, then retried


@pytest.mark.parametrize("flavour", ["async", "sync"])
async def test_a_deadline_shorter_than_the_queue_fails_cleanly_in_time(
    start_server, flavour
) -> None:
    server = await stub(start_server, delay_ms=1000, max_queue=1)
    counts = counted(server)
    async with AsyncClient(url(server.port), TOKEN) as holder:
        holding = asyncio.create_task(holder.decide("s", "q?", {"a": "A", "b": "B"}))
        await eventually(lambda: server.service.admission.in_progress == 1)

        def sync_call() -> Any:
            with Client(url(server.port), TOKEN) as client:
                return client.decide(
                    "s", "q?", {"a": "A", "b": "B"}, deadline=0.4, request_id="late-1"
                )

        began = time.monotonic()
        with pytest.raises(DeadlineExceeded) as raised:
            if flavour == "sync":
                await asyncio.to_thread(sync_call)
            else:
                async with AsyncClient(url(server.port), TOKEN) as client:
                    await client.decide(
                        "s", "q?", {"a": "A", "b": "B"}, deadline=0.4, request_id="late-1"
                    )
        elapsed = time.monotonic() - began
        assert (await holding).id == "decision"
    error = raised.value
    assert elapsed < 0.4 + 0.5
    assert (
        error.code == "deadline_exceeded" and error.status == 429 and error.request_id == "late-1"
    )
    assert (
        isinstance(error.last, ApiError)
        and error.last.code == "busy"
        and "in progress" in error.last.message
    )
    assert error.attempts >= 1 and counts["busy"] == error.attempts and counts["posts"] == 1


# -- refusals are not retried ------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", ["async", "sync"])
async def test_a_422_is_raised_at_once_and_never_sent_twice(start_server, flavour) -> None:
    server = await stub(start_server)
    counts = counted(server)

    async def call() -> None:
        if flavour == "sync":

            def blocking() -> None:
                with Client(url(server.port), TOKEN) as client:
                    client.decide(
                        "s", "q?", {"a": "A", "b": "B"}, workload="nope", request_id="r-422"
                    )

            await asyncio.to_thread(blocking)
        else:
            async with AsyncClient(url(server.port), TOKEN) as client:
                await client.decide(
                    "s", "q?", {"a": "A", "b": "B"}, workload="nope", request_id="r-422"
                )

    with pytest.raises(ApiError) as raised:
        await call()
    assert (raised.value.status, raised.value.code, raised.value.request_id) == (
        422,
        "invalid_request",
        "r-422",
    )
    assert "nope" in raised.value.message and raised.value.attempts == 1
    assert counts["posts"] == 1


async def test_a_wrong_token_is_a_401_raised_once(start_server) -> None:
    server = await stub(start_server)
    async with AsyncClient(url(server.port), "w" * 40) as client:
        with pytest.raises(ApiError) as raised:
            await client.decide("s", "q?", {"a": "A", "b": "B"})
    assert (raised.value.status, raised.value.code, raised.value.attempts) == (
        401,
        "unauthorized",
        1,
    )


# -- servers that misbehave: tiny raw asyncio servers ----------------------------------------------


class RawServer:
    """Accepts connections and answers each with `reply(index)` bytes after reading one request head.

    `reply` returns the bytes to send before closing (b"" closes without a response). Every
    request head is kept, so a test can read the X-Request-Id each attempt carried.
    """

    def __init__(self, reply: Callable[[int], bytes]) -> None:
        self.reply = reply
        self.heads: list[bytes] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.lower().split(b"\r\n")
                    if line.startswith(b"content-length:")
                ),
                0,
            )
            await asyncio.wait_for(reader.readexactly(length), 5)
            self.heads.append(head)
            writer.write(self.reply(len(self.heads) - 1))
            await writer.drain()
        finally:
            writer.close()

    def request_ids(self) -> list[bytes]:
        return [
            line.split(b":", 1)[1].strip()
            for head in self.heads
            for line in head.lower().split(b"\r\n")
            if line.startswith(b"x-request-id:")
        ]


def response(body: bytes, status: bytes = b"200 OK", declared: int | None = None) -> bytes:
    length = len(body) if declared is None else declared
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\ncontent-type: application/json\r\ncontent-length: "
        + str(length).encode()
        + b"\r\nconnection: close\r\n\r\n"
        + body
    )


STUB_RESULT = json.dumps(StubScorer(server_settings()).score(ROW)).encode()


@pytest.mark.parametrize("flavour", ["async", "sync"])
async def test_a_connection_closed_before_any_response_is_retried_with_the_same_request_id(
    flavour,
) -> None:
    async with RawServer(lambda index: b"" if index == 0 else response(STUB_RESULT)) as raw:
        if flavour == "sync":

            def blocking() -> Any:
                with Client(url(raw.port), TOKEN, deadline=5.0) as client:
                    return client.decide(
                        ROW["state"], ROW["question"], ROW["options"], id=ROW["id"]
                    )

            result = await asyncio.to_thread(blocking)
        else:
            async with AsyncClient(url(raw.port), TOKEN, deadline=5.0) as client:
                result = await client.decide(
                    ROW["state"], ROW["question"], ROW["options"], id=ROW["id"]
                )
    assert result.to_json() == json.loads(STUB_RESULT)
    ids = raw.request_ids()
    assert len(raw.heads) == 2 and len(ids) == 2 and ids[0] == ids[1] and len(ids[0]) == 32


@pytest.mark.parametrize("flavour", ["async", "sync"])
async def test_a_server_that_closes_mid_response_raises_a_clear_error_and_is_not_retried(
    flavour,
) -> None:
    half = response(STUB_RESULT[:40], declared=len(STUB_RESULT))
    async with RawServer(lambda index: half) as raw:
        with pytest.raises(TransportError) as raised:
            if flavour == "sync":

                def blocking() -> Any:
                    with Client(url(raw.port), TOKEN, deadline=5.0) as client:
                        return client.decide("s", "q?", {"a": "A", "b": "B"}, request_id="half-1")

                await asyncio.to_thread(blocking)
            else:
                async with AsyncClient(url(raw.port), TOKEN, deadline=5.0) as client:
                    await client.decide("s", "q?", {"a": "A", "b": "B"}, request_id="half-1")
    error = raised.value
    assert (error.code, error.status, error.request_id, error.attempts) == (
        "incomplete_response",
        200,
        "half-1",
        1,
    )
    assert "mid-response" in error.message and len(raw.heads) == 1


async def closed_port() -> int:
    """A loopback port that was just listening and is closed now: a connection there is refused."""
    async with RawServer(lambda index: b"") as raw:
        return raw.port


async def call_both(port: int, policy: RetryPolicy) -> list[SemifError]:
    """decide through the async then the sync client at `port`; what each raised."""
    raised: list[SemifError] = []
    async with AsyncClient(url(port), TOKEN, retry=policy) as client:
        with pytest.raises(SemifError) as error:
            await client.decide("s", "q?", {"a": "A", "b": "B"})
        raised.append(error.value)

    def blocking() -> None:
        with Client(url(port), TOKEN, retry=policy) as client:
            client.decide("s", "q?", {"a": "A", "b": "B"})

    with pytest.raises(SemifError) as error:
        await asyncio.to_thread(blocking)
    raised.append(error.value)
    return raised


async def test_a_port_with_no_server_says_so_at_the_first_attempt_without_waiting() -> None:
    port = await closed_port()
    began = time.monotonic()
    raised = await call_both(port, RetryPolicy(deadline=30.0))
    assert time.monotonic() - began < 10.0  # two refused connects; retrying would take 2 x 30 s
    for error in raised:
        assert type(error) is TransportError
        assert (error.code, error.status, error.attempts) == ("connection_failed", None, 1)
        assert error.message == f"cannot connect to {url(port)}: is the server running?"


async def test_waiting_for_a_server_retries_a_refused_port_until_the_deadline() -> None:
    port = await closed_port()
    began = time.monotonic()
    raised = await call_both(port, RetryPolicy(deadline=0.5, wait_for_server=True))
    assert time.monotonic() - began < 2 * 0.5 + 1.0
    for error in raised:
        assert isinstance(error, DeadlineExceeded) and error.status is None and error.attempts >= 2
        assert error.last is not None and error.last.code == "connection_failed"
        assert error.last.message == f"cannot connect to {url(port)}: is the server running?"


async def test_without_a_token_a_protected_call_is_refused_unsent_and_health_needs_none(
    start_server, monkeypatch
) -> None:
    monkeypatch.delenv("SEMIF_API_TOKEN", raising=False)
    server = await stub(start_server)
    said = "needs the server's bearer token: pass token= or set SEMIF_API_TOKEN"
    async with RawServer(lambda index: response(STUB_RESULT)) as raw:
        async with AsyncClient(url(raw.port)) as client:
            with pytest.raises(MissingToken) as plain:
                await client.decide(ROW["state"], ROW["question"], ROW["options"])
            with pytest.raises(MissingToken) as shared:
                await client.decide_shared(SHARED["state"], [Question("d", "q?", {"a": "A"})])

        def blocking() -> None:
            with Client(url(raw.port)) as client:
                client.decide(ROW["state"], ROW["question"], ROW["options"])

        with pytest.raises(MissingToken) as sync:
            await asyncio.to_thread(blocking)
        assert raw.heads == []  # nothing was sent
    assert plain.value.message == f"POST /decide {said}"
    assert shared.value.message == f"POST /decide/shared {said}"
    assert (sync.value.code, sync.value.status, sync.value.attempts) == ("no_token", None, 0)
    async with AsyncClient(url(server.port)) as client:
        assert (await client.health()).status == "ok"
    with Client(url(server.port)) as client:
        assert (await asyncio.to_thread(client.health)).status == "ok"


# -- many at once ----------------------------------------------------------------------------------


async def test_fifty_concurrent_async_calls_lose_none(start_server) -> None:
    scorer = StubScorer(server_settings(stub_delay_ms=5))
    scored: list[str] = []
    score = scorer.score

    def counting_score(row: Any) -> Any:
        scored.append(row["id"])
        return score(row)

    scorer.score = counting_score  # type: ignore[method-assign]
    server = await start_server(scorer, max_queue=8)
    counts = counted(server)
    ids = [f"d{i}" for i in range(50)]
    async with AsyncClient(url(server.port), TOKEN, deadline=30.0) as client:
        answers = await asyncio.gather(
            *(client.decide("s", f"q{i}?", {"a": "A", "b": "B"}, id=i) for i in ids)
        )
    assert [a.id for a in answers] == ids
    assert sorted(scored) == sorted(ids) and counts["posts"] == 50
