"""A chunk whose declared size alone is over SEMIF_MAX_BODY_BYTES: in memory on the fake clock
(tests/http/memory.py) where the point is when the answer comes, on a raw socket for h11's 400.

h11 0.16 reads a chunk-size line (up to 20 hex digits) into its private reader and emits
nothing until the chunk's data arrives: no public event or attribute carries the declared
size (`Data` has only `chunk_start` / `chunk_end`). So the body limit is checked on the bytes
h11 hands over, and a client that declares 2**64 + 10 bytes is refused 413 the moment more than
the limit has arrived, never at the body deadline; one that declares it and sends nothing is
indistinguishable from a slow client and gets 408 at the body deadline. Knowing the size sooner
would mean parsing the chunk framing ourselves or reading h11's private state (contract.md).
A size line longer than h11's 20 digits is h11's 400 at once.
"""

from __future__ import annotations

import pytest

from tests.wire_client import no_error_logs, parse_responses, raw_request, raw_responses  # noqa: F401 - fixture

pytestmark = pytest.mark.usefixtures("no_error_logs")

LIMIT = 1024
HUGE = b"%x" % (2**64 + 10)  # 17 hex digits: within h11's 20
CHUNKED = b"transfer-encoding: chunked\r\n"


async def test_a_huge_declared_chunk_is_413_as_soon_as_the_limit_is_passed_not_at_the_deadline(
    memory_server, fake
) -> None:
    memory = await memory_server(max_body_bytes=LIMIT, body_timeout=30.0)
    wire = await memory.connect()
    await wire.channel.send(raw_request(fields=CHUNKED, body=HUGE + b"\r\n" + b"x" * (LIMIT + 1)))
    (response,) = (
        wire.channel.responses()
    )  # the clock has not moved: nothing waited on the deadline
    assert response.status == 413 and response.code == "request_too_large" and wire.done
    assert fake.calls == []


async def test_a_huge_declared_chunk_with_nothing_after_it_is_408_at_the_body_deadline(
    memory_server, fake
) -> None:
    memory = await memory_server(max_body_bytes=LIMIT, body_timeout=1.0)
    wire = await memory.connect()
    await wire.channel.send(
        raw_request(fields=CHUNKED, body=HUGE + b"\r\n" + b"x" * (LIMIT // 2))
    )  # under the limit, then silence
    await memory.clock.advance(1.0 - 0.001)
    assert (
        wire.channel.responses() == [] and not wire.done
    )  # the body deadline, not an early answer
    await memory.clock.advance(0.002)
    (response,) = wire.channel.responses()
    assert response.status == 408 and response.code == "request_timeout"
    assert fake.calls == []


async def test_a_chunk_size_line_longer_than_h11_reads_is_400_at_once(start_server, fake) -> None:
    server = await start_server(fake, max_body_bytes=LIMIT, body_timeout=30.0)
    data = raw_request(fields=CHUNKED, body=b"1" + b"0" * 20 + b"\r\n")
    exchange = await raw_responses(server.port, data, 1, timeout=5.0)
    (response,) = parse_responses(exchange.data)
    assert response.status == 400 and response.code == "bad_request" and exchange.closed
    assert fake.calls == []
