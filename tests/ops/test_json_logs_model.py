"""SEMIF_LOG_FORMAT=json holds while a real model loads: transformers' own stderr handler
and its progress bars would otherwise write text lines (the container check found
"Loading weights: 0%|" and "[transformers] ... falling back" lines in the image's log).

The real process, the real tiny model through the production loading path: every line
on stderr from start to a drained shutdown parses as one JSON object, and none is
transformers' advice to install a CUDA kernel, which cannot apply on the CPU.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.common.procs import free_port
from deploy.container.probe import status
from semif_serve.engine.torch_scorer import CudaKernelAdvice
from tests.wire_client import TOKEN


def test_every_stderr_line_is_json_through_a_model_load(
    tiny_built: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    health = f"http://127.0.0.1:{port}/health"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SEMIF_", "HF_", "TRANSFORMERS_"))
    }
    env.update(
        {
            key: tiny_built[key]
            for key in (
                "HF_HOME",
                "HF_HUB_CACHE",
                "HF_HUB_OFFLINE",
                "SEMIF_MODEL",
                "SEMIF_REVISION",
            )
        }
    )
    env.update(
        SEMIF_API_TOKEN=TOKEN,
        SEMIF_LOG_FORMAT="json",
        SEMIF_SCORER="fastjev",
        SEMIF_DEVICE="cpu",
        SEMIF_PORT=str(port),
        OMP_NUM_THREADS="1",
    )
    stderr = tmp_path / "stderr"
    with stderr.open("w") as sink:
        process = subprocess.Popen([sys.executable, "-m", "semif_serve"], env=env, stderr=sink)
    try:
        deadline = time.monotonic() + 240
        while status(health) != 200 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)  # not probe.wait: it would poll on for 240 s after the server died
        assert status(health) == 200, stderr.read_text()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, stderr.read_text()
    finally:
        process.kill()
    lines = stderr.read_text().splitlines()
    assert any("listening on" in line for line in lines), lines
    for line in lines:
        assert isinstance(json.loads(line), dict), line
    assert [line for line in lines if any(name in line for name in CudaKernelAdvice.PACKAGES)] == []
