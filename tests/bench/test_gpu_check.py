"""bench/gpu/gpu_check.sh proves its own logic before it spends device time.

Three layers. The verdicts are pure functions, checked on their edges. The
CUDA-only steps (the large shared growth and the OOM burst) run against a real
server on loopback whose scorer books memory the way the CUDA allocator would
(a baseline, a rise per row and token, a cap that raises OutOfMemory, and a
switch that keeps the memory instead of releasing it), so each verdict is seen
to pass on a well-behaved engine and to go red on a leaking one. Last, the
script itself runs end to end on the CPU (`--dry-run`, tiny model, small N),
as the lead would run it on the card, and every check must leave its record.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import datasets, procs
from bench.common.loadgen import Target
from bench.gpu import gpu_check
from bench.gpu.gpu_check import FAILED, INCONCLUSIVE, MIB, PASSED, SKIPPED, Plan, Records, Run
from semif_serve.engine.scorer import OutOfMemory
from tests.fake_scorer import semif_like
from tests.wire_client import TOKEN

GIB = 1 << 30
BASELINE = 100 * MIB


# -- the verdicts ----------------------------------------------------------------------------


def test_cap_leaves_half_the_rise_within_bounds_and_says_when_the_bound_is_probative() -> None:
    cap_gib, headroom, probative = gpu_check.cap_plan(BASELINE, 3 * GIB)
    assert (headroom, probative) == (GIB, True) and cap_gib * GIB == BASELINE + GIB
    _, headroom, probative = gpu_check.cap_plan(BASELINE, 600 * MIB)
    assert (headroom, probative) == (300 * MIB, False)
    _, headroom, _ = gpu_check.cap_plan(BASELINE, 0)
    assert headroom == gpu_check.MIN_HEADROOM
    cap_gib, _, _ = gpu_check.cap_plan(BASELINE + 1, 0)
    assert (cap_gib * GIB) % MIB == 0 and cap_gib * GIB > BASELINE + 1


def test_release_verdict() -> None:
    slack = 512 * MIB
    assert (
        gpu_check.release_verdict(BASELINE, BASELINE + GIB, [BASELINE, BASELINE + slack])[0]
        == PASSED
    )
    assert (
        gpu_check.release_verdict(BASELINE, BASELINE + GIB, [BASELINE, BASELINE + slack + 1])[0]
        == FAILED
    )
    assert gpu_check.release_verdict(BASELINE, BASELINE + slack, [BASELINE])[0] == INCONCLUSIVE


def test_burst_verdict() -> None:
    fine = [BASELINE, BASELINE]
    assert gpu_check.burst_verdict((503, "out_of_memory"), 200, BASELINE, fine, True)[0] == PASSED
    status, reason = gpu_check.burst_verdict((503, "out_of_memory"), 200, BASELINE, fine, False)
    assert status == PASSED and "could not have failed" in reason
    assert gpu_check.burst_verdict((200, None), 200, BASELINE, fine, True)[0] == INCONCLUSIVE
    assert gpu_check.burst_verdict((500, "scoring_failed"), 200, BASELINE, fine, True)[0] == FAILED
    assert gpu_check.burst_verdict((503, "out_of_memory"), 503, BASELINE, fine, True)[0] == FAILED
    kept = [BASELINE + 513 * MIB, BASELINE]
    assert gpu_check.burst_verdict((503, "out_of_memory"), 200, BASELINE, kept, True)[0] == FAILED


def test_a_crashing_step_is_a_failed_record_and_fails_the_run(tmp_path: Path) -> None:
    run = Run(cuda_plan(tmp_path), Records(tmp_path), tmp_path)

    def broken() -> None:
        raise KeyError("boom")

    run.step("broken", broken)
    run.records.add("fine", PASSED, "ok")
    assert [(r["check"], r["status"]) for r in records(tmp_path)] == [
        ("broken", FAILED),
        ("fine", PASSED),
    ]
    assert run.records.summary(run.plan, 1.0) == 1
    assert "FAIL: 1 passed, 1 failed" in (tmp_path / "summary.txt").read_text()


# -- the CUDA-only steps against an engine that books memory like the CUDA allocator ---------------


class MemoryScorer:
    """Each call needs rows x state words x `per` bytes over the baseline; over `cap` it is an OOM.

    `keep` leaves a successful call's memory reserved, `keep_on_oom` a failed one's: the
    bugs the GPU check exists to catch.
    """

    def __init__(
        self,
        per: int,
        cap: int | None = None,
        keep: bool = False,
        keep_on_oom: bool = False,
        device: str = "cuda:0",
    ) -> None:
        self.per, self.cap, self.keep, self.keep_on_oom, self.device = (
            per,
            cap,
            keep,
            keep_on_oom,
            device,
        )
        self.reserved = self.peak = BASELINE

    def load(self) -> None:
        pass

    def _spend(self, rows: list[dict[str, Any]]) -> None:
        need = BASELINE + sum(len(str(row["state"]).split()) for row in rows) * self.per
        if self.cap is not None and need > self.cap:
            self.peak = max(self.peak, self.cap)
            self.reserved = self.cap if self.keep_on_oom else BASELINE
            raise OutOfMemory("CUDA out of memory. Tried to allocate (fake)")
        self.peak = max(self.peak, need)
        self.reserved = need if self.keep else BASELINE

    def _result(self, row: dict[str, Any]) -> dict[str, Any]:
        return {**semif_like(row), "input_tokens": len(str(row["state"]).split()) + 12}

    def score(self, row: dict[str, Any]) -> dict[str, Any]:
        self._spend([row])
        return self._result(row)

    def score_shared(
        self, rows: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        self._spend(rows)
        return [self._result(row) for row in rows], {"total_seconds": 0.0}

    def health(self) -> dict[str, Any]:
        return {
            "scorer": "fake",
            "semif_commit": "fake",
            "model": "fake",
            "revision": "r" * 40,
            "device": self.device,
            "dtype": "bfloat16",
            "memory_reserved_bytes": self.reserved,
            "memory_allocated_bytes": self.reserved,
            "max_memory_reserved_bytes": self.peak,
        }


def cuda_plan(out: Path) -> Plan:
    return Plan(
        out=out,
        device="cuda",
        models=frozenset({"tiny"}),
        speed_n=5,
        vram_tokens=512,
        shared_tokens=200,
        decisions_start=4,
        decisions_max=256,
        target_bytes=GIB,
        growth_budget_s=60.0,
        budget_s=300.0,
    )


def records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


async def grown(start_server: Any, scorer: MemoryScorer, out: Path) -> tuple[Run, dict[str, Any]]:
    """The large_shared step, as on the card, against `scorer` served on loopback."""
    server = await start_server(scorer, max_decisions=256, max_body_bytes=16 * MIB)
    running = procs.Running(Target("127.0.0.1", server.port, TOKEN), None, out / "none.log")  # type: ignore[arg-type]
    run = Run(cuda_plan(out), Records(out), out)
    await asyncio.to_thread(gpu_check.startup, run, running)
    await asyncio.to_thread(gpu_check.large_shared, run, running)
    return run, {r["check"]: r for r in records(out)}


async def test_large_shared_grows_until_the_target_and_passes_when_memory_is_released(
    start_server: Any, tmp_path: Path
) -> None:
    run, found = await grown(start_server, MemoryScorer(per=64 * 1024), tmp_path)
    assert found["startup"]["status"] == PASSED
    record = found["large_shared"]
    counts = [step["decisions"] for step in record["figures"]["steps"]]
    assert record["status"] == PASSED, record["reason"]
    assert (
        counts == [4, 8, 16, 32, 64, 128]
        and record["figures"]["steps"][-1]["peak_over_baseline"] >= GIB
    )
    assert run.found["burst"]["count"] == 128 and run.found["burst"]["rise"] >= GIB


async def test_large_shared_fails_when_a_call_keeps_its_memory(
    start_server: Any, tmp_path: Path
) -> None:
    _, found = await grown(start_server, MemoryScorer(per=64 * 1024, keep=True), tmp_path)
    assert found["large_shared"]["status"] == FAILED, found["large_shared"]["reason"]


async def test_large_shared_is_inconclusive_when_no_request_exceeds_the_slack(
    start_server: Any, tmp_path: Path
) -> None:
    _, found = await grown(start_server, MemoryScorer(per=1024), tmp_path)
    record = found["large_shared"]
    assert record["status"] == INCONCLUSIVE and record["figures"]["steps"][-1]["decisions"] == 256


async def test_startup_fails_when_health_names_another_device(
    start_server: Any, tmp_path: Path
) -> None:
    _, found = await grown(start_server, MemoryScorer(per=64 * 1024, device="cuda:1"), tmp_path)
    assert (
        found["startup"]["status"] == FAILED and "expected 'cuda:0'" in found["startup"]["reason"]
    )


async def burst(start_server: Any, scorer: MemoryScorer, probative: bool) -> tuple[str, str]:
    server = await start_server(scorer, max_decisions=256, max_body_bytes=16 * MIB)
    target = Target("127.0.0.1", server.port, TOKEN)
    row = {**datasets.rows()[0], "state": "data " * 200}
    figures = await gpu_check._burst(
        target, gpu_check.shared_body(row, row["state"], 128), datasets.rows()[0]
    )
    after = [
        figures["after_503"]["memory_reserved_bytes"],
        figures["after_200"]["memory_reserved_bytes"],
    ]
    return gpu_check.burst_verdict(
        tuple(figures["first"]),
        figures["second_status"],
        figures["before"]["memory_reserved_bytes"],
        after,
        probative,
    )


async def test_burst_over_the_cap_is_a_503_then_a_200(start_server: Any) -> None:
    status, reason = await burst(
        start_server, MemoryScorer(per=64 * 1024, cap=BASELINE + GIB), True
    )
    assert status == PASSED, reason


async def test_burst_fails_when_the_failed_call_keeps_its_memory(start_server: Any) -> None:
    scorer = MemoryScorer(per=64 * 1024, cap=BASELINE + GIB, keep_on_oom=True)
    status, reason = await burst(start_server, scorer, True)
    assert status == FAILED and "after the 503" in reason


# -- the script end to end on the CPU ------------------------------------------------------------

EXPECTED = {
    "environment": PASSED,
    "build_tiny": PASSED,
    "startup": SKIPPED,
    "vram": SKIPPED,
    "speed": PASSED,
    "parity_tiny": PASSED,
    "large_shared": SKIPPED,
    "vram_cap": SKIPPED,
    "oom_burst": SKIPPED,
    "parity_smollm2": SKIPPED,
}


def test_dry_run_takes_every_step_on_the_cpu_and_says_what_it_skipped(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    env.pop("SEMIF_DEVICE", None)
    done = subprocess.run(
        ["bash", "bench/gpu/gpu_check.sh", "--dry-run"],
        cwd=procs.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    found = {r["check"]: r for r in records(tmp_path)}
    assert {check: r["status"] for check, r in found.items()} == EXPECTED, done.stdout[-3000:]
    assert done.returncode == 0, done.stdout[-3000:]
    assert found["startup"]["figures"]["device"] == "cpu"
    assert all(r["reason"] for r in found.values())
    assert "2 requests of 4..8 decisions" in found["large_shared"]["reason"]
    assert found["parity_tiny"]["figures"]["top_choice_agreement"] == 1.0
    assert found["speed"]["figures"]["n"] == 3
    summary = (tmp_path / "summary.txt").read_text()
    assert (
        all(check in summary for check in EXPECTED)
        and "PASS: 4 passed, 0 failed, 6 skipped" in summary
    )
    assert (tmp_path / "server-a.log").stat().st_size > 0
