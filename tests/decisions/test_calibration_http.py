"""Calibrated averaged views and the bound calibration file on a real socket (extensions).

In-process servers on loopback for the views and refusals; real `python -m
semif_serve` processes for the startup binding check (stub scorer: no torch).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.common import procs
from bench.common.loadgen import call
from semif_serve.decisions import calibration_file
from tests.calibration_files import MATCHING, bound_path
from tests.fake_scorer import biased
from tests.request_bodies import FOUR, ROW
from tests.wire_client import TOKEN, request

BINDING = calibration_file.Binding("semif-serve/fake", "f" * 40, "direct-options-v1")
TABLE = calibration_file.Table(
    {"triage": {"none": 2.0, "rotations": 1.5}, "routing": {"all": 0.5}}, BINDING
)


def by_id(result: dict[str, Any]) -> dict[str, float]:
    """One ordering's log-softmax of its option_logits, keyed by option id (computed here, independently)."""
    logits = result["option_logits"]
    top = max(logits)
    lse = top + math.log(sum(math.exp(value - top) for value in logits))
    return {oid: value - lse for oid, value in zip(result["option_ids"], logits)}


def expected_calibrated(body: dict[str, Any], temperature: float) -> list[float]:
    per = [by_id(result) for result in body["orderings"]]
    mean = [sum(logp[oid] for logp in per) / len(per) for oid in body["option_ids"]]
    weights = [math.exp((value - max(mean)) / temperature) for value in mean]
    return [weight / sum(weights) for weight in weights]


async def test_workload_with_orderings_adds_combined_calibrated_and_touches_nothing_native(
    start_server, fake
) -> None:
    server = await start_server(fake, calibration=TABLE)
    fake.logits = biased
    body = {**ROW, "options": FOUR, "orderings": "rotations"}
    plain = await request(server.port, "POST", "/decide", body)
    calibrated = await request(server.port, "POST", "/decide", {**body, "workload": "triage"})
    assert plain.status == calibrated.status == 200
    answered = calibrated.json
    view = answered["combined"].pop("calibrated")
    assert answered == plain.json  # every native number and the combined view, untouched
    assert (
        view["workload"] == "triage"
        and view["method"] == "rotations"
        and view["temperature"] == 1.5
    )
    assert view["probabilities"] == pytest.approx(expected_calibrated(plain.json, 1.5), abs=1e-12)
    top = plain.json["option_ids"].index(plain.json["combined"]["top"])
    assert max(range(4), key=view["probabilities"].__getitem__) == top
    # T > 1 flattens: the top's calibrated probability is below its combined one.
    assert view["probabilities"][top] < plain.json["combined"]["probabilities"][top]
    assert [kind for kind, _ in fake.calls] == ["shared", "shared"]


async def test_a_method_without_a_temperature_is_the_contracts_422_naming_the_method(
    start_server, fake
) -> None:
    server = await start_server(fake, calibration=TABLE)
    refused = await request(
        server.port,
        "POST",
        "/decide",
        {**ROW, "options": FOUR, "orderings": "all", "workload": "triage"},
    )
    assert refused.status == 422 and refused.json["error"]["code"] == "invalid_request"
    message = refused.json["error"]["message"]
    assert "'triage'" in message and "'all'" in message and "none, rotations" in message
    # A workload fitted for "all" only has no temperature for a plain decision either.
    plain = await request(server.port, "POST", "/decide", {**ROW, "workload": "routing"})
    assert plain.status == 422 and "'none'" in plain.json["error"]["message"]
    assert fake.calls == []  # a refused request never reaches the scorer


async def test_the_plain_table_still_refuses_workload_with_orderings(start_server, fake) -> None:
    server = await start_server(fake, calibration={"triage": 2.0})
    refused = await request(
        server.port, "POST", "/decide", {**ROW, "orderings": "rotations", "workload": "triage"}
    )
    assert refused.status == 422 and "'rotations'" in refused.json["error"]["message"]
    fine = await request(server.port, "POST", "/decide", {**ROW, "workload": "triage"})
    assert fine.status == 200 and fine.json["calibrated"]["temperature"] == 2.0
    assert len(fake.calls) == 1


