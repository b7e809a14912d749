"""SIGHUP on a real process: the tokens file and SEMIF_CALIBRATION re-read, checked as at startup and
swapped whole. A token rotated with no failed request; under load every response sees the old or the
new calibration, never a mix; a file that fails a check leaves the old one serving, the reason logged
naming the file and the entry; with SEMIF_API_TOKEN the token stays and the calibration reloads."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

from tests.calibration_files import MATCHING
from tests.metrics_samples import sample, scrape
from tests.request_bodies import ROW
from tests.served_process import Process, replace
from tests.wire_client import TOKEN, request

OLD = "old-" + "o" * 32
NEW = "new-" + "n" * 32
OTHER = "other-" + "x" * 32


def bearer(token: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", b"Bearer " + token.encode())]


async def stop(process: Process) -> None:
    process.proc.send_signal(signal.SIGTERM)
    assert await process.exit_code(10) == 0


async def test_a_token_is_rotated_under_the_same_name_with_no_failed_request(
    tmp_path: Path,
) -> None:
    """The recipe in docs/operating.md: the new token beside the old under the same name, reload,
    the client moves, the old line removed, reload; the caller's label never changes."""
    tokens = tmp_path / "tokens"
    replace(tokens, f"svc {OLD}\nother {OTHER}\n")
    process = await Process.start(without=("SEMIF_API_TOKEN",), SEMIF_API_TOKENS_FILE=str(tokens))
    current = [OLD]
    statuses: list[tuple[str, int]] = []
    running = True

    async def caller() -> None:  # the caller, sending all along with whichever token it holds
        while running:
            token = current[0]
            response = await request(process.port, "POST", "/decide", ROW, bearer(token))
            statuses.append((token, response.status))

    try:
        load = asyncio.ensure_future(caller())
        await asyncio.sleep(0.3)
        replace(tokens, f"svc {OLD}\nother {OTHER}\nsvc {NEW}\n")  # add the new token
        assert "2 callers (svc, other), 3 tokens" in await process.reload("reloaded")
        current[0] = NEW  # the caller moves to it
        await asyncio.sleep(0.3)
        replace(tokens, f"other {OTHER}\nsvc {NEW}\n")  # remove the old one
        assert "2 callers (other, svc), 2 tokens" in await process.reload("reloaded")
        await asyncio.sleep(0.3)
        running = False
        await load
        assert {status for _, status in statuses} == {200}, statuses
        assert {token for token, _ in statuses} == {OLD, NEW}
        old = await request(process.port, "POST", "/decide", ROW, bearer(OLD))
        assert (old.status, old.json["error"]["message"], old.headers[b"www-authenticate"]) == (
            401,
            "the bearer token is not one this server accepts",
            b'Bearer error="invalid_token"',
        )
        assert (await request(process.port, "POST", "/decide", ROW, bearer(OTHER))).status == 200
        metrics = await scrape(process.port)
        assert sample(metrics, "semif_reloads_total", file="tokens", outcome="ok") == 2
        assert sample(metrics, "semif_reloads_total", file="tokens", outcome="invalid") == 0
        served = sample(metrics, "semif_http_requests_total", caller="svc", status="200")
        assert served == len(statuses)  # every request of the rotation, old token or new, as svc
        named = {
            dict(labels)["caller"]
            for name, labels in metrics
            if name == "semif_http_requests_total"
        }
        assert named == {"svc", "other", "-"}  # no label for the new token: it is svc's
    finally:
        running = False
        await stop(process)


def bound(workloads: dict[str, Any]) -> str:
    return json.dumps({**MATCHING, "workloads": workloads})


# Table A fits only "none" for workload w, table B only "rotations": a request parsed under one and
# answered under the other would look up a temperature its table lacks (a 500), or show the other's.
TABLE_A = bound({"w": {"none": 1.25}})
TABLE_B = bound({"w": {"rotations": 3.5}})
NONE_BODY = {**ROW, "workload": "w"}
ROTATIONS_BODY = {**ROW, "workload": "w", "orderings": "rotations"}


async def test_under_load_each_response_sees_the_old_or_the_new_calibration_never_a_mix(
    tmp_path: Path,
) -> None:
    path = tmp_path / "calibration.json"
    replace(path, TABLE_A)
    process = await Process.start(SEMIF_CALIBRATION=str(path), SEMIF_STUB_DELAY_MS="150")
    answers: list[tuple[str, int, Any]] = []
    running = True

    async def caller(body: dict[str, Any], asks: str) -> None:
        while running:
            response = await request(process.port, "POST", "/decide", body)
            answers.append((asks, response.status, response.json))

    try:
        loads = [
            asyncio.ensure_future(caller(body, asks))
            for body, asks in [(NONE_BODY, "none"), (ROTATIONS_BODY, "rotations")] * 3
        ]
        shas = set()
        for table in (TABLE_B, TABLE_A, TABLE_B, TABLE_A, TABLE_B):
            await asyncio.sleep(0.4)  # requests queued behind the scorer on each side of a swap
            replace(path, table)
            await process.reload("reloaded (sha256")
            shas.add((await request(process.port, "GET", "/health")).json["calibration_sha256"])
        await asyncio.sleep(0.4)
        running = False
        await asyncio.gather(*loads)
    finally:
        running = False
        await stop(process)
    assert len(shas) == 2
    seen = {"none": 0, "rotations": 0}
    for asks, status, body in answers:
        if status == 422:  # this table has no temperature for the method asked: refused at parse
            assert "temperature" in body["error"]["message"], body
            continue
        assert status == 200, (
            body
        )  # a 500 here is a request parsed under one table, answered under the other
        shown = body["calibrated"] if asks == "none" else body["combined"]["calibrated"]
        assert shown["temperature"] == {"none": 1.25, "rotations": 3.5}[asks], body
        seen[asks] += 1
    assert seen["none"] and seen["rotations"], seen


