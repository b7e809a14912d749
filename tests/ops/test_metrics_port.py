"""SEMIF_METRICS_PORT: a listener that answers /metrics alone and stays open through a drain.

The client port closes at SIGTERM (the settled drain design), so without this listener
Prometheus cannot see a replica leave, and `SemifDrainTooLong` could never fire. On real
sockets, in process first (a scripted scorer holds the drain open), then the real process
stopped with SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import threading

import pytest

from bench.common.procs import free_port
from semif_serve.server import MAX_SCRAPERS
from tests.metrics_samples import sample, scrape
from tests.request_bodies import POST, ROW
from tests.served_process import Process
from tests.wire_client import Connection, eventually, no_error_logs, request  # noqa: F401 - fixture

pytestmark = pytest.mark.usefixtures("no_error_logs")


async def refused(port: int) -> None:
    """Until a new connection to `port` is refused."""
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except ConnectionRefusedError:
            return
        writer.close()
        await asyncio.sleep(0.02)


async def test_the_metrics_port_answers_metrics_and_nothing_else(start_server, fake) -> None:
    server = await start_server(fake, metrics_port=0)
    assert server.metrics_port not in (None, 0, server.port)
    assert sample(await scrape(server.metrics_port), "semif_drain_elapsed_seconds") == 0
    head = await request(server.metrics_port, "HEAD", "/metrics", headers=[])
    assert head.status == 200 and head.body == b""
    for method, path, body in (
        ("POST", "/decide", ROW),
        ("GET", "/health", None),
        ("GET", "/v1/models", None),
    ):
        refused = await request(
            server.metrics_port, method, path, body
        )  # with the bearer: still not here
        assert (refused.status, refused.code) == (404, "not_found"), path
    assert fake.calls == []  # nothing on the metrics port reaches the scorer
    assert (
        await request(server.port, "GET", "/health", headers=[])
    ).status == 200  # the client port as before


async def test_without_the_setting_there_is_no_metrics_listener(start_server, fake) -> None:
    server = await start_server(fake)
    assert server.metrics_port is None
    assert (
        sample(await scrape(server.port), "semif_drain_elapsed_seconds") == 0
    )  # /metrics on the client port, as before


async def test_scrapers_never_take_a_callers_connection_slot(start_server, fake) -> None:
    server = await start_server(fake, metrics_port=0, max_connections=1)
    caller = await Connection.open(server.port)
    assert (await caller.request("GET", "/health", headers=[])).status == 200
    scrapers = [await Connection.open(server.metrics_port) for _ in range(3)]
    for scraper in scrapers:
        assert (await scraper.request("GET", "/metrics", headers=[])).status == 200
    assert (
        sample(await scrape(server.metrics_port), "semif_open_connections") == 1
    )  # the caller alone
    assert (await caller.request("GET", "/health", headers=[])).status == 200
    for connection in (caller, *scrapers):
        await connection.close()


async def test_the_metrics_listener_has_a_cap_of_its_own(start_server, fake) -> None:
    server = await start_server(fake, metrics_port=0)
    held = [await Connection.open(server.metrics_port) for _ in range(MAX_SCRAPERS)]
    for connection in held:  # each one served, so each is surely counted
        assert (await connection.request("GET", "/metrics", headers=[])).status == 200
    over = await request(server.metrics_port, "GET", "/metrics", headers=[])
    assert (over.status, over.code) == (503, "too_many_connections")
    assert (
        await request(server.port, "GET", "/health", headers=[])
    ).status == 200  # callers unaffected
    for connection in held:
        await connection.close()


async def test_a_drain_is_watched_through_the_metrics_port_until_it_ends(
    start_server, fake
) -> None:
    server = await start_server(fake, metrics_port=0, shutdown_grace=30.0)
    fake.gate = threading.Event()
    busy = await Connection.open(server.port)
    busy.writer.write(POST)
    await fake.wait_entered()  # a POST inside the scorer holds the drain open
    stopping = asyncio.ensure_future(server.shutdown())
    await eventually(
        lambda: server.drain.active
    )  # shutdown's first step closes the client listener with it
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", server.port)  # the client port closed at once
    first = await scrape(server.metrics_port)
    await eventually(lambda: server.drain.seconds() > sample(first, "semif_drain_elapsed_seconds"))
    second = await scrape(server.metrics_port)
    assert (
        0
        < sample(first, "semif_drain_elapsed_seconds")
        < sample(second, "semif_drain_elapsed_seconds")
    )
    assert sample(second, "semif_shutdown_grace_seconds") == 30.0
    assert sample(second, "semif_requests_in_progress") == 1
    fake.gate.set()
    assert (await busy.read_response()).status == 200  # the drain lets it finish
    await asyncio.wait_for(stopping, 10)
    with pytest.raises(ConnectionRefusedError):  # the drain over, the metrics port closes too
        await asyncio.open_connection("127.0.0.1", server.metrics_port)


async def test_the_real_process_keeps_its_metrics_port_through_a_sigterm_drain() -> None:
    """`python -m semif_serve` with the stub held in a call: SIGTERM closes the client port
    while /metrics still answers on the other, then the process exits 0."""
    metrics_port = free_port()
    process = await Process.start(
        SEMIF_STUB_DELAY_MS="3000",
        SEMIF_SHUTDOWN_GRACE_S="20",
        SEMIF_METRICS="on",
        SEMIF_METRICS_PORT=str(metrics_port),
    )
    assert f"metrics on 127.0.0.1:{metrics_port}" in "".join(process.stderr)
    in_flight = asyncio.ensure_future(request(process.port, "POST", "/decide", ROW))
    await asyncio.wait_for(process.in_flight(), 5)
    process.proc.send_signal(signal.SIGTERM)
    await asyncio.wait_for(process.wait_for_line("shutting down"), 5)
    await asyncio.wait_for(refused(process.port), 5)  # the listener closes just after that line
    scraped = await scrape(metrics_port)
    assert not in_flight.done()  # scraped while the drain still held the call
    assert (
        sample(scraped, "semif_drain_elapsed_seconds") > 0
        and sample(scraped, "semif_shutdown_grace_seconds") == 20
    )
    assert (await asyncio.wait_for(in_flight, 10)).status == 200
    assert await process.exit_code(10) == 0
