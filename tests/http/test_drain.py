"""What a load balancer sees when an instance drains (docs/operating.md, "Shutdown: the drain"), with a client that
behaves like one: it probes `/health` over one kept-alive connection, and opens a new one only
when that one is gone.

At SIGTERM the listener closes and every idle keep-alive connection is closed at once, without a
response: the balancer's kept connection reads EOF, and its next connection is refused. Only
requests already under way are answered: an in-flight POST its 200 (with `Connection: close`),
a request whose head had begun its 503 (tests/http/test_shutdown.py). First in process against the
shutdown path, then the real process on a real SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import threading

import pytest

from tests.request_bodies import POST, ROW
from tests.served_process import Process
from tests.wire_client import Connection, no_error_logs, request  # noqa: F401 - fixture

pytestmark = pytest.mark.usefixtures("no_error_logs")


async def kept_alive(port: int) -> Connection:
    """A balancer's connection: two probes on it, both 200, and it stays open."""
    balancer = await Connection.open(port)
    for _ in range(2):
        probe = await balancer.request("GET", "/health", headers=[])
        assert probe.status == 200 and b"connection" not in probe.headers
    return balancer


async def closed_without_a_response(balancer: Connection) -> None:
    """The server closed the kept connection and sent nothing on it: no 503 `draining` here."""
    assert await asyncio.wait_for(balancer.reader.read(), 5) == b""


async def test_the_balancers_kept_connection_is_closed_and_its_next_one_refused(
    start_server, fake
) -> None:
    server = await start_server(fake, shutdown_grace=5.0)
    fake.gate = threading.Event()
    busy = await Connection.open(server.port)
    busy.writer.write(POST)
    await fake.wait_entered()  # in flight: the drain must wait for it
    balancer = await kept_alive(server.port)
    stopping = asyncio.ensure_future(server.shutdown())
    await closed_without_a_response(balancer)
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", server.port)
    assert not stopping.done()
    fake.gate.set()
    response = await busy.read_response()
    assert response.status == 200 and response.headers[b"connection"] == b"close"
    await asyncio.wait_for(stopping, 5)


async def test_on_sigterm_the_process_does_what_the_readme_says_a_balancer_sees() -> None:
    process = await Process.start(SEMIF_STUB_DELAY_MS="3000")
    in_flight = asyncio.ensure_future(request(process.port, "POST", "/decide", ROW))
    await asyncio.wait_for(process.in_flight(), 5)
    balancer = await kept_alive(process.port)
    process.proc.send_signal(signal.SIGTERM)
    await closed_without_a_response(balancer)  # the listener closed first, in the same step
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", process.port)
    assert not in_flight.done()
    response = await asyncio.wait_for(in_flight, 5)
    assert response.status == 200 and response.json["id"] == ROW["id"]
    assert await process.exit_code(5) == 0