async def test_a_file_that_fails_a_check_leaves_the_old_one_serving(tmp_path: Path) -> None:
    tokens, path = tmp_path / "tokens", tmp_path / "calibration.json"
    replace(tokens, f"svc {OLD}\n")
    replace(path, bound({"triage": {"none": 2.0}}))
    process = await Process.start(
        without=("SEMIF_API_TOKEN",),
        SEMIF_API_TOKENS_FILE=str(tokens),
        SEMIF_CALIBRATION=str(path),
        SEMIF_SYSTEMONE_WORKLOAD="triage",
    )
    try:
        sha = (await request(process.port, "GET", "/health")).json["calibration_sha256"]
        bad_tokens = [
            (
                f"svc {OLD}\n",
                0o644,
                f"SEMIF_API_TOKENS_FILE {tokens} is readable or writable by other",
            ),
            (
                f"svc {OLD}\nsvc {NEW}\nsvc {OTHER}\n",
                0o600,
                "line 3: the name already holds 2 tokens (lines 1, 2)",
            ),
            (f"svc {OLD}\nnew {OLD}\n", 0o600, "line 2: the token is line 1's too"),
            (f"svc {OLD} extra\n", 0o600, "line 1: 3 fields"),
            (f"svc {OLD}\nnew short\n", 0o600, "line 2: the token is shorter than 32"),
            ("# nobody\n", 0o600, "holds no caller"),
            (
                None,
                0o600,
                f"SEMIF_API_TOKENS_FILE {tokens} is unreadable: No such file or directory",
            ),
        ]
        bad_calibrations = [
            ("{not json", "is not valid JSON"),
            (bound({"triage": {"none": -1.0}}), "triage"),
            (
                json.dumps(
                    {
                        **json.loads(bound({"triage": {"none": 2.0}})),
                        "priors": {
                            "triage": {"4": {"prior": [0.9, 0.9, 0.9, 0.9], "decisions": 3}}
                        },
                    }
                ),
                "prior",
            ),
            (
                json.dumps({**json.loads(bound({"triage": {"none": 2.0}})), "revision": "r" * 40}),
                "bound to revision",
            ),
            (
                bound({"other": {"none": 2.0}}),
                "SEMIF_SYSTEMONE_WORKLOAD names 'triage', which SEMIF_CALIBRATION does not hold",
            ),
            (None, f"SEMIF_CALIBRATION: cannot read {str(path)!r}: No such file or directory"),
        ]
        for text, mode, reason in bad_tokens:
            if text is None:
                tokens.unlink()
            else:
                replace(tokens, text, mode)
            line = await process.reload("the callers are unchanged")
            assert reason in line, line
            assert OLD not in line and NEW not in line
            assert (await request(process.port, "POST", "/decide", ROW, bearer(OLD))).status == 200
        replace(tokens, f"svc {OLD}\n")
        for text, reason in bad_calibrations:
            if text is None:
                path.unlink()
            else:
                replace(path, text)
            line = await process.reload("the calibration is unchanged")
            assert reason in line, line
            health = (await request(process.port, "GET", "/health")).json
            assert health["calibration_sha256"] == sha and health["workloads"] == ["triage"]
            served = await request(
                process.port, "POST", "/decide", {**ROW, "workload": "triage"}, bearer(OLD)
            )
            assert served.json["calibrated"]["temperature"] == 2.0
        metrics = await scrape(process.port)
        # Each SIGHUP re-reads both files: the good one of the pair reloads, the bad one is kept out.
        assert sample(metrics, "semif_reloads_total", file="tokens", outcome="invalid") == len(
            bad_tokens
        )
        assert sample(metrics, "semif_reloads_total", file="calibration", outcome="invalid") == len(
            bad_calibrations
        )
        assert sample(metrics, "semif_calibration_info", sha256=sha) == 1
    finally:
        await stop(process)


async def test_with_the_one_token_sighup_reloads_the_calibration_only(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    replace(path, bound({"triage": {"none": 2.0}}))
    process = await Process.start(SEMIF_CALIBRATION=str(path))
    try:
        replace(path, bound({"triage": {"none": 4.0}}))
        process.proc.send_signal(signal.SIGHUP)
        assert "SEMIF_API_TOKEN, which is not reloadable" in await asyncio.wait_for(
            process.wait_for_line("not reloadable"), 10
        )
        await asyncio.wait_for(process.wait_for_line("reloaded (sha256"), 10)
        served = await request(process.port, "POST", "/decide", {**ROW, "workload": "triage"})
        assert served.json["calibrated"]["temperature"] == 4.0
        assert (await request(process.port, "POST", "/decide", ROW, bearer(TOKEN))).status == 200
        metrics = await scrape(process.port)
        assert sample(metrics, "semif_reloads_total", file="calibration", outcome="ok") == 1
        assert sample(metrics, "semif_reloads_total", file="tokens", outcome="ok") == 0
    finally:
        await stop(process)


async def test_a_sighup_while_draining_is_ignored_and_kills_nothing() -> None:
    process = await Process.start(SEMIF_STUB_DELAY_MS="1500", SEMIF_LOG_FLUSH_S="0")
    held = asyncio.ensure_future(request(process.port, "POST", "/decide", ROW))
    await asyncio.wait_for(process.in_flight(), 10)
    process.proc.send_signal(signal.SIGTERM)
    await asyncio.wait_for(process.wait_for_line("shutting down"), 10)
    process.proc.send_signal(signal.SIGHUP)
    await asyncio.wait_for(process.wait_for_line("SIGHUP while shutting down: ignored"), 10)
    assert (await held).status == 200  # the drain went on
    assert await process.exit_code(10) == 0
