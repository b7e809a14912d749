"""Every wait has a deadline, and each deadline counts from the moment wire.py says it does.

The rule (wire.HttpConnection._next_request): the first head, and a pipelined head
already begun, must complete within the header timeout counted from the connection's
start or from the end of the previous response. An idle keep-alive connection waits for
the first byte of its next request under the idle timeout; from that byte the head has
the header timeout. The body has the body timeout from the end of its head. A head cut
off gets a 408 envelope and a close; a connection that never began a request is just closed.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.bodies import BODY, POST, ROW
from tests.wire_client import (
    HEALTH,
    Connection,
    assert_serving,
    connections_closed,
    no_error_logs,  # noqa: F401 - fixture
    raw_request,
)

pytestmark = pytest.mark.usefixtures("no_error_logs")

# Each deadline is longer than the one below it plus SLACK, so a wrong deadline cannot pass
# for the right one inside the window.
HEADER, BODY_T, IDLE = 0.3, 1.0, 2.0
# Windows open at the deadline itself: `since` is always taken at or before the event the
# server's clock starts from (both clocks are this loop's), so nothing can arrive early.
# They close SLACK later, for scheduling on a loaded 2-core machine.
SLACK = 0.6
EARLY = 0.001  # the event loop may run a timer up to its clock resolution early


def now() -> float:
    return asyncio.get_running_loop().time()


async def start(start_server, fake, **overrides):
    return await start_server(
        fake,
        **{"header_timeout": HEADER, "body_timeout": BODY_T, "idle_timeout": IDLE, **overrides},
    )


async def assert_timed_out(connection: Connection, since: float, after: float) -> None:
    """A 408 envelope with Connection: close arrives `after` seconds from `since`, then EOF."""
    response = await connection.read_response(timeout=after + 2)
    elapsed = now() - since
    assert response.status == 408 and response.code == "request_timeout"
    assert response.headers[b"connection"] == b"close" and await connection.closed_by_peer()
    assert after - EARLY <= elapsed <= after + SLACK


async def assert_closed_silently(connection: Connection, since: float, after: float) -> None:
    """EOF with no byte sent, `after` seconds from `since`."""
    data = await asyncio.wait_for(connection.reader.read(), after + 2)
    elapsed = now() - since
    assert data == b""
    assert after - EARLY <= elapsed <= after + SLACK


# -- the first request ------------------------------------------------------------------------


async def test_a_partial_first_head_gets_408_at_the_header_timeout(start_server, fake) -> None:
    server = await start(start_server, fake)
    began = now()
    connection = await Connection.open(server.port)
    connection.writer.write(POST[:20])
    await assert_timed_out(connection, began, HEADER)
    await assert_serving(server.port)


# A trickle test: the client writes a byte every 40 ms until 0.5 s before the deadline
# (DEADLINE). A deadline per read would then fire a whole DEADLINE after the last byte,
# past the window; the trickle stops early so that no byte meets the closed socket, whose
# reset could destroy the 408 before the client reads it.
DEADLINE = 1.5


def dribbling(connection: Connection, data: bytes, until: float) -> asyncio.Future[None]:
    """Write `data` a byte every 40 ms in the background, stopping at loop time `until`."""

    async def dribble() -> None:
        for index in range(len(data)):
            if now() >= until:
                return
            connection.writer.write(data[index : index + 1])
            await asyncio.sleep(0.04)

    return asyncio.ensure_future(dribble())


async def test_a_head_dribbled_byte_by_byte_is_cut_off_at_the_header_timeout(
    start_server, fake
) -> None:
    """The deadline is for the whole head, not per read: a steady trickle does not extend it."""
    server = await start(start_server, fake, header_timeout=DEADLINE, body_timeout=DEADLINE * 2)
    began = now()
    connection = await Connection.open(server.port)

    trickle = dribbling(connection, HEALTH[:-4], began + DEADLINE - 0.5)
    try:
        await assert_timed_out(connection, began, DEADLINE)
    finally:
        trickle.cancel()


async def test_a_connection_that_sends_nothing_is_closed_without_a_response(
    start_server, fake
) -> None:
    server = await start(start_server, fake)
    began = now()
    connection = await Connection.open(server.port)
    await assert_closed_silently(connection, began, HEADER)


# -- keep-alive ---------------------------------------------------------------------------------


async def test_a_kept_alive_connection_may_wait_past_the_header_timeout_for_its_next_request(
    start_server, fake
) -> None:
    server = await start(start_server, fake)
    connection = await Connection.open(server.port)
    assert (await connection.request("POST", "/decide", ROW)).status == 200
    await asyncio.sleep(HEADER * 2)  # idle, not slow: the idle timeout applies until the first byte
    assert (await connection.request("POST", "/decide", ROW)).status == 200
    await connection.close()


async def test_an_idle_kept_alive_connection_is_closed_at_the_idle_timeout(
    start_server, fake
) -> None:
    server = await start(start_server, fake)
    connection = await Connection.open(server.port)
    began = (
        now()
    )  # before the request, so before the end of its response, where the idle clock starts
    assert (await connection.request("GET", "/health", headers=[])).status == 200
    await assert_closed_silently(connection, began, IDLE)


async def test_the_next_head_has_the_header_timeout_from_its_first_byte(start_server, fake) -> None:
    server = await start(start_server, fake, idle_timeout=5.0)
    connection = await Connection.open(server.port)
    assert (await connection.request("GET", "/health", headers=[])).status == 200
    await asyncio.sleep(HEADER)
    began = now()
    connection.writer.write(HEALTH[:5])
    await assert_timed_out(connection, began, HEADER)


async def test_a_pipelined_partial_head_is_timed_from_the_end_of_the_previous_response(
    start_server, fake
) -> None:
    """Its bytes arrived with the first request, but the clock starts when that response is sent."""
    header = 1.0
    server = await start(start_server, fake, header_timeout=header)
    fake.delay = header * 2  # scoring outlasts the header timeout by a whole second
    connection = await Connection.open(server.port)
    connection.writer.write(POST + HEALTH[:10])
    assert (await connection.read_response(timeout=5)).status == 200
    connection.writer.write(
        HEALTH[10:]
    )  # in time by ~1 s counted from the response; 1 s late counted from arrival
    assert (await connection.read_response(timeout=5)).status == 200
    await connection.close()


async def test_a_pipelined_head_never_completed_gets_408(start_server, fake) -> None:
    server = await start(start_server, fake)
    connection = await Connection.open(server.port)
    began = now()  # the clock starts at the end of the first response, after this
    connection.writer.write(HEALTH + HEALTH[:10])
    assert (await connection.read_response()).status == 200
    await assert_timed_out(connection, began, HEADER)


# -- the body -----------------------------------------------------------------------------------


@pytest.mark.parametrize("sent", [0, 10])
async def test_a_stalled_body_gets_408_and_never_reaches_the_scorer(
    start_server, fake, sent
) -> None:
    server = await start(start_server, fake)
    connection = await Connection.open(server.port)
    head = POST[: len(POST) - len(BODY)]
    began = now()  # the body's clock starts when the server has the head, after this
    connection.writer.write(head + BODY[:sent])
    await assert_timed_out(connection, began, BODY_T)
    assert fake.calls == [] and server.service.admission.in_progress == 0
    await assert_serving(server.port)


async def test_a_body_dribbled_too_slowly_is_cut_off_at_the_body_timeout(
    start_server, fake
) -> None:
    server = await start(start_server, fake, body_timeout=DEADLINE, idle_timeout=DEADLINE * 2)
    connection = await Connection.open(server.port)
    head = POST[: len(POST) - len(BODY)]
    began = now()
    connection.writer.write(head)

    trickle = dribbling(connection, BODY[:-1], began + DEADLINE - 0.5)
    try:
        await assert_timed_out(connection, began, DEADLINE)
    finally:
        trickle.cancel()
    await connections_closed(server)
    assert fake.calls == [] and server.service.admission.in_progress == 0


async def test_a_chunked_body_that_stalls_mid_chunk_gets_408(start_server, fake) -> None:
    server = await start(start_server, fake)
    connection = await Connection.open(server.port)
    began = now()
    connection.writer.write(
        raw_request(fields=b"transfer-encoding: chunked\r\n", body=b"%x\r\n" % len(BODY) + BODY[:5])
    )
    await assert_timed_out(connection, began, BODY_T)
    assert fake.calls == []
