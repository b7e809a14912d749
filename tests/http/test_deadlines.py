"""Every wait has a deadline, and each deadline counts from the moment the wire says it does.

The rule (http/connection.py, HEAD_READERS, by phase): the first head, and a next head already
begun (in h11's buffer, or held by the channel), must complete within the header timeout counted from the connection's
start or from the end of the previous response. An idle keep-alive connection waits for
the first byte of its next request under the idle timeout; from that byte the head has
the header timeout. The body has the body timeout from the end of its head. A head cut
off gets a 408 envelope and a close; a connection that never began a request is just closed.

The timing logic runs on a fake clock over an in-memory channel (tests/http/memory.py): a
deadline must not fire a tick before its moment and must fire a tick after it. One test per
deadline (header, idle, body) runs on a real socket and the wall clock, with slack for a
loaded machine.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from semif_serve.http.connection import LINGER_S
from tests.http.memory import Memory, Wire
from tests.request_bodies import BODY, POST
from tests.wire_client import (
    HEALTH,
    Connection,
    assert_serving,
    no_error_logs,  # noqa: F401 - fixture
    raw_request,
)

pytestmark = pytest.mark.usefixtures("no_error_logs")

# Each deadline is longer than the one below it plus SLACK, so a wrong deadline cannot pass
# for the right one inside the window.
HEADER, BODY_T, IDLE = 0.3, 1.0, 2.0
# Real-socket windows open at the deadline itself: `since` is always taken at or before the
# event the server's clock starts from (both clocks are this loop's), so nothing can arrive
# early. They close SLACK later, for scheduling on a loaded 2-core machine.
SLACK = 0.6
EARLY = 0.001  # the event loop may run a timer up to its clock resolution early
TICK = 0.001  # on the fake clock: how close to its moment a deadline is pinned, either side
HEAD = POST[: len(POST) - len(BODY)]


def now() -> float:
    return asyncio.get_running_loop().time()


async def start(start_server, fake, **overrides):
    return await start_server(
        fake,
        **{"header_timeout": HEADER, "body_timeout": BODY_T, "idle_timeout": IDLE, **overrides},
    )


async def in_memory(memory_server, **overrides) -> Memory:
    return await memory_server(
        **{"header_timeout": HEADER, "body_timeout": BODY_T, "idle_timeout": IDLE, **overrides}
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


async def times_out(memory: Memory, wire: Wire, after: float, answered: int = 0) -> None:
    """On the fake clock: nothing more a tick before `after` seconds from now, then a 408 and a
    lingering close (the client may still be sending) a tick after."""
    await memory.clock.advance(after - TICK)
    assert len(wire.channel.responses()) == answered and not wire.done
    await memory.clock.advance(2 * TICK)
    responses = wire.channel.responses()
    assert len(responses) == answered + 1
    response = responses[-1]
    assert response.status == 408 and response.code == "request_timeout"
    assert response.headers[b"connection"] == b"close"
    assert wire.done and wire.channel.linger == LINGER_S


async def closes_silently(memory: Memory, wire: Wire, after: float, answered: int = 0) -> None:
    """On the fake clock: open a tick before `after` seconds from now, closed with no byte more a tick after."""
    sent = len(wire.channel.sent)
    await memory.clock.advance(after - TICK)
    assert not wire.done and not wire.channel.is_closed
    await memory.clock.advance(2 * TICK)
    assert wire.done and wire.channel.linger == 0.0 and len(wire.channel.sent) == sent
    assert len(wire.channel.responses()) == answered


# -- one real socket per deadline --------------------------------------------------------------


async def test_a_partial_first_head_gets_408_at_the_header_timeout(start_server, fake) -> None:
    server = await start(start_server, fake)
    began = now()
    connection = await Connection.open(server.port)
    connection.writer.write(POST[:20])
    await assert_timed_out(connection, began, HEADER)
    await assert_serving(server.port)


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


async def test_a_stalled_body_gets_408_and_never_reaches_the_scorer(start_server, fake) -> None:
    server = await start(start_server, fake)
    connection = await Connection.open(server.port)
    began = now()  # the body's clock starts when the server has the head, after this
    connection.writer.write(HEAD + BODY[:10])
    await assert_timed_out(connection, began, BODY_T)
    assert fake.calls == [] and server.service.admission.in_progress == 0
    await assert_serving(server.port)


# -- the first request, on the fake clock ---------------------------------------------------------


async def test_a_partial_first_head_is_cut_off_exactly_at_the_header_timeout(memory_server) -> None:
    memory = await in_memory(memory_server)
    wire = await memory.connect()
    await wire.channel.send(POST[:20])
    await times_out(memory, wire, HEADER)


async def test_a_head_dribbled_byte_by_byte_is_cut_off_at_the_header_timeout(
    memory_server,
) -> None:
    """The deadline is for the whole head, not per read: a steady trickle does not extend it."""
    memory = await in_memory(memory_server)
    wire = await memory.connect()
    step = HEADER / 10
    for byte in HEALTH[:9]:  # a byte every tenth of the deadline, up to 0.9 of it
        await wire.channel.send(bytes([byte]))
        await memory.clock.advance(step)
    await times_out(memory, wire, HEADER - 9 * step)


async def test_a_connection_that_sends_nothing_is_closed_without_a_response(
    memory_server,
) -> None:
    memory = await in_memory(memory_server)
    wire = await memory.connect()
    await closes_silently(memory, wire, HEADER)


# -- keep-alive, on the fake clock ----------------------------------------------------------------


async def test_a_kept_alive_connection_may_wait_past_the_header_timeout_for_its_next_request(
    memory_server,
) -> None:
    memory = await in_memory(memory_server)
    wire = await memory.connect()
    await wire.channel.send(POST)
    assert [r.status for r in await wire.answered(1)] == [200]
    await memory.clock.advance(
        IDLE - TICK
    )  # idle, not slow: the idle timeout applies until the first byte
    await wire.channel.send(POST)
    assert [r.status for r in await wire.answered(2)] == [200, 200]


async def test_an_idle_kept_alive_connection_is_closed_exactly_at_the_idle_timeout(
    memory_server,
) -> None:
    memory = await in_memory(memory_server)
    wire = await memory.connect()
    await wire.channel.send(HEALTH)
    assert [r.status for r in wire.channel.responses()] == [200]
    await closes_silently(memory, wire, IDLE, answered=1)


async def test_the_next_head_has_the_header_timeout_from_its_first_byte(memory_server) -> None:
    memory = await in_memory(memory_server, idle_timeout=5.0)
    wire = await memory.connect()
    await wire.channel.send(HEALTH)
    await memory.clock.advance(HEADER * 2)
    await wire.channel.send(HEALTH[:5])
    await times_out(memory, wire, HEADER, answered=1)


async def test_a_pipelined_partial_head_is_timed_from_the_end_of_the_previous_response(
    memory_server, fake
) -> None:
    """Its bytes arrived with the first request, but the clock starts when that response is sent."""
    memory = await in_memory(memory_server)
    fake.gate = threading.Event()
    wire = await memory.connect()
    await wire.channel.send(POST + HEALTH[:10])
    await fake.wait_entered()
    await memory.clock.advance(HEADER * 2)  # scoring outlasts the header timeout
    fake.gate.set()
    assert [r.status for r in await wire.answered(1)] == [200]
    await memory.clock.advance(
        HEADER - TICK
    )  # in time counted from the response; late from arrival
    await wire.channel.send(HEALTH[10:])
    assert [r.status for r in wire.channel.responses()] == [200, 200]


async def test_a_head_held_by_the_channel_while_scoring_is_read_under_the_header_timeout(
    memory_server, fake
) -> None:
    """Its bytes reached the channel (BUFFERED), not h11: the reply moves the connection on to read
    them, and the head has the header timeout from the end of that reply, not the idle timeout."""
    memory = await in_memory(memory_server)
    fake.gate = threading.Event()
    wire = await memory.connect()
    await wire.channel.send(POST)
    await fake.wait_entered()
    await wire.channel.send(HEALTH[:10])  # nothing reads while the request is scored
    assert wire.channel.buffered == 10
    fake.gate.set()
    assert [r.status for r in await wire.answered(1)] == [200]
    await times_out(memory, wire, HEADER, answered=1)


async def test_a_pipelined_head_never_completed_gets_408(memory_server) -> None:
    memory = await in_memory(memory_server)
    wire = await memory.connect()
    await wire.channel.send(HEALTH + HEALTH[:10])
    await times_out(memory, wire, HEADER, answered=1)


# -- the body, on the fake clock ------------------------------------------------------------------


@pytest.mark.parametrize("sent", [0, 10])
async def test_a_stalled_body_is_cut_off_exactly_at_the_body_timeout(
    memory_server, fake, sent
) -> None:
    memory = await in_memory(memory_server)
    wire = await memory.connect()
    await wire.channel.send(HEAD + BODY[:sent])
    await times_out(memory, wire, BODY_T)
    assert fake.calls == [] and memory.server.service.admission.in_progress == 0


async def test_a_body_dribbled_too_slowly_is_cut_off_at_the_body_timeout(
    memory_server, fake
) -> None:
    memory = await in_memory(memory_server)
    wire = await memory.connect()
    await wire.channel.send(HEAD)
    step = BODY_T / 10
    for byte in BODY[:9]:  # a byte every tenth of the deadline, up to 0.9 of it
        await wire.channel.send(bytes([byte]))
        await memory.clock.advance(step)
    await times_out(memory, wire, BODY_T - 9 * step)
    assert fake.calls == [] and memory.server.service.admission.in_progress == 0


async def test_a_chunked_body_that_stalls_mid_chunk_gets_408(memory_server, fake) -> None:
    memory = await in_memory(memory_server)
    wire = await memory.connect()
    await wire.channel.send(
        raw_request(fields=b"transfer-encoding: chunked\r\n", body=b"%x\r\n" % len(BODY) + BODY[:5])
    )
    await times_out(memory, wire, BODY_T)
    assert fake.calls == []
