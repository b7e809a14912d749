"""One prepared run that proves the CUDA path on a real card: `bench/gpu/gpu_check.sh` (or `python -m bench gpu-check`).

Rules: bench-only, never imported by the product. It orchestrates and judges;
it measures nothing itself that a bench tool already measures. Servers start
through `bench/common/procs.py`, the acceptance checks (`vram`, `speed`, `parity`) run
as `python -m bench <check>` children, in-process torch facts and the cap probe
come from `bench/gpu/gpu_probe.py` (a child, so a cap never leaks into this
process), and this module imports no torch. Every step writes one JSON record
`{check, status, reason, figures, when}` as one line of `records.jsonl` in the
output folder (one file, not one per check: the device tool brings back at most
8 files), and `summary.txt` names each check's status and why. A step that
crashes becomes a `failed` record; the next step still runs.

Statuses: `passed`; `failed`; `skipped` (this device cannot show it, it was not
asked for, or a step it needs did not run; the reason says which); and
`inconclusive` (the step ran but could not exercise what it tests, such as a
request that never rose above the release slack). The exit status is 1 when any
check failed, else 0.

Theory of operation, in order (the device is `cuda` unless `--dry-run` or
`SEMIF_DEVICE=cpu`; on the CPU every step still runs, and what only CUDA can
show is skipped with the reason):
1. `environment`: the torch build, the card, its `sm_XY` and the build's arch
   list, threads, `nproc` and load; `build_tiny`: `semif-serve tiny-model`.
2. Server A (uncapped, tiny model): `startup` (the server's own arch check let
   it start, and `/health` says `cuda:0`); `vram` (the acceptance check's peak
   and the cap it derives; first, so the process peak is that request's);
   `speed` (21 criteria shared against 21 x /decide, p50 over N);
   `parity_tiny` (served against in-process scoring on the same device);
   `large_shared`: /decide/shared over a ~3800-token state with 64, 128, ...
   decisions, doubling until the request's peak rises `--target-gib` over the
   post-warm-up baseline (or the decision or time bound), checking after each
   that reserved memory is back to at most baseline + 512 MiB (INV-4).
3. `vram_cap`: in a child, the engine's own startup with a cap set, then one
   allocation under the cap (must succeed) and one of the cap's size (must be
   refused) on a card with far more free memory than that.
4. Server B (capped at A's start-up peak plus half the large request's rise,
   at most 1 GiB): `oom_burst`: the large request must answer 503
   `out_of_memory`, reserved memory must be back to at most baseline + 512 MiB,
   and the next ordinary request must answer 200. The memory bound is only
   probative when the cap leaves more than 512 MiB above the baseline; the
   record says whether it did.
5. `parity_smollm2`: only when this checkout has `semif-serve small-model`, it
   was asked for, and the model builds here (offline); else skipped, saying why.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.acceptance import acceptance
from bench.common import datasets, procs
from bench.common.loadgen import TOKEN_ENV, Response, Target, call
from bench.common.report import machine, markdown_table, note, now
from semif_serve.engine.torch_scorer import RELEASE_SLACK_BYTES

GIB = 1 << 30
MIB = 1 << 20
PASSED, FAILED, SKIPPED, INCONCLUSIVE = "passed", "failed", "skipped", "inconclusive"
# The cap's room above the start-up peak: half the large request's rise, within these bounds.
MIN_HEADROOM = 64 * MIB
MAX_HEADROOM = 1 * GIB
LOG_TAIL_BYTES = 200_000
# The speed check's /decide/shared carries this many criteria: the server must accept them.
SPEED_CRITERIA = 21
MODELS = ("tiny", "smollm2")


# -- the plan ------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What to run and how big; CUDA and the CPU dry run differ only in sizes and what is skipped."""

    out: Path
    device: str
    models: frozenset[str]
    speed_n: int
    vram_tokens: int
    shared_tokens: int
    decisions_start: int
    decisions_max: int
    target_bytes: int
    growth_budget_s: float
    budget_s: float

    @property
    def cuda(self) -> bool:
        return self.device != "cpu"

    def describe(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "models": sorted(self.models),
            "speed_n": self.speed_n,
            "vram_tokens": self.vram_tokens,
            "shared_tokens": self.shared_tokens,
            "decisions": [self.decisions_start, self.decisions_max],
            "target_gib": self.target_bytes / GIB,
            "growth_budget_s": self.growth_budget_s,
            "budget_s": self.budget_s,
        }


