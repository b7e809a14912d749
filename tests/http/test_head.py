"""HEAD on every GET route (RFC 9110 9.1, 9.3.2): GET's status and headers, Content-Length
included, and no content; no admission slot, never the scorer; the connection stays usable.

Every GET route in `service.ROUTES` is tested, so a GET route added later is covered here too.
"""

from __future__ import annotations

import asyncio
import threading

import h11
import pytest

from semif_serve.service.head_policy import ROUTES
from tests.request_bodies import POST
from tests.wire_client import AUTH, Connection, eventually, no_error_logs, raw_session  # noqa: F401 - fixture

pytestmark = pytest.mark.usefixtures("no_error_logs")

GET_PATHS = sorted(path.decode() for path, found in ROUTES.items() if found.method == b"GET")


def without_id(headers: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """A response's headers but the request id (and its System One twin), fresh per request."""
    return {
        key: value
        for key, value in headers.items()
        if key not in (b"x-request-id", b"x-typesafe-request-id")
    }


@pytest.mark.parametrize("path", GET_PATHS)
async def test_head_is_get_without_the_content_and_the_connection_carries_on(
    start_server, fake, path
) -> None:
    server = await start_server(fake)
    connection = await Connection.open(server.port)
    got = await connection.request(
        "GET", path, headers=[AUTH]
    )  # the token, in case a GET route wants one
    head = await connection.request(
        "HEAD", path, headers=[AUTH]
    )  # h11's client reads a HEAD response as head only
    after = await connection.request(
        "GET", path, headers=[AUTH]
    )  # framing intact: this answer is read whole
    await connection.close()
    assert head.status == got.status == after.status == 200
    assert head.body == b"" and after.body and got.body
    if (
        path == "/metrics"
    ):  # its counters move with every request: same headers, a length of its own
        assert without_id(head.headers).keys() == without_id(got.headers).keys()
        assert head.headers[b"content-type"] == got.headers[b"content-type"]
        assert int(head.headers[b"content-length"]) > 0
    else:
        assert without_id(head.headers) == without_id(got.headers)
        assert int(head.headers[b"content-length"]) == len(got.body)
    assert fake.calls == []


async def test_no_body_byte_follows_a_head_response_on_the_wire(start_server, fake) -> None:
    server = await start_server(fake)
    exchange = await raw_session(
        server.port, b"HEAD /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    head, _, rest = exchange.data.partition(b"\r\n\r\n")
    assert exchange.closed and head.startswith(b"HTTP/1.1 200 ") and rest == b""
    fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
    assert int(fields[b"content-length"]) > 0  # GET's length, though nothing follows


async def test_head_takes_no_admission_slot_and_never_reaches_the_scorer(
    start_server, fake
) -> None:
    server = await start_server(fake, max_queue=1)
    fake.gate = threading.Event()
    busy = await Connection.open(server.port)
    busy.writer.write(POST)
    await fake.wait_entered()  # the only slot is held, inside the scorer
    try:
        probe = await Connection.open(server.port)
        for _ in range(3):
            response = await probe.request("HEAD", "/health", headers=[])
            assert response.status == 200 and response.body == b""
        await probe.close()
        assert server.service.admission.in_progress == 1 and len(fake.calls) == 1
    finally:
        fake.gate.set()
    assert (await busy.read_response()).status == 200
    await busy.close()
    await eventually(lambda: server.service.admission.in_progress == 0)


@pytest.mark.parametrize(
    "method,path,allow",
    [
        ("POST", "/health", b"GET, HEAD"),
        ("DELETE", "/metrics", b"GET, HEAD"),
        ("HEAD", "/decide", b"POST"),  # no HEAD where there is no GET
        ("HEAD", "/decide/shared", b"POST"),
    ],
)
async def test_405_names_head_beside_get_and_only_there(
    start_server, fake, method, path, allow
) -> None:
    server = await start_server(fake)
    connection = await Connection.open(server.port)
    response = await connection.request(method, path, b"" if method == "POST" else None, headers=[])
    assert response.status == 405 and response.headers[b"allow"] == allow
    assert (await connection.request("GET", "/health", headers=[])).status == 200
    await connection.close()
    assert fake.calls == []


async def test_head_while_draining_is_the_503_head_without_its_body(start_server, fake) -> None:
    server = await start_server(fake, shutdown_grace=5.0)
    probe = await Connection.open(server.port)
    probe.writer.write(b"HEAD /heal")  # a head in progress keeps its connection through the drain
    await eventually(lambda: any(not c.closable for c in server.connections.values()))
    stopping = asyncio.ensure_future(server.shutdown())
    await asyncio.sleep(0)
    probe.writer.write(b"th HTTP/1.1\r\nhost: x\r\n\r\n")
    probe.h11.send(
        h11.Request(method="HEAD", target="/health", headers=[(b"host", b"x")])
    )  # what it sent, for its parser
    probe.h11.send(h11.EndOfMessage())
    response = await probe.read_response()
    assert (
        response.status == 503
        and response.body == b""
        and response.headers[b"connection"] == b"close"
    )
    await asyncio.wait_for(stopping, 2)
