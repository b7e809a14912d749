"""The bench tools run as CI would: real server subprocesses, the CLI, its exit status and JSON.

One tiny-model server (SEMIF_SCORER=fastjev on CPU) serves every acceptance check
in this module; each check runs as `python -m bench <check>` with a small N and
must pass. The negative control must fail on identical data. A short stub run
checks the load generator's accounting and the admission burst, and the FastAPI
baseline is checked to answer byte-for-byte what ours answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.acceptance import acceptance, compare
from bench.common import datasets, procs
from bench.common.loadgen import Target, call, drive, encode, percentile
from bench.load import load
from tests.timing import timeless

TOKEN = "bench-token-" + "0123456789abcdef" * 2
# One torch thread: on 2 cores the other one is the client's; competing OpenMP threads cost seconds.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
STUB = procs.stub_env()


@pytest.fixture(scope="module")
def tiny_env(tiny_built: dict[str, str]) -> dict[str, str]:
    return {**tiny_built, **ONE_THREAD}


@pytest.fixture(scope="module")
def tiny_server(
    tiny_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[procs.Running]:
    with procs.semif_serve(
        tiny_env, TOKEN, ready_timeout=120.0, log_dir=tmp_path_factory.mktemp("logs")
    ) as server:
        yield server


def run_check(
    server: procs.Running, env: dict[str, str], out: Path, *args: str
) -> tuple[int, dict[str, Any]]:
    """`python -m bench <args> --url URL --out OUT` in a child; its exit status and JSON outcome."""
    done = subprocess.run(
        [sys.executable, "-m", "bench", *args, "--url", server.url, "--out", str(out)],
        cwd=procs.ROOT,
        env={**os.environ, **env, "SEMIF_API_TOKEN": TOKEN},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return done.returncode, json.loads(out.read_text()) if out.suffix == ".json" else {}


@pytest.mark.parametrize(
    "check",
    [
        ["noise"],
        ["negative"],
        ["shared"],
        ["speed", "-n", "3"],
        ["vram"],
        ["boundary"],
    ],
)
def test_acceptance_check_passes_on_the_tiny_model(
    check: list[str], tiny_server: procs.Running, tiny_env: dict[str, str], tmp_path: Path
) -> None:
    status, outcome = run_check(tiny_server, tiny_env, tmp_path / "out.json", *check)
    assert (status, outcome["passed"], outcome["check"]) == (0, True, check[0]), outcome["verdict"]


def test_parity_against_reference_made_by_the_reference_command(
    tiny_server: procs.Running, tiny_env: dict[str, str], tmp_path: Path
) -> None:
    references = tmp_path / "reference.jsonl"
    status, _ = run_check(tiny_server, tiny_env, references, "reference")
    assert status == 0 and len(datasets.read_jsonl(references)) == len(datasets.rows())
    status, outcome = run_check(
        tiny_server, tiny_env, tmp_path / "parity.json", "parity", "--reference", str(references)
    )
    assert (status, outcome["passed"]) == (0, True), outcome["verdict"]
    assert outcome["figures"]["top_choice_agreement"] == 1.0


def test_negative_control_fails_on_identical_data(
    tiny_server: procs.Running, tiny_env: dict[str, str], tmp_path: Path
) -> None:
    status, outcome = run_check(
        tiny_server, tiny_env, tmp_path / "out.json", "negative", "--identical"
    )
    assert (status, outcome["passed"]) == (1, False)
    assert outcome["figures"]["shuffled"]["max_probability_gap"] <= acceptance.MAX_GAP


# -- the stub: load generator accounting, admission, the baseline ---------------------------


def test_load_generator_accounts_for_every_request(tmp_path: Path) -> None:
    with procs.semif_serve(STUB, TOKEN, log_dir=tmp_path) as server:
        spec = datasets.load_json(datasets.SPEED21)
        requests = [
            encode(server.target, "POST", "/decide", datasets.first_with(2)),
            encode(
                server.target,
                "POST",
                "/decide/shared",
                datasets.shared_body(spec["state"], spec["decisions"]),
            ),
        ]
        tally = asyncio.run(drive(server.target, requests, 4, 0.5, warmup=0.1))
    assert tally.sent == tally.answered > 0
    assert (tally.lost, tally.duplicates, dict(tally.statuses)) == (0, 0, {200: tally.answered})


def test_admission_burst_refuses_past_max_queue(tmp_path: Path) -> None:
    with procs.semif_serve(
        procs.stub_env(delay_ms=200, queue=2), TOKEN, log_dir=tmp_path
    ) as server:
        figures = asyncio.run(load.burst(server.target, 2, 6, 0.2))
    assert figures["passed"], figures["checks"]
    assert (figures["ok_200"], figures["refused_429"], figures["peak_in_progress"]) == (2, 4, 2)


async def _answers(target: Target) -> list[tuple[int, Any]]:
    spec = datasets.load_json(datasets.SPEED21)
    row = datasets.rows()[0]
    sent = [
        await call(target, "POST", "/decide", row),
        await call(
            target,
            "POST",
            "/decide/shared",
            datasets.shared_body(spec["state"], spec["decisions"][:3]),
        ),
        await call(Target(target.host, target.port, "wrong-" + TOKEN), "POST", "/decide", row),
    ]
    return [(r.status, timeless(r.json())) for r in sent]


def test_fastapi_baseline_answers_what_ours_answers(tmp_path: Path) -> None:
    with procs.semif_serve(STUB, TOKEN, log_dir=tmp_path) as ours:
        expected = asyncio.run(_answers(ours.target))
    with procs.fastapi_baseline(STUB, TOKEN, log_dir=tmp_path) as baseline:
        assert asyncio.run(_answers(baseline.target)) == expected
    assert [status for status, _ in expected] == [200, 200, 401]


# -- pure parts ---------------------------------------------------------------------------


def test_comparison_matches_options_by_id_not_position() -> None:
    left = {"r": {"id": "r", "option_ids": ["a", "b"], "probabilities": [0.7, 0.3]}}
    swapped = {"r": {"id": "r", "option_ids": ["b", "a"], "probabilities": [0.3, 0.7]}}
    relabelled = {"r": {"id": "r", "option_ids": ["b", "a"], "probabilities": [0.7, 0.3]}}
    assert compare.compare(left, swapped, ["r"]).figures()["max_probability_gap"] == 0.0
    result = compare.compare(left, relabelled, ["r", "gone"])
    assert (result.agreement, round(result.max_gap, 6), result.missing) == (0.0, 0.4, ["gone"])


def test_vram_recommends_a_cap_from_the_peak_on_cuda() -> None:
    gib = acceptance.GIB
    args = type("Args", (), {"poll": 0.01})()
    before = {"memory_reserved_bytes": 9 * gib}
    after = {"memory_reserved_bytes": 9 * gib, "max_memory_reserved_bytes": 11 * gib}
    outcome = acceptance._vram_outcome(args, "cuda:0", 4090, before, after, [10 * gib], ())  # type: ignore[arg-type]
    assert outcome.passed and outcome.figures["peak_reserved"] == 11 * gib
    assert (
        outcome.figures["recommended_vram_cap_gib"] == 12.25
    )  # 11 x 1.10 = 12.1, up to a 0.25 step


def test_token_fit_lands_in_the_window() -> None:
    async def measure(size: int) -> tuple[int, int]:
        return size, 180 + 3 * size + size // 7

    size, count = asyncio.run(acceptance.secant_fit(measure, 4096, 32, 8))
    assert 4064 <= count <= 4096


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 99), percentile(values[:1], 99)) == (
        50.0,
        99.0,
        1.0,
    )


def test_a_temporary_log_folder_goes_after_a_clean_exit_and_stays_after_a_failure() -> None:
    with procs.semif_serve(STUB, TOKEN) as server:
        folder = server.log.parent
        assert folder.name.startswith("semif-bench-") and server.log.exists()
    assert not folder.exists()
    with pytest.raises(RuntimeError, match="exited with 2"):
        with procs.semif_serve(procs.stub_env(queue=0), TOKEN):
            pass
    recent = [
        p
        for p in Path(tempfile.gettempdir()).glob("semif-bench-*")
        if p.stat().st_mtime > time.time() - 60
    ]
    kept = [
        f
        for f in recent
        if any("SEMIF_MAX_QUEUE" in log.read_text() for log in f.glob("server-*.log"))
    ]
    assert kept  # the failed server's log, left to read
    for folder in kept:
        shutil.rmtree(folder)


def test_another_checkout_is_served_from_its_own_code(tmp_path: Path) -> None:
    """bench.load.server_cpu compares commits side by side: procs.semif_serve(checkout=…) must run that copy."""
    shutil.copytree(procs.ROOT / "semif_serve", tmp_path / "semif_serve")
    stub = tmp_path / "semif_serve" / "engine" / "stub.py"
    stub.write_text(stub.read_text().replace('"stub (no model)"', '"stub (other checkout)"'))
    with (
        procs.semif_serve(STUB, TOKEN, checkout=tmp_path) as other,
        procs.semif_serve(STUB, TOKEN) as this,
    ):
        facts = [
            asyncio.run(call(s.target, "GET", "/health")).json()["semif_commit"]
            for s in (other, this)
        ]
    assert facts == ["stub (other checkout)", "stub (no model)"]
