"""`bench evaluate --derive --calibration` and `--journal`, end to end on live stub servers.

A prior and threshold are fitted by `bench prior` on the fit side of our labelled set; a second
stub serves them. Each test row is then scored once under its rotations, and prior, adaptive
and PriDe's protocol are derived offline from those rows: the derived `prior` must be what the
server answers under `prior`, and adaptive and PriDe's protocol must follow their rules row by row.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.common import procs
from bench.common.loadgen import call
from bench.labelled import derived, escalation
from bench.labelled import rows as labelled
from semif_serve.decisions import prior as pride
from tests.bench import bench_cli
from tests.calibration_files import MATCHING

TOKEN = "derived-token-" + "0123456789abcdef" * 2
DATA = Path(__file__).resolve().parents[2] / "bench" / "data" / "labelled.jsonl"
PNG = b"\x89PNG\r\n\x1a\n"


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return bench_cli.run(TOKEN, *args, timeout=300)


@pytest.fixture(scope="module")
def calibration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Priors and thresholds fitted on the fit side, bound to what a stub server checks."""
    out = tmp_path_factory.mktemp("fit")
    path = out / "calibration.json"
    path.write_text(json.dumps({**MATCHING, "priors": bench_cli.fitted_priors(TOKEN, out)}))
    return path


