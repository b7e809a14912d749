"""The wire's own refusals are logged and counted under the caller the service named, on a real socket.

The service names the caller on the exchange's record once the bearer passes (service/head_policy.py);
the wire then refuses on its own, without asking the application again: the body not received in
time (408), a chunked body past the limit (413), shutdown's grace running out (503). Each must show
the caller in the access line and in the `caller` label of `semif_http_requests_total` and
`semif_refusals_total`, never `-`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import pytest

from tests.metrics_samples import Samples, parse, sample, scrape, value
from tests.request_bodies import BODY, ROW
from tests.wire_client import Connection, raw_request

NAME = "ranker"
TOKEN = "ranker-token-" + "r" * 32
BEARER = b"authorization: Bearer " + TOKEN.encode() + b"\r\n"


def named_caller(tmp_path: Path) -> dict[str, object]:
    """The settings of a server whose one caller is NAME (a tokens file, no SEMIF_API_TOKEN)."""
    path = tmp_path / "tokens"
    path.write_text(f"{NAME} {TOKEN}\n")
    path.chmod(0o600)
    return {"api_tokens_file": str(path), "api_token": "", "metrics": True}


def head(fields: bytes) -> bytes:
    """A POST /decide head with NAME's bearer and `fields` framing its body."""
    return raw_request(fields=BEARER + b"content-type: application/json\r\n" + fields, auth=False)


def access_line(caplog: pytest.LogCaptureFixture, status: int) -> dict[str, object]:
    """The one access line with `status`."""
    (line,) = [
        record.fields  # type: ignore[attr-defined]
        for record in caplog.records
        if record.name == "semif_serve.access" and record.fields["status"] == status  # type: ignore[attr-defined]
    ]
    return line


def assert_counted(samples: Samples, status: str, code: str) -> None:
    """One request and one refusal under NAME, none under `-`."""
    requests, refusals = "semif_http_requests_total", "semif_refusals_total"
    assert sample(samples, requests, route="/decide", status=status, caller=NAME) == 1
    assert value(samples, requests, route="/decide", status=status, caller="-") == 0
    assert sample(samples, refusals, code=code, caller=NAME) == 1
    assert value(samples, refusals, code=code, caller="-") == 0


async def refused(port: int, sent: bytes) -> int:
    """The status of the one response to `sent`, which the server closes after it."""
    connection = await Connection.open(port)
    connection.writer.write(sent)
    response = await connection.read_response(timeout=10)
    assert await connection.closed_by_peer()
    await connection.close()
    return response.status


async def test_a_body_not_received_in_time_is_the_callers_408(
    start_server, fake, tmp_path: Path, caplog
) -> None:
    caplog.set_level(logging.INFO, "semif_serve.access")
    server = await start_server(fake, body_timeout=0.3, **named_caller(tmp_path))
    assert await refused(server.port, head(b"content-length: 100\r\n") + b'{"id": ') == 408
    line = access_line(caplog, 408)
    assert (line["caller"], line["code"]) == (NAME, "request_timeout")
    assert_counted(await scrape(server.port), "408", "request_timeout")
    assert fake.calls == []


async def test_a_chunked_body_past_the_limit_is_the_callers_413(
    start_server, fake, tmp_path: Path, caplog
) -> None:
    caplog.set_level(logging.INFO, "semif_serve.access")
    server = await start_server(fake, max_body_bytes=10, **named_caller(tmp_path))
    chunks = b'b\r\n{"id": "r1"\r\n0\r\n\r\n'  # 11 bytes in one chunk, over the 10-byte limit
    assert await refused(server.port, head(b"transfer-encoding: chunked\r\n") + chunks) == 413
    line = access_line(caplog, 413)
    assert (line["caller"], line["code"]) == (NAME, "request_too_large")
    assert_counted(await scrape(server.port), "413", "request_too_large")
    assert fake.calls == []


async def test_a_call_cut_off_by_shutdown_is_the_callers_503(
    start_server, fake, tmp_path: Path, caplog
) -> None:
    """The grace runs out while the call is scored. The listeners are closed by the time shutdown
    returns, so the exposition is the one /metrics answers (`Operations.metrics_reply`), in process."""
    caplog.set_level(logging.INFO, "semif_serve.access")
    server = await start_server(fake, shutdown_grace=0.3, **named_caller(tmp_path))
    fake.gate = threading.Event()
    connection = await Connection.open(server.port)
    connection.writer.write(head(b"content-length: %d\r\n" % len(BODY)) + BODY)
    await fake.wait_entered()
    stopping = asyncio.ensure_future(server.shutdown())
    response = await connection.read_response(timeout=10)
    assert (response.status, response.code) == (503, "shutting_down")
    fake.gate.set()
    await asyncio.wait_for(stopping, 5)
    line = access_line(caplog, 503)
    assert (line["caller"], line["code"]) == (NAME, "shutting_down")
    assert_counted(parse(server.ops.metrics_reply().body.decode()), "503", "shutting_down")
    assert [row["id"] for _, row in fake.calls] == [ROW["id"]]