# Defaults per device: the card gets the acceptance sizes, the CPU dry run the smallest that exercise every step.
# On the card the whole run is held to 5 minutes, so that one rerun still fits the session's 15 device minutes.
DEFAULTS = {
    "cuda": {
        "speed_n": 5,
        "vram_tokens": 4096,
        "shared_tokens": 3800,
        "decisions_start": 64,
        "decisions_max": 4096,
        "target_gib": 1.5,
        "growth_budget_s": 100.0,
        "budget_s": 300.0,
        "models": "tiny,smollm2",
    },
    "cpu": {
        "speed_n": 3,
        "vram_tokens": 512,
        "shared_tokens": 256,
        "decisions_start": 4,
        "decisions_max": 8,
        "target_gib": 1.5,
        "growth_budget_s": 60.0,
        "budget_s": 300.0,
        "models": "tiny",
    },
}


def plan_from(args: argparse.Namespace) -> Plan:
    device = "cpu" if args.dry_run or os.environ.get("SEMIF_DEVICE") == "cpu" else "cuda"

    def pick(name):
        return getattr(args, name) if getattr(args, name) is not None else DEFAULTS[device][name]

    models = frozenset(m for m in pick("models").split(",") if m)
    unknown = models - set(MODELS)
    if unknown:
        raise SystemExit(
            f"gpu_check: unknown model(s) {sorted(unknown)}; choose from {', '.join(MODELS)}"
        )
    out = args.out or Path(os.environ.get("OUT") or procs.ROOT / "bench" / "results" / "gpu_check")
    return Plan(
        Path(out),
        device,
        models,
        pick("speed_n"),
        pick("vram_tokens"),
        pick("shared_tokens"),
        pick("decisions_start"),
        pick("decisions_max"),
        int(pick("target_gib") * GIB),
        pick("growth_budget_s"),
        pick("budget_s"),
    )


# -- pure judgements (unit-tested) --------------------------------------------------------


