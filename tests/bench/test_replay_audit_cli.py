"""`bench replay`, `bench audit-check` and `bench served-check`, end to end on a live stub server.

A prior and threshold are fitted by `bench prior` on the fit side of our labelled set; a stub serves
them with every eligible decision audited. The test side is scored once under its rotations, with
prior and adaptive derived offline: the served ones must match them, and the live prior the server
reports after a replay must be live_prior's arithmetic on the very decisions replayed.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.common import procs
from bench.labelled import audit_check, replay
from semif_serve.decisions import live_prior
from tests.bench import bench_cli
from tests.calibration_files import MATCHING

TOKEN = "replay-token-" + "0123456789abcdef" * 2
DATA = Path(__file__).resolve().parents[2] / "bench" / "data" / "labelled.jsonl"
RENAMED = "replayed"  # the replay's own workload, so other tests' audits never mix into its tally


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return bench_cli.run(TOKEN, *args, timeout=300)


@pytest.fixture(scope="module")
def calibration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Priors and thresholds fitted on the fit side, under the rows' workload and RENAMED."""
    out = tmp_path_factory.mktemp("fit")
    priors = bench_cli.fitted_priors(TOKEN, out)
    path = out / "calibration.json"
    path.write_text(json.dumps({**MATCHING, "priors": {**priors, RENAMED: priors["default"]}}))
    return path


