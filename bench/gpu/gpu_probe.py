"""What only an in-process look at torch can show, for bench/gpu/gpu_check.py: `python -m bench.gpu.gpu_probe facts|cap`.

Rules: this is the one bench module of the GPU check that imports torch, and it
runs as a child process, so a memory cap set here never reaches the check's own
process or the servers it starts. It prints one JSON object on stdout and
judges nothing: the orchestrator (`bench/gpu/gpu_check.py`) decides pass or fail.
It calls the product's own code (`config.load`, `TorchScorer.load`) and never
re-implements a product rule.

Theory of operation.
* `facts`: the torch build and the card: CUDA availability, device name and
  capability (`sm_XY`), the arch list the build carries, total and free memory,
  the CPU thread count. On a machine without CUDA it says so and stops there.
* `cap`: the settings come from the environment exactly as the server reads
  them (`SEMIF_VRAM_CAP_GIB`, `SEMIF_DEVICE`, the model's settings), and
  `TorchScorer.load()` runs the server's own startup (arch check, cap, weights,
  warm-up). Then one allocation that fits under the cap (half the room left)
  and one of the cap's full size (over it, since the model already holds some
  of it) are attempted. On a card with far more free memory than the cap, a
  refusal of the second can only come from the cap.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

GIB = 1 << 30
MIB = 1 << 20


def facts() -> dict[str, Any]:
    """The torch build and, when CUDA is available, the card it sees."""
    import torch

    found: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "torch_threads": torch.get_num_threads(),
    }
    if not found["cuda_available"]:
        return found
    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    free, total = torch.cuda.mem_get_info(index)
    arch = f"sm_{major}{minor}"
    found.update(
        {
            "device_name": torch.cuda.get_device_name(index),
            "capability": arch,
            "arch_list": torch.cuda.get_arch_list(),
            "arch_in_build": arch in torch.cuda.get_arch_list(),
            "device_count": torch.cuda.device_count(),
            "total_bytes": total,
            "free_bytes": free,
        }
    )
    return found


def _try_alloc(torch: Any, size: int, device: str) -> dict[str, Any]:
    """Allocate `size` bytes on device and free them; what happened, never raising for an OOM."""
    try:
        block = torch.empty(size, dtype=torch.uint8, device=device)
    except torch.cuda.OutOfMemoryError as error:
        return {
            "bytes": size,
            "allocated": False,
            "error": str(error).strip().splitlines()[0][:300],
        }
    del block
    torch.cuda.empty_cache()
    return {"bytes": size, "allocated": True}


def cap() -> dict[str, Any]:
    """Start the engine as the server does (cap included), then try under and over the cap."""
    from semif_serve import config
    from semif_serve.engine.torch_scorer import TorchScorer

    settings = config.load()
    if settings.vram_cap_gib is None:
        raise SystemExit("gpu_probe cap: SEMIF_VRAM_CAP_GIB is not set")
    scorer = TorchScorer(settings)
    scorer.load()
    import torch

    device = scorer.health()["device"]
    cap_bytes = int(settings.vram_cap_gib * GIB)
    reserved = torch.cuda.memory_reserved(device)
    free, total = torch.cuda.mem_get_info(device)
    under = max((cap_bytes - reserved) // 2, MIB)
    return {
        "device": device,
        "cap_gib": settings.vram_cap_gib,
        "cap_bytes": cap_bytes,
        "reserved_after_load": reserved,
        "card_free_bytes": free,
        "card_total_bytes": total,
        "under_cap": _try_alloc(torch, under, device),
        "over_cap": _try_alloc(torch, cap_bytes, device),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.gpu.gpu_probe", description=__doc__.splitlines()[0]
    )
    parser.add_argument("what", choices=("facts", "cap"))
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    found = facts() if args.what == "facts" else cap()
    print(json.dumps(found))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