def cap_plan(startup_peak: int, rise: int) -> tuple[float, int, bool]:
    """The burst server's SEMIF_VRAM_CAP_GIB: start-up peak plus half the large request's rise.

    Returns (cap in GiB rounded up to a MiB, the headroom, whether the memory bound is
    probative: only a cap more than the slack above the baseline lets a kept burst show).
    """
    headroom = max(MIN_HEADROOM, min(MAX_HEADROOM, rise // 2))
    cap_bytes = math.ceil((startup_peak + headroom) / MIB) * MIB
    return cap_bytes / GIB, headroom, headroom > RELEASE_SLACK_BYTES


def release_verdict(baseline: int, peak: int, reserved_after: list[int]) -> tuple[str, str]:
    """INV-4 after successful calls: reserved back to <= baseline + slack, and was the slack ever exceeded?"""
    worst = max(reserved_after)
    bound = baseline + RELEASE_SLACK_BYTES
    if worst > bound:
        return (
            FAILED,
            f"reserved stayed at {worst / MIB:.0f} MiB after a call, over baseline + 512 MiB = {bound / MIB:.0f} MiB",
        )
    if peak - baseline <= RELEASE_SLACK_BYTES:
        return INCONCLUSIVE, (
            f"the largest request peaked only {(peak - baseline) / MIB:.0f} MiB over the baseline, within "
            "the 512 MiB slack, so the release was never exercised"
        )
    return PASSED, (
        f"peak {(peak - baseline) / MIB:.0f} MiB over the baseline; reserved back to at most "
        f"{(worst - baseline) / MIB:.0f} MiB over it after every call (bound 512 MiB)"
    )


def burst_verdict(
    first: tuple[int, str | None],
    second_status: int,
    baseline: int,
    reserved_after: list[int],
    probative: bool,
) -> tuple[str, str]:
    """The OOM burst: 503 out_of_memory, memory back within the slack, then a 200."""
    status, code = first
    if status == 200:
        return (
            INCONCLUSIVE,
            "the burst fit under the cap and answered 200, so there was no out-of-memory to observe",
        )
    if (status, code) != (503, "out_of_memory"):
        return FAILED, f"the burst answered {status} {code}, not 503 out_of_memory"
    if second_status != 200:
        return FAILED, f"the ordinary request after the 503 answered {second_status}, not 200"
    worst = max(reserved_after)
    if worst > baseline + RELEASE_SLACK_BYTES:
        return (
            FAILED,
            f"reserved {(worst - baseline) / MIB:.0f} MiB over the baseline after the 503 (bound 512 MiB)",
        )
    reason = f"503 out_of_memory, then 200; reserved at most {(worst - baseline) / MIB:.0f} MiB over the baseline"
    if not probative:
        reason += " (the cap leaves at most 512 MiB above the baseline, so this memory bound could not have failed)"
    return PASSED, reason


# -- records and the summary ---------------------------------------------------------------


class Records:
    """records.jsonl (one JSON line per check, written as it happens) and summary.txt at the end."""

    def __init__(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.out = out
        self.path = out / "records.jsonl"
        self.path.write_text("", encoding="utf-8")
        (out / "summary.txt").unlink(
            missing_ok=True
        )  # a run stopped early must not show an older summary
        self.items: list[dict[str, Any]] = []

    def add(
        self, check: str, status: str, reason: str, figures: dict[str, Any] | None = None
    ) -> None:
        record = {
            "check": check,
            "status": status,
            "reason": reason,
            "figures": figures or {},
            "when": now(),
        }
        self.items.append(record)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        note(f"[{status}] {check}: {reason}")

    def summary(self, plan: Plan, seconds: float) -> int:
        """Write summary.txt, print it, return the exit status (1 if anything failed)."""
        counts = {
            s: sum(r["status"] == s for r in self.items)
            for s in (PASSED, FAILED, SKIPPED, INCONCLUSIVE)
        }
        verdict = "FAIL" if counts[FAILED] else "PASS"
        rows = [(r["check"], r["status"], one_line(r["reason"])) for r in self.items]
        table = markdown_table(("check", "status", "why (records.jsonl has it whole)"), rows)
        text = (
            f"semif-serve GPU check on {plan.device} ({'dry run, ' if not plan.cuda else ''}{seconds:.0f} s, "
            f"{now()})\n\n{table}\n\n{verdict}: "
            + ", ".join(f"{n} {s}" for s, n in counts.items())
            + "\n"
        )
        (self.out / "summary.txt").write_text(text, encoding="utf-8")
        print(text)
        return 1 if counts[FAILED] else 0


def one_line(text: str, limit: int = 300) -> str:
    """A reason for the summary table: whitespace collapsed, the end kept when long (it names the error)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else "..." + flat[-limit:]


def last_line(text: str) -> str:
    """The last nonblank line of a child's stderr: the exception, for a reason."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


# -- one run ---------------------------------------------------------------------------------


@dataclass
class Run:
    """The plan, where records go, the token, scratch space and what earlier steps found."""

    plan: Plan
    records: Records
    work: Path
    token: str = field(default_factory=procs.token)
    started: float = field(default_factory=time.monotonic)
    found: dict[str, Any] = field(default_factory=dict)

    def left(self) -> float:
        return self.plan.budget_s - (time.monotonic() - self.started)

    def has_time(self, check: str, need: float) -> bool:
        """False (and a skipped record) when the budget cannot hold this step."""
        if self.left() >= need:
            return True
        self.records.add(
            check,
            SKIPPED,
            f"time budget: {self.left():.0f} s left, the step needs about {need:.0f} s",
        )
        return False

    def step(self, check: str, fn: Callable[[], None]) -> None:
        """Run one step; a crash is that check's failed record, and the run goes on."""
        try:
            fn()
        except Exception as error:  # noqa: BLE001 - one broken step must not lose the others' records
            self.records.add(
                check,
                FAILED,
                f"the step crashed: {type(error).__name__}: {str(error)[:500]}",
                {"traceback": traceback.format_exc()[-3000:]},
            )

    def server_env(self, model: dict[str, str], **extra: str) -> dict[str, str]:
        """The model's settings on this run's device, with room for the large shared request."""
        decisions = max(self.plan.decisions_max, SPEED_CRITERIA)
        return {
            **model,
            "SEMIF_DEVICE": self.plan.device,
            "SEMIF_MAX_DECISIONS": str(decisions),
            "SEMIF_MAX_BODY_BYTES": str(16 * MIB),
            **extra,
        }

    @contextlib.contextmanager
    def serve(self, label: str, env: dict[str, str]) -> Iterator[procs.Running]:
        """A server on a free port; its log is kept in the output folder as server-<label>.log."""
        log_dir = self.work / f"server-{label}"
        log_dir.mkdir(exist_ok=True)
        try:
            with procs.semif_serve(
                env, self.token, ready_timeout=min(240.0, max(self.left(), 30.0)), log_dir=log_dir
            ) as server:
                yield server
        finally:
            keep_log(log_dir, self.plan.out / f"server-{label}.log")

    def child_env(self, model: dict[str, str], **extra: str) -> dict[str, str]:
        return {**os.environ, **model, TOKEN_ENV: self.token, "PYTHONUNBUFFERED": "1", **extra}


def keep_log(log_dir: Path, dest: Path) -> None:
    """The tail of a server's log, copied where the device tool brings files back."""
    for log in log_dir.glob("server-*.log"):
        dest.write_bytes(log.read_bytes()[-LOG_TAIL_BYTES:])


def run_child(
    argv: list[str], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=procs.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def acceptance_check(
    run: Run,
    server: procs.Running,
    model: dict[str, str],
    name: str,
    *extra: str,
    timeout: float = 300.0,
) -> dict[str, Any]:
    """`python -m bench <name>` against the server; its JSON outcome (a failed one if it wrote none)."""
    out = run.work / f"{name}-{server.target.port}.json"
    done = run_child(
        [sys.executable, "-m", "bench", name, "--url", server.url, "--out", str(out), *extra],
        run.child_env(model),
        min(timeout, max(run.left(), 10.0)),
    )
    if out.exists():
        return json.loads(out.read_text(encoding="utf-8"))
    return {
        "check": name,
        "passed": False,
        "figures": {},
        "verdict": f"`python -m bench {name}` exited {done.returncode} with no outcome: {done.stderr[-1500:]}",
    }


def health(server: procs.Running) -> dict[str, Any]:
    return asyncio.run(acceptance.health(server.target))


# -- 1. environment and the tiny model -------------------------------------------------------


def environment(run: Run) -> None:
    done = run_child(
        [sys.executable, "-m", "bench.gpu.gpu_probe", "facts"], run.child_env({}), 180.0
    )
    if done.returncode != 0:
        run.records.add(
            "environment",
            FAILED,
            f"gpu_probe facts exited {done.returncode}: {last_line(done.stderr)}",
            {"stderr_tail": done.stderr[-3000:]},
        )
        return
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    run.found["facts"] = facts
    figures = {
        **facts,
        "machine": machine(),
        "loadavg": os.getloadavg(),
        "plan": run.plan.describe(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
    }
    if run.plan.cuda and not facts["cuda_available"]:
        run.records.add(
            "environment", FAILED, f"torch {facts['torch']} sees no CUDA device", figures
        )
        return
    where = (
        f"{facts['device_name']} {facts['capability']} (in the build's arch list: {facts['arch_in_build']})"
        if facts["cuda_available"]
        else "no CUDA device"
    )
    run.records.add(
        "environment",
        PASSED,
        f"torch {facts['torch']}, {where}, nproc {os.cpu_count()}, load {os.getloadavg()[0]:.2f}",
        figures,
    )


def build_tiny(run: Run) -> None:
    started = time.monotonic()
    run.found["tiny"] = procs.tiny_model(run.work / "tiny")
    run.records.add(
        "build_tiny",
        PASSED,
        f"built in {time.monotonic() - started:.1f} s",
        {"revision": run.found["tiny"].get("SEMIF_REVISION")},
    )


# -- 2. server A: startup, vram, speed, parity, the large shared request ----------------------------


def startup(run: Run, server: procs.Running) -> None:
    facts = health(server)
    run.found["a_health"] = facts
    figures = {
        key: facts.get(key)
        for key in (
            "device",
            "dtype",
            "scorer",
            "memory_reserved_bytes",
            "memory_allocated_bytes",
            "max_memory_reserved_bytes",
        )
    }
    figures["arch"] = {
        k: run.found.get("facts", {}).get(k) for k in ("capability", "arch_list", "device_name")
    }
    if not run.plan.cuda:
        status = SKIPPED if facts.get("device") == "cpu" else FAILED
        run.records.add(
            "startup",
            status,
            f"dry run: the arch check and cuda:0 exist only with SEMIF_DEVICE=cuda; "
            f"the server started and /health says device {facts.get('device')!r}",
            figures,
        )
        return
    seen = f"/health says device {facts.get('device')!r}, dtype {facts.get('dtype')}"
    if facts.get("device") != "cuda:0" or "memory_reserved_bytes" not in facts:
        run.records.add(
            "startup", FAILED, f"{seen}; expected 'cuda:0' with memory figures", figures
        )
        return
    run.records.add(
        "startup",
        PASSED,
        f"SEMIF_DEVICE=cuda passed the arch check ({figures['arch']['capability']}); {seen}",
        figures,
    )


def vram(run: Run, server: procs.Running) -> None:
    outcome = acceptance_check(
        run, server, run.found["tiny"], "vram", "--tokens", str(run.plan.vram_tokens)
    )
    figures = outcome.get("figures", {})
    if outcome["passed"] and figures.get("applicable") is False:
        run.records.add(
            "vram", SKIPPED, f"only CUDA has a peak to report: {outcome['verdict']}", figures
        )
        return
    run.records.add("vram", PASSED if outcome["passed"] else FAILED, outcome["verdict"], figures)


def speed(run: Run, server: procs.Running) -> None:
    outcome = acceptance_check(run, server, run.found["tiny"], "speed", "-n", str(run.plan.speed_n))
    enough = run.plan.speed_n >= 5 or not run.plan.cuda
    status = PASSED if outcome["passed"] and enough else FAILED
    reason = outcome["verdict"] + (
        "" if enough else f" (N={run.plan.speed_n} < 5, too few for a speed figure)"
    )
    run.records.add("speed", status, reason, outcome.get("figures", {}))


def parity(run: Run, server: procs.Running, model: dict[str, str], check: str) -> None:
    outcome = acceptance_check(run, server, model, "parity", timeout=400.0)
    run.records.add(
        check,
        PASSED if outcome["passed"] else FAILED,
        outcome["verdict"],
        outcome.get("figures", {}),
    )


def shared_body(row: datasets.Row, state: Any, count: int) -> dict[str, Any]:
    """`count` decisions, all the probe row's question and options, over one long state."""
    return datasets.shared_body(state, [{**row, "id": f"big-{index}"} for index in range(count)])


def error_code(response: Response) -> str | None:
    try:
        return response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


async def _shared_step(
    target: Target, body: dict[str, Any], baseline: int | None
) -> dict[str, Any]:
    """One large /decide/shared and the memory /health reports right after it."""
    response = await call(target, "POST", "/decide/shared", body, timeout=600.0)
    after = await acceptance.health(target)
    step: dict[str, Any] = {
        "decisions": len(body["decisions"]),
        "status": response.status,
        "code": error_code(response),
        "seconds": round(response.latency, 3),
    }
    if baseline is not None and "memory_reserved_bytes" in after:
        step.update(
            {
                "reserved_after": after["memory_reserved_bytes"],
                "allocated_after": after["memory_allocated_bytes"],
                "peak_reserved": after["max_memory_reserved_bytes"],
                "peak_over_baseline": after["max_memory_reserved_bytes"] - baseline,
            }
        )
    return step


async def _grow(run: Run, target: Target, baseline: int | None) -> dict[str, Any]:
    """Double the decisions over one long state until the peak rises target over the baseline (or a bound)."""
    row, tokens = await acceptance.fit_row(target, run.plan.shared_tokens)
    deadline = time.monotonic() + min(run.plan.growth_budget_s, max(run.left() - 120.0, 0.0))
    count, steps = run.plan.decisions_start, []
    while True:
        body = shared_body(row, row["state"], count)
        steps.append(await _shared_step(target, body, baseline))
        last = steps[-1]
        if last["status"] != 200 or last.get("peak_over_baseline", 0) >= run.plan.target_bytes:
            break
        if (
            count * 2 > run.plan.decisions_max
            or time.monotonic() + 2.5 * last["seconds"] > deadline
        ):
            break
        count *= 2
    return {"prompt_tokens": tokens, "steps": steps, "row": row, "count": count}


def large_shared(run: Run, server: procs.Running) -> None:
    facts = run.found["a_health"]
    baseline = facts.get("memory_reserved_bytes")
    grown = asyncio.run(_grow(run, server.target, baseline))
    steps = grown["steps"]
    figures = {
        "prompt_tokens": grown["prompt_tokens"],
        "baseline_reserved": baseline,
        "steps": steps,
        "slack_bytes": RELEASE_SLACK_BYTES,
        "target_bytes": run.plan.target_bytes,
    }
    bad = [s for s in steps if s["status"] != 200]
    if bad:
        run.records.add(
            "large_shared",
            FAILED,
            f"/decide/shared with {bad[0]['decisions']} decisions answered "
            f"{bad[0]['status']} {bad[0]['code']}",
            figures,
        )
        return
    run.found["burst"] = {
        "row": grown["row"],
        "count": grown["count"],
        "rise": steps[-1].get("peak_over_baseline", 0),
        "startup_peak": facts.get("max_memory_reserved_bytes"),
    }
    sizes = f"{steps[0]['decisions']}..{steps[-1]['decisions']} decisions x ~{grown['prompt_tokens']} tokens"
    if baseline is None:
        run.records.add(
            "large_shared",
            SKIPPED,
            f"reserved memory exists only on CUDA; {len(steps)} requests of "
            f"{sizes} all answered 200",
            figures,
        )
        return
    status, reason = release_verdict(
        baseline, max(s["peak_reserved"] for s in steps), [s["reserved_after"] for s in steps]
    )
    run.records.add("large_shared", status, f"{sizes}: {reason}", figures)


def server_a(run: Run) -> None:
    dependents = ("startup", "vram", "speed", "parity_tiny", "large_shared")
    try:
        with run.serve("a", run.server_env(run.found["tiny"])) as server:
            for check, fn in (
                ("startup", startup),
                ("vram", vram),
                ("speed", speed),
                ("parity_tiny", lambda r, s: parity(r, s, r.found["tiny"], "parity_tiny")),
                ("large_shared", large_shared),
            ):
                if check != "startup" and "a_health" not in run.found:
                    run.records.add(check, SKIPPED, "server A's startup check did not complete")
                elif check == "startup" or run.has_time(check, 30.0):
                    run.step(check, lambda: fn(run, server))  # noqa: B023 - step() calls it at once
    except (
        RuntimeError
    ) as error:  # the server did not start: say so, and why, for every check it carries
        run.records.add("startup", FAILED, f"server A did not start: {str(error)[-1500:]}")
        for check in dependents[1:]:
            run.records.add(check, SKIPPED, "server A did not start")


# -- 3. the cap in the engine's own process; 4. the OOM burst under a cap ---------------------------


def burst_cap(run: Run) -> tuple[float, int, bool]:
    burst = run.found.get("burst") or {}
    if burst.get("startup_peak") is None:
        return 1.0, 0, False
    return cap_plan(burst["startup_peak"], burst["rise"])


def vram_cap(run: Run) -> None:
    if not run.plan.cuda:
        run.records.add(
            "vram_cap",
            SKIPPED,
            "dry run: SEMIF_VRAM_CAP_GIB applies only to CUDA (startup refuses it on cpu)",
        )
        return
    cap_gib, _, _ = burst_cap(run)
    env = run.child_env(
        run.found["tiny"], SEMIF_DEVICE=run.plan.device, SEMIF_VRAM_CAP_GIB=repr(cap_gib)
    )
    done = run_child(
        [sys.executable, "-m", "bench.gpu.gpu_probe", "cap"], env, min(240.0, run.left())
    )
    if done.returncode != 0:
        run.records.add(
            "vram_cap",
            FAILED,
            f"gpu_probe cap exited {done.returncode}: {last_line(done.stderr)}",
            {"stderr_tail": done.stderr[-3000:]},
        )
        return
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    under, over = probe["under_cap"], probe["over_cap"]
    if not under["allocated"]:
        status, reason = (
            FAILED,
            f"an allocation of {under['bytes'] / MIB:.0f} MiB under the cap was refused: {under.get('error')}",
        )
    elif over["allocated"]:
        status, reason = (
            FAILED,
            f"an allocation of {over['bytes'] / MIB:.0f} MiB over the {cap_gib:.3f} GiB cap succeeded",
        )
    elif probe["card_free_bytes"] <= over["bytes"]:
        status, reason = (
            INCONCLUSIVE,
            "the card had too little free memory for the over-cap allocation anyway",
        )
    else:
        status, reason = (
            PASSED,
            (
                f"cap {cap_gib:.3f} GiB: {under['bytes'] / MIB:.0f} MiB fit, {over['bytes'] / MIB:.0f} MiB "
                f"refused with {probe['card_free_bytes'] / GIB:.1f} GiB free on the card"
            ),
        )
    run.records.add("vram_cap", status, reason, probe)


async def _burst(target: Target, body: dict[str, Any], ordinary: datasets.Row) -> dict[str, Any]:
    before = await acceptance.health(target)
    first = await call(target, "POST", "/decide/shared", body, timeout=600.0)
    after_503 = await acceptance.health(target)
    second = await call(target, "POST", "/decide", ordinary, timeout=120.0)
    after_200 = await acceptance.health(target)
    keys = ("memory_reserved_bytes", "memory_allocated_bytes", "max_memory_reserved_bytes")
    return {
        "decisions": len(body["decisions"]),
        "first": [first.status, error_code(first)],
        "first_message": first.body[:300].decode(errors="replace"),
        "second_status": second.status,
        "before": {k: before.get(k) for k in keys},
        "after_503": {k: after_503.get(k) for k in keys},
        "after_200": {k: after_200.get(k) for k in keys},
    }


def oom_burst(run: Run) -> None:
    if not run.plan.cuda:
        run.records.add(
            "oom_burst", SKIPPED, "dry run: an out-of-memory 503 needs a CUDA allocator under a cap"
        )
        return
    burst = run.found.get("burst")
    if not burst:
        run.records.add(
            "oom_burst", SKIPPED, "no large request to burst with (large_shared did not complete)"
        )
        return
    cap_gib, headroom, probative = burst_cap(run)
    body = shared_body(burst["row"], burst["row"]["state"], burst["count"])
    with run.serve(
        "b", run.server_env(run.found["tiny"], SEMIF_VRAM_CAP_GIB=repr(cap_gib))
    ) as server:
        figures = asyncio.run(_burst(server.target, body, datasets.rows()[0]))
    baseline = figures["before"]["memory_reserved_bytes"]
    after = [
        figures["after_503"]["memory_reserved_bytes"],
        figures["after_200"]["memory_reserved_bytes"],
    ]
    status, reason = burst_verdict(
        tuple(figures["first"]), figures["second_status"], baseline, after, probative
    )
    figures.update(
        {"cap_gib": cap_gib, "headroom_bytes": headroom, "memory_bound_probative": probative}
    )
    run.records.add(
        "oom_burst",
        status,
        f"cap {cap_gib:.3f} GiB, {figures['decisions']} decisions: {reason}",
        figures,
    )


# -- 5. SmolLM2 when this checkout can build it --------------------------------------------------


def has_small_model() -> bool:
    """Whether `semif-serve small-model` exists here (the CLI's usage lists its commands)."""
    done = run_child([*procs.semif_argv(), "--help"], {**os.environ}, 120.0)
    return "small-model" in done.stdout + done.stderr


def smollm2(run: Run) -> None:
    if "smollm2" not in run.plan.models:
        run.records.add(
            "parity_smollm2",
            SKIPPED,
            f"not asked for (--models {','.join(sorted(run.plan.models))})",
        )
        return
    if not has_small_model():
        run.records.add(
            "parity_smollm2", SKIPPED, "this checkout has no `semif-serve small-model` command"
        )
        return
    if not run.has_time("parity_smollm2", 150.0):
        return
    try:
        model = procs.built_model(
            "small-model", run.work / "smollm2", timeout=min(300.0, run.left())
        )
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        run.records.add(
            "parity_smollm2", SKIPPED, f"SmolLM2 could not be built here: {str(error)[-600:]}"
        )
        return
    with run.serve("c", run.server_env(model)) as server:
        parity(run, server, model, "parity_smollm2")


# -- the whole run ---------------------------------------------------------------------------------


def check(plan: Plan) -> int:
    os.environ.pop("SEMIF_VRAM_CAP_GIB", None)  # the check sets the cap itself, per server
    records = Records(plan.out)
    with tempfile.TemporaryDirectory(prefix="semif-gpu-check-") as scratch:
        run = Run(plan, records, Path(scratch))
        run.step("environment", lambda: environment(run))
        run.step("build_tiny", lambda: build_tiny(run))
        if "tiny" in run.found:
            server_a(run)
            run.step("vram_cap", lambda: vram_cap(run))
            if run.has_time("oom_burst", 60.0):
                run.step("oom_burst", lambda: oom_burst(run))
        run.step("parity_smollm2", lambda: smollm2(run))
        return records.summary(plan, time.monotonic() - run.started)


def parser() -> argparse.ArgumentParser:
    main_parser = argparse.ArgumentParser(
        prog="python -m bench gpu-check", description=__doc__.splitlines()[0]
    )
    main_parser.add_argument(
        "--dry-run", action="store_true", help="on the CPU: same steps, CUDA-only ones skipped"
    )
    main_parser.add_argument(
        "--out", type=Path, help="records folder (default $OUT, else bench/results/gpu_check)"
    )
    main_parser.add_argument(
        "--models", help="comma list of tiny,smollm2 (default: both on cuda, tiny on cpu)"
    )
    main_parser.add_argument(
        "--speed-n", dest="speed_n", type=int, help="speed repetitions (cuda default 5)"
    )
    main_parser.add_argument(
        "--vram-tokens", dest="vram_tokens", type=int, help="vram check input (cuda 4096)"
    )
    main_parser.add_argument(
        "--shared-tokens", dest="shared_tokens", type=int, help="large shared state (cuda 3800)"
    )
    main_parser.add_argument(
        "--decisions-start", dest="decisions_start", type=int, help="cuda default 64"
    )
    main_parser.add_argument(
        "--decisions-max", dest="decisions_max", type=int, help="cuda default 4096"
    )
    main_parser.add_argument(
        "--target-gib", dest="target_gib", type=float, help="rise over baseline to reach (1.5)"
    )
    main_parser.add_argument(
        "--growth-budget-s", dest="growth_budget_s", type=float, help="seconds for the growth"
    )
    main_parser.add_argument(
        "--budget-s", dest="budget_s", type=float, help="soft limit for the whole run (cuda 300)"
    )
    return main_parser


def main(argv: list[str] | None = None) -> int:
    return check(plan_from(parser().parse_args(argv)))
