"""Named callers on a real socket (SEMIF_API_TOKENS_FILE): each token is its caller's, a near miss is
a 401 counted with no name, the caller is named in metrics and the access log and never listed to
anyone unauthenticated; a share per caller (SEMIF_MAX_QUEUE_PER_CALLER) refuses a caller over it
before its body is read while another caller is still admitted; a file that cannot be used stops
the process."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bench.common.procs import free_port
from semif_serve.service.callers import DEFAULT
from tests.fake_scorer import FakeScorer
from tests.metrics_samples import sample, scrape, value
from tests.request_bodies import ROW
from tests.served_process import Process, replace
from tests.wire_client import (
    TOKEN,
    Connection,
    eventually,
    parse_responses,
    raw_request,
    raw_responses,
    request,
)

ALICE = "alice-" + "a" * 32
BOB = "bob-" + "b" * 32
CAROL = "carol-" + "c" * 32
FILE = f"# the ranking replica's callers\nalice {ALICE}\nbob\t{BOB}\n\ncarol {CAROL}\n"


def tokens_file(tmp_path: Path, text: str = FILE, mode: int = 0o600) -> str:
    path = tmp_path / "tokens"
    path.write_text(text)
    path.chmod(mode)
    return str(path)


def bearer(token: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", b"Bearer " + token.encode())]


async def test_each_token_is_its_callers_and_a_near_miss_is_a_401_with_no_name(
    start_server, tmp_path: Path
) -> None:
    server = await start_server(api_tokens_file=tokens_file(tmp_path), api_token="")
    before = (await request(server.port, "GET", "/metrics", headers=[])).body.decode()
    for name in ("alice", "bob", "carol"):  # never listed to anyone unauthenticated
        assert f'caller="{name}"' not in before
    for token in (ALICE, BOB, CAROL, BOB):
        response = await request(server.port, "POST", "/decide", ROW, bearer(token))
        assert response.status == 200, response.body
    for wrong in ("x" * 40, ALICE[:-1], ALICE + "x", TOKEN):
        response = await request(server.port, "POST", "/decide", ROW, bearer(wrong))
        assert (response.status, response.json["error"]["message"]) == (
            401,
            "the bearer token is not one this server accepts",
        )
        assert response.headers[b"www-authenticate"] == b'Bearer error="invalid_token"'
    assert (await request(server.port, "GET", "/v1/models", headers=bearer(CAROL))).status == 200
    metrics = await scrape(server.port)
    requests = "semif_http_requests_total"
    assert [
        value(metrics, requests, route="/decide", status="200", caller=name)
        for name in ("alice", "bob", "carol", "-")
    ] == [1, 2, 1, 0]
    assert sample(metrics, requests, route="/v1/models", status="200", caller="carol") == 1
    assert sample(metrics, requests, route="/decide", status="401", caller="-") == 4
    assert sample(metrics, "semif_refusals_total", code="unauthorized", caller="-") == 4
    assert value(metrics, "semif_refusals_total", code="unauthorized", caller="alice") == 0
    assert sample(metrics, "semif_decisions_total", method="none", caller="bob") == 2
    # Nothing unauthenticated tells how many callers there are, nor any hash of the file.
    health = (await request(server.port, "GET", "/health", headers=[])).body.decode()
    digests = [
        hashlib.sha256(data).hexdigest()
        for data in (FILE.encode(), ALICE.encode(), BOB.encode(), CAROL.encode())
    ]
    for shown in (
        health,
        (await request(server.port, "GET", "/healthz", headers=[])).body.decode(),
    ):
        assert not any(name in shown for name in ("alice", "bob", "carol", *digests)), shown
        assert "callers" not in json.loads(shown)


async def test_the_one_token_is_the_caller_default(start_server) -> None:
    server = await start_server()
    assert (await request(server.port, "POST", "/decide", ROW)).status == 200
    metrics = await scrape(server.port)
    assert (
        sample(metrics, "semif_http_requests_total", route="/decide", status="200", caller=DEFAULT)
        == 1
    )


async def test_a_caller_over_its_share_is_refused_before_its_body_while_another_is_admitted(
    start_server, tmp_path: Path
) -> None:
    fake = FakeScorer()
    fake.gate = threading.Event()
    server = await start_server(
        fake,
        api_tokens_file=tokens_file(tmp_path),
        api_token="",
        max_queue=4,
        max_queue_per_caller=2,
    )
    held = [
        asyncio.ensure_future(request(server.port, "POST", "/decide", ROW, bearer(ALICE)))
        for _ in range(2)
    ]
    await eventually(lambda: server.service.admission.in_progress == 2, 5.0)
    # Alice's third: a head that promises a body it never sends is refused at once, before the body.
    head = raw_request(
        fields=b"authorization: Bearer " + ALICE.encode() + b"\r\ncontent-length: 100\r\n",
        auth=False,
    )
    sent = await raw_responses(server.port, head, 1)
    (refused,) = parse_responses(sent.data)
    assert (refused.status, refused.code) == (429, "busy")
    assert refused.json["error"]["message"] == (
        "caller 'alice' already has 2 requests in progress, its share (SEMIF_MAX_QUEUE_PER_CALLER); "
        "retry later"
    )
    assert int(refused.headers[b"retry-after"]) >= 1  # the queue's rule
    # Bob is still admitted while alice is refused: his request waits for the card, then is served.
    bob = asyncio.ensure_future(request(server.port, "POST", "/decide", ROW, bearer(BOB)))
    await eventually(lambda: server.service.admission.in_progress == 3, 5.0)
    fake.gate.set()
    assert [r.status for r in await asyncio.gather(*held, bob)] == [200, 200, 200]
    metrics = await scrape(server.port)
    assert sample(metrics, "semif_busy_refusals_total", reason="caller") == 1
    assert sample(metrics, "semif_busy_refusals_total", reason="queue") == 0
    assert sample(metrics, "semif_refusals_total", code="busy", caller="alice") == 1
    assert value(metrics, "semif_refusals_total", code="busy", caller="bob") == 0
    assert server.service.admission.in_progress == 0 and not server.service.admission.by_caller


async def test_the_queue_cap_is_checked_before_the_callers_share(
    start_server, tmp_path: Path
) -> None:
    fake = FakeScorer()
    fake.gate = threading.Event()
    server = await start_server(
        fake,
        api_tokens_file=tokens_file(tmp_path),
        api_token="",
        max_queue=2,
        max_queue_per_caller=1,
    )
    held = [
        asyncio.ensure_future(request(server.port, "POST", "/decide", ROW, bearer(token)))
        for token in (ALICE, BOB)
    ]
    await eventually(lambda: server.service.admission.in_progress == 2, 5.0)
    refused = await request(server.port, "POST", "/decide", ROW, bearer(ALICE))
    assert refused.json["error"]["message"] == "2 requests already in progress; retry later"
    fake.gate.set()
    assert [r.status for r in await asyncio.gather(*held)] == [200, 200]
    metrics = await scrape(server.port)
    assert sample(metrics, "semif_busy_refusals_total", reason="queue") == 1
    assert sample(metrics, "semif_busy_refusals_total", reason="caller") == 0


async def test_a_post_refused_after_its_slot_gives_its_callers_share_back(
    start_server, tmp_path: Path
) -> None:
    """A head refused once its slot was taken (a declared length over the limit: 413) frees the slot
    under its caller's name: with a share of one, the caller's next request is served, not a 429."""
    server = await start_server(
        api_tokens_file=tokens_file(tmp_path),
        api_token="",
        max_queue_per_caller=1,
        max_body_bytes=1024,
    )
    head = raw_request(
        fields=b"authorization: Bearer " + ALICE.encode() + b"\r\ncontent-length: 2048\r\n",
        auth=False,
    )
    (refused,) = parse_responses((await raw_responses(server.port, head, 1)).data)
    assert (refused.status, refused.code) == (413, "request_too_large")
    assert not server.service.admission.by_caller
    assert (await request(server.port, "POST", "/decide", ROW, bearer(ALICE))).status == 200


async def test_without_a_share_the_busy_reasons_are_not_exported(start_server) -> None:
    server = await start_server()
    assert (
        "semif_busy_refusals" not in (await request(server.port, "GET", "/metrics")).body.decode()
    )


async def test_the_access_log_names_the_caller_never_its_token(tmp_path: Path) -> None:
    process = await Process.start(
        without=("SEMIF_API_TOKEN",),
        SEMIF_API_TOKENS_FILE=tokens_file(tmp_path),
        SEMIF_LOG_FORMAT="json",
        SEMIF_LOG_FLUSH_S="0",
    )
    try:
        connection = await Connection.open(process.port)
        for token in (BOB, "x" * 40):
            await connection.request("POST", "/decide", ROW, bearer(token))
        await connection.close()
    finally:
        process.proc.send_signal(signal.SIGTERM)
        assert await process.exit_code(10) == 0
    output = "".join(process.stderr)
    assert BOB not in output and ALICE not in output
    access = [
        json.loads(line)
        for line in process.stderr
        if line.startswith("{") and '"semif_serve.access"' in line
    ]
    assert [(line["caller"], line["status"]) for line in access] == [("bob", 200), ("-", 401)]


def start(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The process with only `env` set (on the stub): it must stop before it listens."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SEMIF_")}
    return subprocess.run(
        [sys.executable, "-m", "semif_serve"],
        env={**base, "SEMIF_SCORER": "stub", "SEMIF_PORT": str(free_port()), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "text,mode,problem",
    [
        (FILE, 0o644, " is readable or writable by other users (mode 0644)"),
        ("", 0o600, " holds no caller (only blank lines and # comments)"),
        (f"alice {ALICE}\nbob {ALICE}\n", 0o600, " line 2: the token is line 1's too"),
        (f"alice {ALICE} x\n", 0o600, " line 1: 3 fields"),
    ],
)
def test_a_tokens_file_that_cannot_be_used_stops_the_process(
    tmp_path: Path, text: str, mode: int, problem: str
) -> None:
    path = tokens_file(tmp_path, text, mode)
    done = start({"SEMIF_API_TOKENS_FILE": path})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"semif-serve: SEMIF_API_TOKENS_FILE {path}{problem}")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


# Files whose every long field is a token: none of them may reach stderr, the log or /metrics.
DAVE, ERIN = "dave-" + "d" * 32, "erin-" + "e" * 32
LEAKY = {
    "columns swapped": f"{DAVE} dave\n",
    "a line of two tokens": f"{DAVE} {ERIN}\n",
    "a token twice": f"dave {DAVE}\nerin {DAVE}\n",
}


def long_fields(text: str) -> set[str]:
    """The fields of 32 characters or more: where a token may be, whatever column it is in."""
    return {field for field in text.split() if len(field) >= 32}


@pytest.mark.parametrize("case", sorted(LEAKY))
def test_a_file_refused_at_startup_shows_no_token(tmp_path: Path, case: str) -> None:
    done = start({"SEMIF_API_TOKENS_FILE": tokens_file(tmp_path, LEAKY[case])})
    assert done.returncode == 2, done.stderr
    assert "line 1: the name must match" in done.stderr or "the token is line 1's" in done.stderr
    shown = done.stderr + done.stdout
    assert [field for field in long_fields(LEAKY[case]) if field in shown] == []


async def test_a_file_refused_on_reload_shows_no_token_in_the_log_or_the_metrics(
    tmp_path: Path,
) -> None:
    path = Path(tokens_file(tmp_path))
    process = await Process.start(
        without=("SEMIF_API_TOKEN",), SEMIF_API_TOKENS_FILE=str(path), SEMIF_LOG_FLUSH_S="0"
    )
    shown = []
    try:
        for text in LEAKY.values():
            replace(path, text)
            line = await process.reload(str(path))  # the reload's outcome, either way
            assert "the callers are unchanged" in line, line
            for token in long_fields(
                text
            ):  # had a token become a name, its requests would carry it
                refused = await request(process.port, "POST", "/decide", ROW, bearer(token))
                assert refused.status == 401
        shown.append((await request(process.port, "GET", "/metrics", headers=[])).body.decode())
    finally:
        process.proc.send_signal(signal.SIGTERM)
        assert await process.exit_code(10) == 0
    shown.append("".join(process.stderr))
    leaked = [
        field for text in LEAKY.values() for field in long_fields(text) if field in "".join(shown)
    ]
    assert leaked == []
    assert shown[0].count("semif_reloads_total") > 0 and "Traceback" not in shown[1]


def test_both_bearer_forms_stop_the_process(tmp_path: Path) -> None:
    done = start({"SEMIF_API_TOKEN": TOKEN, "SEMIF_API_TOKENS_FILE": tokens_file(tmp_path)})
    assert done.returncode == 2
    assert done.stderr == (
        "semif-serve: SEMIF_API_TOKEN and SEMIF_API_TOKENS_FILE are both set; set one "
        "(the file's callers replace the one token)\n"
    )


async def test_startup_logs_how_many_callers_it_loaded_as_a_reload_does(tmp_path: Path) -> None:
    """Before the model loads, so an operator sees which file's callers a replica serves (their
    names, never a token) without waiting for a request or a reload."""
    named = await Process.start(
        without=("SEMIF_API_TOKEN",), SEMIF_API_TOKENS_FILE=tokens_file(tmp_path)
    )
    one = await Process.start()
    for process in (named, one):
        process.proc.send_signal(signal.SIGTERM)
        assert await process.exit_code(10) == 0
    before = ["".join(p.stderr).split("listening")[0] for p in (named, one)]
    assert "callers loaded: 3 (alice, bob, carol)" in before[0]
    assert f"callers loaded: 1 ({DEFAULT})" in before[1]
    assert not any(token in "".join(named.stderr) for token in (ALICE, BOB, CAROL))
