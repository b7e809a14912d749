"""The peer server of `python -m bench openloop`: fastjev's own System One server, on the CPU.

Rules: this module runs fastjev's CLI (`fastjev.server.main`: its argument checks, its
scorer, its `SystemOneService`, its FastAPI app from `fastjev.http.create_app`, and
`uvicorn.run` with one worker) unchanged, and copies none of fastjev's code. The one
thing it replaces is the model loader: fastjev's `load_causal_model` accepts CUDA or
MPS only (and places weights with `device_map`, which needs `accelerate`), so before
the CLI runs, that name is pointed at semif-serve's own loader (`torch_scorer.load_model`:
the same pinned snapshot from the local cache, float32 on the CPU). Both servers
therefore score with the same weights on the same device; fastjev scores every
question with its own `direct.score` call, as its CLI's torch backend does.

It runs from the bench environment: the FastAPI and uvicorn versions are this
environment's (the bench extra's), not the pins of fastjev's `api` extra; `versions()`
says which ran. Usage (what bench/common/procs.peer_fastjev runs):

    python -m bench.load.peer_fastjev --port 8001 --model ID --revision SHA

with the bearer in SEMIF_API_TOKEN and the snapshot found through HF_HOME.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import version
from typing import Any

SERVED_MODEL = "smollm2-135m-instruct"  # fastjev refuses a served name that impersonates Jev
HEALTH = "/healthz"


def versions() -> dict[str, str]:
    """What serves the peer here, and what fastjev's `api` extra would pin."""
    from importlib.metadata import requires

    pins = sorted(r.split(";")[0] for r in requires("fastjev") or () if 'extra == "api"' in r)
    return {
        "fastjev": version("fastjev"),
        "fastapi": version("fastapi"),
        "uvicorn": version("uvicorn"),
        "fastjev_api_extra_pins": ", ".join(pins),
    }


def load_on_cpu(
    source: str, revision: str, device: str = "auto", dtype: str = "float32"
) -> tuple[Any, Any, dict[str, Any]]:
    """fastjev's loader's signature over semif-serve's loader, on the CPU whatever `device` says."""
    import torch

    from semif_serve import config
    from semif_serve.engine import torch_scorer

    settings = config.Settings(
        api_token="unused" * 8, model=source, revision=revision, verify_weights="presence"
    )
    return torch_scorer.load_model(settings, "cpu", dtype, torch)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load.peer_fastjev", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--revision", required=True)
    args = parser.parse_args(argv)
    from fastjev import server
    from fastjev._runtime import core

    core.load_causal_model = load_on_cpu  # the one replacement (see the module's rules)
    sys.argv = [
        "fastjev-server",
        "--backend",
        "torch",
        "--dtype",
        "float32",
        "--model",
        args.model,
        "--revision",
        args.revision,
        "--served-model",
        SERVED_MODEL,
        "--served-model-description",
        "SmolLM2-135M-Instruct on the CPU, served by fastjev (bench peer)",
        "--served-model-release-date",
        "2024-11-01",
        "--host",
        "127.0.0.1",
        "--port",
        str(args.port),
        "--api-key-env",
        "SEMIF_API_TOKEN",
    ]
    server.main()


if __name__ == "__main__":
    main()