@pytest.fixture(scope="module")
def server(calibration: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[procs.Running]:
    env = {**procs.stub_env(), "SEMIF_CALIBRATION": str(calibration), "SEMIF_AUDIT_RATE": "1.0"}
    with procs.semif_serve(env, TOKEN, log_dir=tmp_path_factory.mktemp("logs")) as running:
        yield running


@pytest.fixture(scope="module")
def slow_server(
    calibration: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[procs.Running]:
    """Each engine call takes longer than the replay's settle time, so an audit still running when
    the replay asks is seen as running, not as none drawn."""
    env = {
        **procs.stub_env(delay_ms=int(replay.AUDIT_SETTLE_S * 2000)),
        "SEMIF_CALIBRATION": str(calibration),
        "SEMIF_AUDIT_RATE": "1.0",
    }
    with procs.semif_serve(env, TOKEN, log_dir=tmp_path_factory.mktemp("slow")) as running:
        yield running


@pytest.fixture(scope="module")
def derived(
    server: procs.Running, calibration: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The test side under its rotations, prior and adaptive derived offline."""
    out = tmp_path_factory.mktemp("derived") / "derived.json"
    done = bench(
        "evaluate", "--url", server.url, "--data", str(DATA), "--split", "test", "--derive",
        "--methods", "none", "rotations", "--calibration", str(calibration), "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_served_prior_and_adaptive_match_the_derived_ones(
    server: procs.Running, derived: Path, tmp_path: Path
) -> None:
    served = tmp_path / "served.json"
    done = bench(
        "evaluate", "--url", server.url, "--data", str(DATA), "--split", "test",
        "--methods", "prior", "adaptive", "--out", str(served),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [row for row in json.loads(served.read_text())["rows"] if "adaptive" in row["methods"]]
    stops = {(row["methods"]["adaptive"]["rows"], row["options"]) for row in rows}
    assert {1, 2} <= {scored for scored, _ in stops} and any(s == n > 2 for s, n in stops)
    checked = bench(
        "served-check", "--served", str(served), "--derived", str(derived),
        "--out", str(tmp_path / "check.json"),
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr[-2000:]
    figures = json.loads((tmp_path / "check.json").read_text())["methods"]
    for method in ("prior", "adaptive"):
        assert figures[method]["rows"] == len(rows)
        assert figures[method]["same_top"] == 1.0
        assert figures[method]["max_probability_gap"] <= 1e-6
    assert figures["adaptive"]["served_escalated"] == figures["adaptive"]["derived_escalated"]
    assert figures["adaptive"]["served_rows"] == figures["adaptive"]["derived_rows"]
    assert figures["adaptive"]["escalation_flips"] == []


def test_served_check_names_a_decision_that_stopped_at_other_rows(
    derived: Path, tmp_path: Path
) -> None:
    run = json.loads(derived.read_text())
    confirmed = [
        r
        for r in run["rows"]
        if r["options"] > 2 and r["methods"].get("adaptive", {}).get("orderings") == 2
    ]
    moved = confirmed[0]  # kept its one row's answer at two rows
    moved["methods"]["adaptive"]["orderings"] = moved["options"]  # as if its half turn disagreed
    path = tmp_path / "moved.json"
    path.write_text(json.dumps(run))
    bench(
        "served-check",
        "--served",
        str(path),
        "--derived",
        str(derived),
        "--out",
        str(tmp_path / "c.json"),
    )
    figures = json.loads((tmp_path / "c.json").read_text())["methods"]["adaptive"]
    assert figures["escalation_flips"] == [moved["id"]]


def test_served_check_fails_where_the_served_answers_differ(derived: Path, tmp_path: Path) -> None:
    run = json.loads(derived.read_text())
    for row in run["rows"]:
        for method in ("prior", "adaptive"):
            if method in row["methods"]:
                probabilities = row["methods"][method]["probabilities"]
                row["methods"][method]["probabilities"] = probabilities[::-1]
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(run))
    checked = bench("served-check", "--served", str(moved), "--derived", str(derived))
    assert checked.returncode == 1


def test_replay_waits_for_each_audit_and_the_live_prior_is_the_arithmetic_of_those_rows(
    slow_server: procs.Running, calibration: Path, derived: Path, tmp_path: Path
) -> None:
    out = tmp_path / "replay.json"
    done = bench(
        "replay", "--url", slow_server.url, "--data", str(DATA), "--split", "test", "--options", "4",
        "--limit", "8", "--workload", RENAMED, "--orderings", "prior", "--audits", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    requests = json.loads(out.read_text())["requests"]
    assert [r["audit"]["audits"] for r in requests] == list(range(1, 9))
    checked = bench(
        "audit-check", "--results", str(derived), "--calibration", str(calibration),
        "--replay", str(out), "--orders", "20", "--out", str(tmp_path / "check.json"),
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr[-2000:]
    figures = json.loads((tmp_path / "check.json").read_text())["figures"]
    against = figures["replay"]
    assert against["decisions"] == against["server_audits"] == 8
    assert against["max_prior_gap"] <= 1e-9
    assert against["server_agreement"] == against["offline_agreement"]
    assert figures["default/4"]["settled_in"] > 0


def test_paced_replay_sends_each_row_once_under_the_methods_in_turn(
    server: procs.Running, tmp_path: Path
) -> None:
    out = tmp_path / "paced.json"
    done = bench(
        "replay", "--url", server.url, "--data", str(DATA), "--split", "test", "--options", "3",
        "--limit", "6", "--orderings", "none", "rotations", "--rate", "20", "--seed", "paced",
        "--access-log", str(server.log), "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    requests = json.loads(out.read_text())["requests"]
    assert [r["orderings"] for r in requests] == ["none", "rotations"] * 3
    assert [r["rows"] for r in requests] == [1, 3] * 3
    assert len({r["id"] for r in requests}) == 6
    assert [r["request_id"] for r in requests] == [f"paced-{k}" for k in range(6)]
    logged = server.log.read_text()
    assert all(f"request_id={r['request_id']} " in logged for r in requests)
    assert all(r["scoring_s"] is not None and r["scoring_s"] >= 0 for r in requests)
    assert "| rotations |" in done.stdout


def test_replay_refuses_to_wait_for_audits_in_open_loop() -> None:
    done = bench(
        "replay", "--url", "http://127.0.0.1:9", "--data", str(DATA), "--audits", "--rate", "1"
    )
    assert done.returncode == 2
    assert "--audits" in done.stderr


def _audited(first: float) -> live_prior.Audited:
    return live_prior.Audited([first, 1 - first], True, 0.5)


def test_audits_to_settle_counts_from_the_last_time_the_live_prior_came_back() -> None:
    # within at 2 (exactly the target), out at 5 (three 0.6s pull it off), back from 6 on
    firsts = [0.5, 0.5, 0.6, 0.6, 0.6, 0.4, 0.4]
    settled = audit_check.audits_to_settle([_audited(f) for f in firsts], (0.5, 0.5), (0.5, 0.5))
    assert settled == 6


def test_one_audit_never_settles_since_its_standard_error_is_not_known() -> None:
    assert audit_check.audits_to_settle([_audited(0.9)], (0.5, 0.5), (0.9, 0.1)) is None


def test_drift_crossing_counts_the_audits_after_the_switch() -> None:
    def record(audits: int, drift: float | None) -> dict[str, Any]:
        return {
            "id": f"r{audits}",
            "audit": {"audits": audits, "drift": drift, "drift_threshold": 3.0},
        }

    records = [record(1, None), record(2, 3.5), record(3, 2.0), record(4, 2.9), record(5, 3.1)]
    assert replay.drift_crossing(records, 2)["audits_after_switch"] == 3
    assert replay.drift_crossing(records[:4], 2)["audits_after_switch"] is None
