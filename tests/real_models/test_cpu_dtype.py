"""SEMIF_CPU_DTYPE on the real tiny model: bfloat16 is served when the operator sets it (never
otherwise), and a calibration file fitted in one dtype stops startup under the other.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from semif_serve.engine import scorer_package
from semif_serve.engine.torch_scorer import TorchScorer
from tests.fakes import TOKEN
from tests.served_process import Process, replace
from tests.wire_client import request


def test_bfloat16_is_served_only_when_set(tiny_settings) -> None:
    import torch

    scorer = TorchScorer(dataclasses.replace(tiny_settings, cpu_dtype="bfloat16"))
    scorer.load()
    assert scorer.health()["dtype"] == "bfloat16"
    model = scorer._require_loaded().model
    assert {parameter.dtype for parameter in model.parameters()} == {torch.bfloat16}
    row = {
        "id": "d",
        "state": {"person_said": "fine"},
        "question": "Is the person upset?",
        "options": [{"id": "yes", "description": "Yes"}, {"id": "no", "description": "No"}],
    }
    assert sum(scorer.score(row)["probabilities"]) == pytest.approx(1.0)
    assert TorchScorer(tiny_settings).health()["dtype"] == "float32"  # the default


def test_a_file_fitted_in_float32_stops_a_bfloat16_server_naming_both(
    tiny_built: dict[str, str], tmp_path: Path
) -> None:
    document = {
        "model": tiny_built["SEMIF_MODEL"],
        "revision": tiny_built["SEMIF_REVISION"],
        "prompt_version": scorer_package.resolve("fastjev").direct.PROMPT_VERSION,
        "workloads": {"triage": {"none": 1.5}},
    }  # no "dtype": fitted in float32
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(document))
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("SEMIF_")},
        **tiny_built,
        "SEMIF_API_TOKEN": TOKEN,
        "SEMIF_CALIBRATION": str(path),
        "SEMIF_CPU_DTYPE": "bfloat16",
    }
    done = subprocess.run(
        [sys.executable, "-m", "semif_serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr  # as any other invalid setting, before the model loads
    assert done.stderr.strip().splitlines() == [
        "semif-serve: SEMIF_CALIBRATION is bound to dtype 'float32', but the served dtype "
        "(SEMIF_CPU_DTYPE on the CPU) is 'bfloat16'"
    ]


async def test_a_reload_checks_the_served_dtype_as_startup_does(
    tiny_built: dict[str, str], tmp_path: Path
) -> None:
    """SIGHUP re-reads SEMIF_CALIBRATION under startup's binding check, the served dtype included:
    a bfloat16 server refuses a file fitted in float32 and takes one fitted in bfloat16."""
    bound = {
        "model": tiny_built["SEMIF_MODEL"],
        "revision": tiny_built["SEMIF_REVISION"],
        "prompt_version": scorer_package.resolve("fastjev").direct.PROMPT_VERSION,
        "dtype": "bfloat16",
    }
    path = tmp_path / "calibration.json"
    replace(path, json.dumps({**bound, "workloads": {"triage": {"none": 1.5}}}))
    process = await Process.start(
        **tiny_built, SEMIF_CALIBRATION=str(path), SEMIF_CPU_DTYPE="bfloat16"
    )
    try:
        float32 = {key: value for key, value in bound.items() if key != "dtype"}
        replace(path, json.dumps({**float32, "workloads": {"triage": {"none": 2.5}}}))
        refused = await process.reload("the calibration is unchanged")
        assert refused.rstrip().endswith(
            "SEMIF_CALIBRATION is bound to dtype 'float32', but the served dtype "
            "(SEMIF_CPU_DTYPE on the CPU) is 'bfloat16'"
        ), refused
        replace(path, json.dumps({**bound, "workloads": {"triage": {"none": 2.5}}}))
        await process.reload("reloaded (sha256")
        health = (await request(process.port, "GET", "/health", headers=[])).json
        assert health["calibration"]["workloads"]["triage"] == {"none": 2.5}, health
    finally:
        process.proc.send_signal(signal.SIGTERM)
        assert await process.exit_code(30) == 0
