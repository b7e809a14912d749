"""`python -m bench verify-cost`: what the pre-load snapshot check costs at startup.

It times semif_serve.engine.snapshot_verify.verify on the tiny model and on synthetic
snapshots of the given sizes (one random `model.safetensors` published through
the builders' own publisher, so the layout is the real hub-cache one), each in
both modes and, for the hash mode, with the blob's pages evicted first
(posix_fadvise DONTNEED: a cold read from disk, no root needed) and warm. It
prints one JSON document with the machine's conditions, the medians, and the
linear estimate for a snapshot of --estimate-gb (Qwen3.5-4B: 8 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from semif_serve.builders import snapshot
from semif_serve.engine import snapshot_verify

MB = 1_000_000


def _evict(hub: Path) -> None:
    """Drop the cache's blobs from the page cache, so the next read comes from disk."""
    for blob in hub.rglob("blobs/*"):
        with open(blob, "rb") as handle:
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def _median_seconds(
    run: Callable[[], Any], repeat: int, before: Callable[[], None] = lambda: None
) -> float:
    times = []
    for _ in range(repeat):
        before()
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(repo_id: str, revision: str, hub: Path, repeat: int) -> dict[str, Any]:
    """Median seconds per mode; the hash mode cold (evicted) and warm."""

    def verify(hash_blobs: bool) -> snapshot_verify.Verified:
        return snapshot_verify.verify(repo_id, revision, hash_blobs=hash_blobs, cache=hub)

    size = verify(True).hashed_bytes  # also warms the page cache
    warm = _median_seconds(lambda: verify(True), repeat)
    cold = _median_seconds(lambda: verify(True), repeat, before=lambda: _evict(hub))
    presence = _median_seconds(lambda: verify(False), repeat)
    return {
        "bytes": size,
        "hash_warm_s": round(warm, 4),
        "hash_cold_s": round(cold, 4),
        "presence_s": round(presence, 5),
        "hash_warm_mb_per_s": round(size / MB / warm, 1),
        "hash_cold_mb_per_s": round(size / MB / cold, 1),
    }


def conditions() -> dict[str, Any]:
    """What the numbers were measured under (the machine is shared)."""
    return {
        "nproc": os.cpu_count(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "hash_threads": min(snapshot_verify.MAX_HASH_THREADS, os.cpu_count() or 1),
        "chunk_bytes": snapshot_verify.CHUNK,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench verify-cost", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--sizes-mb", type=int, nargs="*", default=[540], help="synthetic weight file sizes (MB)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--estimate-gb", type=float, default=8.0)
    parser.add_argument("--no-tiny", action="store_true", help="skip the tiny model (needs torch)")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"conditions": conditions(), "snapshots": {}}
    with tempfile.TemporaryDirectory(prefix="verify-cost-") as scratch:
        out = Path(scratch)
        if not args.no_tiny:
            from semif_serve.builders import tiny

            built = tiny.build(out / "tiny")
            report["snapshots"]["tiny"] = measure(
                built["SEMIF_MODEL"],
                built["SEMIF_REVISION"],
                Path(built["HF_HUB_CACHE"]),
                args.repeat,
            )
        for size in args.sizes_mb:
            files = {"config.json": b"{}", "model.safetensors": os.urandom(size * MB)}
            built = snapshot.publish(
                out / f"s{size}", f"synthetic/w{size}", files, label="verify-cost"
            )
            del files
            report["snapshots"][f"{size}MB"] = measure(
                built["SEMIF_MODEL"],
                built["SEMIF_REVISION"],
                Path(built["HF_HUB_CACHE"]),
                args.repeat,
            )
    largest = max(
        (cell for name, cell in report["snapshots"].items() if name != "tiny"),
        key=lambda c: c["bytes"],
        default=None,
    )
    if largest is not None:
        gb = args.estimate_gb
        report["estimate"] = {
            "gb": gb,
            "hash_warm_s": round(gb * 1000 / largest["hash_warm_mb_per_s"], 1),
            "hash_cold_s": round(gb * 1000 / largest["hash_cold_mb_per_s"], 1),
            "basis": "linear in bytes from the largest synthetic snapshot, one file",
        }
    report["conditions"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=1))
    return 0
