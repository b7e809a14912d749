"""`python -m bench cpu-dtype`: float32 against bfloat16 on this host's CPU, side by side.

SEMIF_CPU_DTYPE is the operator's choice because the answer depends on the CPU (AMX-BF16 makes
bfloat16 faster, its absence slower). This loads the model the environment's settings name
(`set -a; . <(semif-serve reading-model)` first) once per dtype, then times one scorer call
of the same row at a time, alternating the two copies ABBA so the load of a shared machine
falls on both alike, and prints one JSON document: the CPU's name, whether it has AMX-BF16,
the median call per dtype and their ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from semif_serve import config
from semif_serve.engine.torch_scorer import TorchScorer

ROWS = Path(__file__).resolve().parents[1] / "data" / "rows.jsonl"
DTYPES = ("float32", "bfloat16")


def cpu() -> dict[str, Any]:
    """The CPU's name and the flags that decide the question, from /proc/cpuinfo."""
    name, flags = "", set()
    with open("/proc/cpuinfo", encoding="utf-8") as info:
        for line in info:
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not name:
                name = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    return {"name": name, "amx_bf16": "amx_bf16" in flags, "avx512_bf16": "avx512_bf16" in flags}


def alternate(
    scorers: dict[str, TorchScorer], row: dict[str, Any], repeat: int
) -> dict[str, list[float]]:
    """Seconds per scorer call, in ABBA order after one warm-up call each."""
    for scorer in scorers.values():
        scorer.score(row)
    seconds: dict[str, list[float]] = {dtype: [] for dtype in scorers}
    for round_ in range(repeat):
        for dtype in DTYPES if round_ % 2 == 0 else DTYPES[::-1]:
            started = time.perf_counter()
            scorers[dtype].score(row)
            seconds[dtype].append(time.perf_counter() - started)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench cpu-dtype", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--repeat", type=int, default=6, help="timed calls per dtype (default 6)")
    parser.add_argument(
        "--row", default=None, help="the id of the bench row to score (default: the first)"
    )
    args = parser.parse_args(argv)
    # No server runs, so no caller needs a token: where none is set, a placeholder passes
    # config.load's check.
    env = dict(os.environ)
    if not env.keys() & {"SEMIF_API_TOKEN", "SEMIF_API_KEY", "SEMIF_API_TOKENS_FILE"}:
        env["SEMIF_API_TOKEN"] = "cpu-dtype-" + "0" * 32
    settings = dataclasses.replace(config.load(env), device="cpu")
    rows = [json.loads(line) for line in ROWS.read_text().splitlines() if line.strip()]
    row = next((r for r in rows if args.row in (None, r["id"])), None)
    if row is None:
        parser.error(f"--row {args.row!r}: no such row in {ROWS}")
    load_before = os.getloadavg()[0]
    scorers = {}
    for dtype in DTYPES:
        scorers[dtype] = TorchScorer(dataclasses.replace(settings, cpu_dtype=dtype))
        scorers[dtype].load()
    seconds = alternate(scorers, row, args.repeat)
    medians = {dtype: statistics.median(times) for dtype, times in seconds.items()}
    import torch

    print(
        json.dumps(
            {
                "cpu": cpu(),
                "model": settings.model,
                "revision": settings.revision,
                "row": row["id"],
                "torch_threads": torch.get_num_threads(),
                "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                "seconds": {
                    dtype: [round(s, 6) for s in times] for dtype, times in seconds.items()
                },
                "median_s": {dtype: round(median, 6) for dtype, median in medians.items()},
                "float32_over_bfloat16": round(medians["float32"] / medians["bfloat16"], 3),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
