"""`python -m bench cpu-dtype` on the real tiny model, in a child as an operator runs it: both
dtypes timed in alternation, the CPU named with its AMX flag as /proc/cpuinfo has it, and a
ratio that is the medians' own. Nothing here judges a time: the figures go to docs/models.md."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "bench-token-" + "0123456789abcdef" * 2


def test_it_times_both_dtypes_alternately_and_names_the_cpu(tiny_built: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "cpu-dtype", "--repeat", "3", "--row", "refund-intent"],
        cwd=ROOT,
        env={**os.environ, **tiny_built, "SEMIF_API_TOKEN": TOKEN, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    flags = Path("/proc/cpuinfo").read_text().split()
    assert report["cpu"]["amx_bf16"] == ("amx_bf16" in flags) and report["cpu"]["name"]
    assert (report["model"], report["revision"], report["row"]) == (
        tiny_built["SEMIF_MODEL"],
        tiny_built["SEMIF_REVISION"],
        "refund-intent",
    )
    assert report["torch_threads"] == 1
    seconds = report["seconds"]
    assert sorted(seconds) == ["bfloat16", "float32"]
    assert all(len(times) == 3 and min(times) > 0 for times in seconds.values())
    medians = {dtype: statistics.median(times) for dtype, times in seconds.items()}
    ratio = medians["float32"] / medians["bfloat16"]  # from times rounded to the microsecond
    assert report["float32_over_bfloat16"] == pytest.approx(ratio, abs=0.002)
