"""`python -m bench ...` run as a user runs it: from the repository root, in a child process, with the
server's token in its environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import procs


def run(token: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """One bench command's exit status and output; never raises on a non-zero status."""
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=procs.ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "SEMIF_API_TOKEN": token},
        timeout=timeout,
        check=False,
    )


LABELLED = procs.ROOT / "bench" / "data" / "labelled.jsonl"


def fitted_priors(token: str, out: Path) -> dict[str, Any]:
    """`bench prior` through a stub server on the fit side of our labelled set: the priors and
    thresholds it wrote, per workload, for a test's own calibration file."""
    with procs.semif_serve(procs.stub_env(), token, log_dir=out) as fitting:
        done = run(
            token, "prior", "--url", fitting.url, "--data", str(LABELLED), "--split", "fit",
            "--out", str(out / "fitted.json"), timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    priors: dict[str, Any] = json.loads((out / "fitted.json").read_text())["priors"]
    return priors