async def test_a_shared_request_calibrates_each_decision_with_its_own_method(
    start_server, fake
) -> None:
    server = await start_server(fake, calibration=TABLE)
    fake.logits = biased
    decisions = [
        {"id": "p", "question": "Q1?", "options": FOUR},
        {"id": "r", "question": "Q2?", "options": FOUR, "orderings": "rotations"},
    ]
    response = await request(
        server.port,
        "POST",
        "/decide/shared",
        {"state": "s", "decisions": decisions, "workload": "triage"},
    )
    assert response.status == 200
    plain, averaged = response.json["results"]
    assert (
        plain["calibrated"]["temperature"] == 2.0 and "method" not in plain["calibrated"]
    )  # the contract's shape
    assert averaged["combined"]["calibrated"]["method"] == "rotations"
    assert averaged["combined"]["calibrated"]["probabilities"] == pytest.approx(
        expected_calibrated(averaged, 1.5), abs=1e-12
    )
    decisions.append({"id": "third", "question": "Q3?", "options": FOUR[:3], "orderings": "all"})
    refused = await request(
        server.port,
        "POST",
        "/decide/shared",
        {"state": "s", "decisions": decisions, "workload": "triage"},
    )
    assert (
        refused.status == 422
        and "'third'" in refused.json["error"]["message"]
        and "'all'" in refused.json["error"]["message"]
    )
    assert len(fake.calls) == 1


async def test_health_lists_each_workload_with_its_methods_and_the_binding(
    start_server, fake
) -> None:
    server = await start_server(fake, calibration=TABLE)
    health = (await request(server.port, "GET", "/health", headers=[])).json
    assert health["workloads"] == ["routing", "triage"]
    assert health["calibration"] == {
        "binding": {
            "model": "semif-serve/fake",
            "revision": "f" * 40,
            "prompt_version": "direct-options-v1",
            "dtype": "float32",  # the table names none, so float32
        },
        "fitted": None,
        "workloads": {"routing": {"all": 0.5}, "triage": {"none": 2.0, "rotations": 1.5}},
        "priors": {},
    }


# -- startup, in a real process -------------------------------------------------------


def stub_env(path: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SEMIF_")}
    return {
        **env,
        "SEMIF_API_TOKEN": TOKEN,
        "SEMIF_SCORER": "stub",
        "SEMIF_CALIBRATION": path,
        "SEMIF_HOST": "127.0.0.1",
    }


@pytest.mark.parametrize(
    "key,variable",
    [
        ("model", "SEMIF_MODEL"),
        ("revision", "SEMIF_REVISION"),
        ("prompt_version", "prompt_version"),
    ],
)
def test_a_mismatched_binding_refuses_startup_with_one_line_naming_it(
    tmp_path: Path, key: str, variable: str
) -> None:
    env = stub_env(bound_path(tmp_path, **{key: "fitted-elsewhere"}))
    done = subprocess.run(
        [sys.executable, "-m", "semif_serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr  # as any other invalid setting
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("semif-serve: SEMIF_CALIBRATION") and variable in line
    assert "'fitted-elsewhere'" in line and repr(MATCHING[key]) in line


def test_a_matching_binding_serves_and_reports_itself(tmp_path: Path) -> None:
    env = stub_env(bound_path(tmp_path))
    with procs.semif_serve(env, TOKEN, ready_timeout=60.0, log_dir=tmp_path) as server:
        health = asyncio.run(call(server.target, "GET", "/health", timeout=10.0))
        assert health.status == 200
        described = json.loads(health.body)["calibration"]
        assert described["binding"] == {**MATCHING, "dtype": "float32"}
        assert described["workloads"] == {"triage": {"none": 2.0, "rotations": 1.5}}
        body = json.dumps(
            {**ROW, "options": FOUR, "orderings": "rotations", "workload": "triage"}
        ).encode()
        decided = asyncio.run(call(server.target, "POST", "/decide", body, timeout=10.0))
        assert decided.status == 200
        assert json.loads(decided.body)["combined"]["calibrated"]["temperature"] == 1.5