@pytest.fixture(scope="module")
def server(calibration: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[procs.Running]:
    env = {**procs.stub_env(), "SEMIF_CALIBRATION": str(calibration)}
    with procs.semif_serve(env, TOKEN, log_dir=tmp_path_factory.mktemp("logs")) as running:
        yield running


def evaluate(
    server: procs.Running, calibration: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    return bench(
        "evaluate", "--url", server.url, "--data", str(DATA), "--split", "test", "--derive",
        "--methods", "none", "rotations", "--calibration", str(calibration), *extra,
    )  # fmt: skip


@pytest.fixture(scope="module")
def run(
    server: procs.Running, calibration: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("evaluate")
    done = evaluate(
        server, calibration, "--out", str(out / "run.json"), "--curve", str(out / "curve.png")
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {"done": done, "run": json.loads((out / "run.json").read_text()), "dir": out}


def served(server: procs.Running, row: dict[str, Any], method: str) -> dict[str, Any]:
    body = labelled.request(row, method, "default" if method == "prior" else None)
    response = asyncio.run(call(server.target, "POST", "/decide", body))
    assert response.status == 200, response.body[:300]
    return response.json()


def entries(calibration: Path) -> dict[int, dict[str, Any]]:
    return {int(n): e for n, e in json.loads(calibration.read_text())["priors"]["default"].items()}


def test_the_derived_prior_is_what_the_server_answers_under_prior(
    run: dict[str, Any], server: procs.Running
) -> None:
    rows = {row["id"]: row for row in labelled.load(DATA)}
    checked = 0
    for kept in run["run"]["rows"]:
        if "prior" not in kept["methods"]:
            continue
        answer = served(server, rows[kept["id"]], "prior")
        assert kept["methods"]["prior"]["probabilities"] == pytest.approx(
            answer["combined"]["probabilities"], abs=1e-6
        )
        checked += 1
    assert checked >= 40


def debiased(result: dict[str, Any], prior: list[float]) -> list[float]:
    """A row's probabilities with the prior divided out by position."""
    logits = result["option_logits"]
    shifted = pride.debias([v - max(logits) for v in logits], prior)
    weights = [math.exp(v) for v in shifted]
    return [w / sum(weights) for w in weights]


def test_adaptive_is_one_row_above_the_threshold_and_staged_below(
    run: dict[str, Any], calibration: Path
) -> None:
    """Above the threshold one row; below it two rows and that row's answer where the half turn's
    debiased top confirms it (three options or more), else the rotations (n rows)."""
    table = entries(calibration)
    branches = {"one": 0, "confirmed": 0, "rotations": 0}
    for row in run["run"]["rows"]:
        methods = row["methods"]
        if row["options"] not in table:
            assert "adaptive" not in methods and "prior" not in methods
            continue
        entry, results = table[row["options"]], methods["rotations"]["results"]
        probabilities = debiased(results[0], entry["prior"])
        ranked = sorted(probabilities, reverse=True)
        ids = results[0]["option_ids"]
        half = dict(
            zip(
                results[row["options"] // 2]["option_ids"],
                debiased(results[row["options"] // 2], entry["prior"]),
            )
        )
        confirmed = (
            row["options"] > 2
            and max(ids, key=half.__getitem__) == ids[probabilities.index(ranked[0])]
        )
        adaptive = methods["adaptive"]
        if ranked[0] - ranked[1] >= entry["threshold"]:
            branches["one"] += 1
            assert (adaptive["orderings"], adaptive["escalated"]) == (1, False)
            assert adaptive["probabilities"] == pytest.approx(probabilities)
        elif confirmed:
            branches["confirmed"] += 1
            assert (adaptive["orderings"], adaptive["escalated"]) == (2, True)
            assert adaptive["probabilities"] == pytest.approx(probabilities)
        else:
            branches["rotations"] += 1
            assert (adaptive["orderings"], adaptive["escalated"]) == (row["options"], True)
            assert adaptive["probabilities"] == methods["rotations"]["probabilities"]
    assert all(branches.values()), f"every branch must be exercised: {branches}"
    figures = run["run"]["derived_figures"]["adaptive"]
    rows = [r for r in run["run"]["rows"] if "adaptive" in r["methods"]]
    assert figures["rows_per_decision"] == pytest.approx(
        sum(r["methods"]["adaptive"]["orderings"] for r in rows) / len(rows)
    )


def test_prides_protocol_answers_its_sample_with_rotations_and_the_rest_with_its_prior(
    run: dict[str, Any],
) -> None:
    by_count: dict[int, list[dict[str, Any]]] = {}
    for row in run["run"]["rows"]:
        by_count.setdefault(row["options"], []).append(row)
    for n, rows in by_count.items():
        sample = [r for r in rows if r["methods"]["pride"]["escalated"]]
        assert len(sample) == max(1, math.ceil(0.05 * len(rows))), n
        prior = pride.workload_prior(
            [pride.decision_prior(r["methods"]["rotations"]["results"]) for r in sample]
        )
        for row in rows:
            record = row["methods"]["pride"]
            if record["escalated"]:
                assert record["probabilities"] == row["methods"]["rotations"]["probabilities"]
            else:
                first = row["methods"]["rotations"]["results"][0]["option_logits"]
                assert record["probabilities"] == escalation.debiased(first, prior)


def test_the_curve_runs_from_one_row_to_the_rotations_and_is_drawn(run: dict[str, Any]) -> None:
    curve, figures = run["run"]["curve"], run["run"]["derived_figures"]
    assert curve[0]["threshold"] == 0 and curve[0]["rows_per_decision"] == 1
    assert curve[0]["accuracy"] == figures["prior"]["accuracy"]
    # Above every margin, everything escalates: the half turn where it confirms, else the rotations.
    rows = [r for r in run["run"]["rows"] if "prior" in r["methods"]]
    staged = [
        (2, r["methods"]["prior"]["top"])
        if r["methods"]["prior"]["confirmed"]
        else (r["options"], r["methods"]["rotations"]["top"])
        for r in rows
    ]
    assert curve[-1]["rows_per_decision"] == pytest.approx(sum(n for n, _ in staged) / len(rows))
    assert curve[-1]["accuracy"] == pytest.approx(
        sum(top == r["label"] for (_, top), r in zip(staged, rows)) / len(rows)
    )
    assert curve[-1]["rows_per_decision"] < figures["rotations"]["rows_per_decision"]
    assert (run["dir"] / "curve.png").read_bytes().startswith(PNG)
    assert "McNemar vs rotations" in run["done"].stdout


def test_a_journal_resumes_asking_only_the_rows_it_lacks(
    run: dict[str, Any], server: procs.Running, calibration: Path, tmp_path: Path
) -> None:
    path = tmp_path / "journal.jsonl"
    first = evaluate(server, calibration, "--journal", str(path), "--limit", "10")
    assert first.returncode == 0, first.stderr[-2000:]
    head = path.read_text().splitlines()
    assert len(head) == 1 + 10
    second = evaluate(
        server, calibration, "--journal", str(path), "--out", str(tmp_path / "whole.json")
    )
    assert second.returncode == 0, second.stderr[-2000:]
    total = len(run["run"]["rows"])
    assert "10 rows already in" in second.stderr
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + total  # a row asked again would be appended again
    assert lines[: 1 + 10] == head
    whole = json.loads((tmp_path / "whole.json").read_text())
    assert whole["derived_figures"] == run["run"]["derived_figures"]
    again = bench("evaluate", "--results", str(path), "--calibration", str(calibration))
    assert again.returncode == 0, again.stderr[-2000:]
    assert "McNemar vs rotations" in again.stdout


def test_a_journal_of_another_run_is_refused_and_left_untouched(
    server: procs.Running, calibration: Path, tmp_path: Path
) -> None:
    path = tmp_path / "journal.jsonl"
    assert evaluate(server, calibration, "--journal", str(path), "--limit", "2").returncode == 0
    before = path.read_bytes()
    done = bench(
        "evaluate", "--url", server.url, "--data", str(DATA), "--split", "test",
        "--methods", "none", "--journal", str(path),
    )  # fmt: skip
    assert done.returncode == 1 and "was written by another run: methods" in done.stderr
    assert path.read_bytes() == before


def test_calibration_without_derive_is_refused_before_scoring(
    server: procs.Running, calibration: Path
) -> None:
    done = bench(
        "evaluate", "--url", server.url, "--data", str(DATA), "--calibration", str(calibration),
    )  # fmt: skip
    assert done.returncode == 1 and "needs --derive" in done.stderr


def test_the_statistics_on_known_cases() -> None:
    low, high = derived.wilson(7, 10)
    assert (round(low, 4), round(high, 4)) == (0.3968, 0.8922)
    # 1 discordant pair one way and 6 the other: two-sided exact p = 2 * (1 + 7) / 2**7
    test = derived.mcnemar(
        [True] * 1 + [False] * 6 + [True] * 3, [False] * 1 + [True] * 6 + [True] * 3
    )
    assert (test["only_first"], test["only_second"]) == (1, 6)
    assert test["p"] == pytest.approx(2 * (1 + 7) / 2**7)
    assert derived.rstd([0, 0, 1, 1], [0, 0, 1, 1]) == 0.0
    assert derived.rstd([0, 0, 0, 0], [0, 0, 1, 1]) == pytest.approx(0.5)


def test_prior_fits_the_same_from_a_saved_derived_run_as_through_the_server(
    run: dict[str, Any], server: procs.Running, tmp_path: Path
) -> None:
    through = bench(
        "prior", "--url", server.url, "--data", str(DATA), "--split", "test",
        "--out", str(tmp_path / "through.json"),
    )  # fmt: skip
    saved = bench(
        "prior", "--results", str(run["dir"] / "run.json"), "--out", str(tmp_path / "saved.json")
    )
    assert through.returncode == 0 and saved.returncode == 0, saved.stderr[-2000:]
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("through", "saved"))
    assert a["priors"] == b["priors"] and a["priors"]["default"]
    assert "scoring" not in saved.stderr


def test_signals_compares_every_policy_with_the_bound_and_the_rotations(
    run: dict[str, Any],
) -> None:
    done = bench("signals", "--results", str(run["dir"] / "run.json"))
    assert done.returncode == 0, done.stderr[-2000:]
    tables = done.stdout.split("leave-one-out priors)")[1:]
    assert tables
    for table in tables:
        cells = {
            line.split("|")[1].strip(): line.split("|")[2].strip()
            for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| policy")
        }
        assert set(cells) >= {*escalation.SIGNALS, "rotations"}
        rows = {name: float(cell.split()[0]) for name, cell in cells.items() if cell != "-"}
        bound = rows.pop("bound: escalate exactly the one-row tops that differ")
        assert all(bound <= r <= rows["rotations"] for r in rows.values())
