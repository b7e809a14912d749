"""The real process's stderr: one JSON object per line, an access line per request, the settings
once with the token redacted, and no token or body anywhere, not even a wrong token or a body
that failed to parse. Also readiness on a real SIGTERM: /health turns 503 `draining` (with
Retry-After) while an in-flight request still gets its 200."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from typing import Any

import pytest

from tests.request_bodies import ROW
from tests.served_process import Process
from tests.wire_client import HEALTH, TOKEN, Connection, raw_exchange, request

WRONG_TOKEN = "wrong-token-5e1f0c8a9b7d6e4f3a2b1c0d9e8f7a6b"
BODY_MARKER = "body-marker-a8c6e4f2"


def lines(process: Process) -> list[dict[str, Any]]:
    """Every stderr line, each parsed as one JSON object (fails on any other line)."""
    parsed = []
    for line in process.stderr:
        assert line.endswith("\n") and line.strip(), repr(line)
        value = json.loads(line)
        assert isinstance(value, dict) and {"time", "level", "logger", "message"} <= set(value), (
            line
        )
        parsed.append(value)
    return parsed


async def traffic(port: int) -> None:
    """Requests that each leave one access line; some carry what must never be logged."""
    assert (
        await request(port, "GET", "/health", headers=[(b"x-request-id", b"probe-1")])
    ).status == 200
    assert (
        await request(
            port,
            "POST",
            "/decide",
            ROW,
            headers=[(b"authorization", b"Bearer " + TOKEN.encode()), (b"x-request-id", b"ok-1")],
        )
    ).status == 200
    wrong = [(b"authorization", b"Bearer " + WRONG_TOKEN.encode()), (b"x-request-id", b"wrong-1")]
    assert (
        await request(port, "POST", "/decide", {**ROW, "state": BODY_MARKER}, headers=wrong)
    ).status == 401
    unparsable = ('{"id": "r", "state": "' + BODY_MARKER + '", ' + TOKEN).encode()
    response = await request(
        port,
        "POST",
        "/decide",
        unparsable,
        headers=[(b"authorization", b"Bearer " + TOKEN.encode()), (b"x-request-id", b"bad-json-1")],
    )
    assert response.status == 422
    await raw_exchange(
        port,
        b"GET /health HTTP/1.1\r\nauthorization: Bearer "
        + WRONG_TOKEN.encode()
        + b"\r\nbroken\r\n\r\n",
    )
    assert (await request(port, "GET", "/metrics?token=" + WRONG_TOKEN, headers=[])).status == 200


async def test_every_log_line_is_json_and_carries_no_token_or_body() -> None:
    process = await Process.start(SEMIF_LOG_FORMAT="json")
    await traffic(process.port)
    process.proc.send_signal(signal.SIGTERM)
    assert await process.exit_code(10) == 0
    parsed = lines(process)
    output = "".join(process.stderr)
    for secret in (TOKEN, WRONG_TOKEN, BODY_MARKER):
        assert secret not in output
    (settings,) = [line["settings"] for line in parsed if "settings" in line]
    assert (
        settings["api_token"] == "<redacted>"
        and settings["log_format"] == "json"
        and settings["port"] == process.port
    )
    access = [line for line in parsed if line["logger"] == "semif_serve.access"]
    by_id = {line["request_id"]: line for line in access}
    assert len(access) == 6
    fields = {
        "time",
        "request_id",
        "peer",
        "caller",
        "method",
        "path",
        "status",
        "code",
        "rows",
        "bytes_in",
        "bytes_out",
        "queued_s",
        "scoring_s",
        "total_s",
    }
    assert all(fields <= set(line) for line in access)
    ok = by_id["ok-1"]
    assert (ok["method"], ok["path"], ok["status"], ok["code"], ok["rows"]) == (
        "POST",
        "/decide",
        200,
        None,
        1,
    )
    assert ok["bytes_in"] > len(json.dumps(ROW)) and ok["bytes_out"] > 0
    assert ok["queued_s"] >= 0 and ok["scoring_s"] >= 0 and ok["total_s"] >= ok["scoring_s"]
    assert ok["peer"].startswith("127.0.0.1:")
    assert (ok["caller"], by_id["wrong-1"]["caller"], by_id["probe-1"]["caller"]) == (
        "default",
        "-",
        "-",
    )  # the one token's caller by name; no name without a right token, nor on an open route
    assert (
        by_id["wrong-1"]["status"],
        by_id["wrong-1"]["code"],
        by_id["wrong-1"]["scoring_s"],
    ) == (401, "unauthorized", None)
    assert (by_id["bad-json-1"]["status"], by_id["bad-json-1"]["code"]) == (422, "invalid_request")
    assert by_id["probe-1"]["status"] == 200
    (broken,) = [line for line in access if line["status"] == 400]
    assert (
        broken["code"] == "bad_request"
        and broken["method"] == "-"
        and len(broken["request_id"]) == 32
    )
    (metrics,) = [line for line in access if line["path"].startswith("/metrics")]
    assert metrics["path"] == "/metrics"  # never the query string


async def test_text_format_carries_no_token_either() -> None:
    process = await Process.start(SEMIF_LOG_FORMAT="text")
    await traffic(process.port)
    process.proc.send_signal(signal.SIGTERM)
    assert await process.exit_code(10) == 0
    output = "".join(process.stderr)
    for secret in (TOKEN, WRONG_TOKEN, BODY_MARKER):
        assert secret not in output
    assert '"api_token": "<redacted>"' in output and "request_id=ok-1" in output
    assert re.search(r"request_id=ok-1 peer=127\.0\.0\.1:\d+ caller=default method=POST", output)
    assert re.search(r"request_id=wrong-1 peer=127\.0\.0\.1:\d+ caller=- method=POST", output)


def test_the_settings_line_redacts_a_token_and_shows_none_where_no_token_is_set(tmp_path) -> None:
    """With a tokens file there is no SEMIF_API_TOKEN: the line says so, not that one is redacted."""
    from semif_serve import config
    from semif_serve.ops.logs import REDACTED, redacted_settings

    one = redacted_settings(config.load({"SEMIF_API_TOKEN": TOKEN}))
    named = redacted_settings(config.load({"SEMIF_API_TOKENS_FILE": str(tmp_path / "tokens")}))
    assert (one["api_token"], one["api_tokens_file"]) == (REDACTED, None)
    assert (named["api_token"], named["api_tokens_file"]) == (None, str(tmp_path / "tokens"))
    assert TOKEN not in json.dumps(one)


async def test_access_log_off_writes_no_access_lines() -> None:
    process = await Process.start(SEMIF_LOG_FORMAT="json", SEMIF_ACCESS_LOG="off")
    await traffic(process.port)
    process.proc.send_signal(signal.SIGTERM)
    assert await process.exit_code(10) == 0
    assert not [line for line in lines(process) if line["logger"] == "semif_serve.access"]


async def test_readiness_turns_503_at_sigterm_while_the_in_flight_request_gets_200() -> None:
    process = await Process.start(SEMIF_LOG_FORMAT="json", SEMIF_STUB_DELAY_MS="2000")
    probe = await Connection.open(process.port)
    assert (await probe.request("GET", "/health", headers=[])).status == 200
    # A probe whose head is in progress keeps its connection through the drain. Its bytes are
    # sent before the call below, so the server has them once /health reports that call (no sleep).
    probe.writer.write(HEALTH[:10])
    await probe.writer.drain()
    in_flight = asyncio.ensure_future(request(process.port, "POST", "/decide", ROW))
    await asyncio.wait_for(process.in_flight(), 5)
    process.proc.send_signal(signal.SIGTERM)
    await asyncio.wait_for(process.wait_for_line("shutting down"), 5)
    assert not in_flight.done()
    probe.writer.write(HEALTH[10:])
    readiness = await probe.read_response()
    assert readiness.status == 503 and readiness.json["status"] == "draining"
    assert int(readiness.headers[b"retry-after"]) >= 1 and readiness.json["in_progress"] == 1
    response = await asyncio.wait_for(in_flight, 5)
    assert response.status == 200 and response.json["id"] == ROW["id"]
    assert await process.exit_code(10) == 0
    lines(process)


@pytest.mark.parametrize(
    "name,value",
    [
        ("SEMIF_LOG_FORMAT", "xml"),
        ("SEMIF_LOG_FORMAT", "JSON"),
        ("SEMIF_ACCESS_LOG", "yes"),
        ("SEMIF_METRICS", "maybe"),
    ],
)
async def test_a_bad_ops_setting_refuses_startup_with_exit_2(name: str, value: str) -> None:
    import os
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("SEMIF_")}
    env.update(SEMIF_API_TOKEN=TOKEN, SEMIF_SCORER="stub", SEMIF_PORT="1", **{name: value})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "semif_serve", env=env, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2 and name in err.decode() and TOKEN not in err.decode()


async def test_metrics_on_without_prometheus_client_refuses_startup_with_exit_2(tmp_path) -> None:
    import os
    import sys

    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nsys.modules['prometheus_client'] = None  # not installed\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEMIF_")}
    env.update(
        SEMIF_API_TOKEN=TOKEN,
        SEMIF_SCORER="stub",
        SEMIF_PORT="1",
        SEMIF_METRICS="on",
        PYTHONPATH=str(tmp_path),
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "semif_serve", env=env, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2 and "SEMIF_METRICS=on needs prometheus_client" in err.decode()


async def test_a_startup_refusal_is_one_json_line_in_json_mode(tmp_path) -> None:
    import os
    import sys

    from tests.calibration_files import bound_path

    env = {k: v for k, v in os.environ.items() if not k.startswith("SEMIF_")}
    env.update(
        SEMIF_API_TOKEN=TOKEN,
        SEMIF_SCORER="stub",
        SEMIF_PORT="1",
        SEMIF_LOG_FORMAT="json",
        SEMIF_CALIBRATION=bound_path(tmp_path, model="fitted-elsewhere"),
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "semif_serve", env=env, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    (line,) = err.decode().splitlines()
    record = json.loads(line)
    assert (
        proc.returncode == 2
        and record["level"] == "error"
        and "SEMIF_CALIBRATION" in record["message"]
    )
