"""`semif-serve audit export` (extension): two replicas' audits summed into a calibration file that a
server loads, bound like any other, refused by a server of another model or dtype."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from semif_serve.config import DEFAULT_MODEL, DEFAULT_REVISION
from semif_serve.decisions import audit_export, calibration_file, live_prior, prior
from semif_serve.engine.stub import PROMPT_VERSION
from tests.calibration_files import prior_path
from tests.served_process import Process
from tests.wire_client import TOKEN, request

WORDS = ["kettle", "ice", "granite", "fog", "ember", "dune", "cedar", "brook", "amber"]


def body(first: int, count: int, orderings: str = "prior") -> dict[str, Any]:
    return {
        "state": "a shared state",
        "workload": "triage",
        "decisions": [
            {
                "id": f"d{k}",
                "question": f"Which one ({k})?",
                "orderings": orderings,
                "options": [
                    {"id": f"o{i}", "description": f"{WORDS[(k + 3 * i) % 9]} {k}"}
                    for i in range(4)
                ],
            }
            for k in range(first, first + count)
        ],
    }


async def audited(server: Process, count: int) -> None:
    """Until the replica has done `count` audits."""
    for _ in range(500):
        answer = (await request(server.port, "GET", "/v1/audit")).json
        if sum(entry["outcomes"]["done"] for entry in answer["audits"]) == count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the audits never finished")


async def stopped(server: Process) -> None:
    server.proc.send_signal(signal.SIGTERM)
    assert await server.exit_code(30) == 0


def export(*urls: str, out: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "semif_serve", "audit", "export", "--out", str(out)]
    for url in urls:
        argv += ["--url", url]
    env = {**os.environ, "SEMIF_API_TOKEN": TOKEN}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)


async def test_two_replicas_export_a_file_a_server_loads(tmp_path: Path) -> None:
    served = prior_path(tmp_path)
    env = {"SEMIF_CALIBRATION": served, "SEMIF_AUDIT_RATE": "1"}
    one, two = await Process.start(**env), await Process.start(**env)
    try:
        assert (await request(one.port, "POST", "/decide/shared", body(0, 7))).status == 200
        assert (await request(two.port, "POST", "/decide/shared", body(7, 5))).status == 200
        await audited(one, 7)
        await audited(two, 5)
        rotated = (await request(one.port, "POST", "/decide/shared", body(0, 12, "rotations"))).json
        out = tmp_path / "exported.json"
        done = await asyncio.to_thread(
            export, f"http://127.0.0.1:{one.port}", f"http://127.0.0.1:{two.port}", out=out
        )
    finally:
        for server in (one, two):
            await stopped(server)
    assert done.returncode == 0, done.stderr
    assert "temperature for method 'prior' was fitted against the old prior" in done.stderr
    assert "sorting n=2: 0 audit(s); kept the served prior" in done.stderr
    document = json.loads(out.read_text())
    expected = prior.workload_prior(
        [prior.decision_prior(r["orderings"]) for r in rotated["results"]]
    )
    entry = document["priors"]["triage"]["4"]
    assert entry["decisions"] == 12
    assert all(math.isclose(a, b, abs_tol=1e-9) for a, b in zip(entry["prior"], expected))
    original = json.loads(Path(served).read_text())
    assert document["priors"]["sorting"] == original["priors"]["sorting"]
    assert document["workloads"] == original["workloads"]  # every temperature kept
    # it loads as a server would read it, bound to what was served, and a server serves it
    table = calibration_file.read(str(out)).table
    calibration_file.check_binding(table, DEFAULT_MODEL, DEFAULT_REVISION, PROMPT_VERSION, None)
    third = await Process.start(SEMIF_CALIBRATION=str(out))
    try:
        health = (await request(third.port, "GET", "/health")).json
        assert health["calibration_sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    finally:
        await stopped(third)


def test_a_server_of_another_model_or_dtype_refuses_the_export(tmp_path: Path) -> None:
    document = audit_export.exported([replica()], 0.97, "2026-12-07").document
    path = tmp_path / "exported.json"
    path.write_text(json.dumps(document))
    table = calibration_file.read(str(path)).table
    calibration_file.check_binding(
        table, DEFAULT_MODEL, DEFAULT_REVISION, PROMPT_VERSION, "float32"
    )
    for model, dtype in (("another/model", "float32"), (DEFAULT_MODEL, "bfloat16")):
        with pytest.raises(calibration_file.BindingMismatch):
            calibration_file.check_binding(table, model, DEFAULT_REVISION, PROMPT_VERSION, dtype)


# -- the export's rules on /v1/audit answers as data ------------------------------------------------


def replica(sums: tuple[float, ...] = (4.0, 3.0, 2.0, 1.0), audits: int = 10) -> dict[str, Any]:
    """A /v1/audit answer with one (workload, n) audited against the served prior."""
    tally = live_prior.Tally((0.4, 0.3, 0.2, 0.1)).as_json()
    tally.update(audits=audits, sums=list(sums), agreements=audits)
    return {
        "calibration_sha256": "a" * 64,
        "calibration": {
            "model": DEFAULT_MODEL,
            "revision": DEFAULT_REVISION,
            "prompt_version": PROMPT_VERSION,
            "workloads": {"triage": {"none": 2.0, "prior": 1.5}},
            "priors": {"triage": {"4": {"prior": [0.4, 0.3, 0.2, 0.1], "decisions": 12}}},
        },
        "audits": [{"workload": "triage", "n": 4, **tally}],
    }


def test_replicas_sum_into_one_prior() -> None:
    result = audit_export.exported(
        [replica((4.0, 3.0, 2.0, 1.0), 10), replica((2.5, 2.5, 2.5, 2.5), 10)], 0.97, "d"
    )
    entry = result.document["priors"]["triage"]["4"]
    assert entry == {"prior": [0.325, 0.275, 0.225, 0.175], "decisions": 20}
    assert result.document["fitted"]["audits"] == 20 and result.document["fitted"]["replicas"] == 2
    assert result.warnings and "old prior" in result.warnings[0]


@pytest.mark.parametrize(
    "field,value",
    [("calibration_sha256", "b" * 64), ("model", "another/model"), ("dtype", "bfloat16")],
)
def test_replicas_serving_different_things_are_refused(field: str, value: str) -> None:
    other = replica()
    if field == "calibration_sha256":
        other[field] = value
    else:
        other["calibration"][field] = value
    with pytest.raises(ValueError, match="replica 2"):
        audit_export.exported([replica(), other], 0.97, "d")


def test_too_few_audits_or_an_older_prior_keep_the_served_entry() -> None:
    few = audit_export.exported([replica(audits=prior.MIN_DECISIONS - 1)], 0.97, "d")
    assert few.document["priors"]["triage"]["4"] == {"prior": [0.4, 0.3, 0.2, 0.1], "decisions": 12}
    stale = replica()
    stale["audits"][0]["served_prior"] = [0.25] * 4
    kept = audit_export.exported([stale], 0.97, "d")
    assert kept.document["priors"]["triage"]["4"]["decisions"] == 12
    assert any("older prior" in note for note in kept.notes)


def test_a_refitted_threshold_is_never_below_the_served_one() -> None:
    disagreeing = [0] * live_prior.MARGIN_BINS
    disagreeing[live_prior.margin_bin(0.4)] = 10  # 10 of 100 disagree at margin 0.4
    added = live_prior.Summed(100, (25.0,) * 4, 90, tuple(disagreeing), (0,) * len(disagreeing))
    assert audit_export.refitted_threshold(0.2, added, 0.97) == pytest.approx(0.41)
    assert audit_export.refitted_threshold(0.5, added, 0.97) == 0.5
    assert audit_export.refitted_threshold(0.2, added, 0.85) == 0.2


def test_a_refit_counts_the_disagreements_the_half_turn_would_confirm() -> None:
    """Of 10 disagreeing at 0.1 and 5 at 0.4, the half turn confirms 8 of those at 0.1: escalated, they
    stay wrong, so at 0.9 (10 may stand) escalating below 0.11 leaves 8 + 5 and the refit must pass 0.4."""
    disagreeing, confirmed = [0] * live_prior.MARGIN_BINS, [0] * live_prior.MARGIN_BINS
    disagreeing[live_prior.margin_bin(0.1)], disagreeing[live_prior.margin_bin(0.4)] = 10, 5
    confirmed[live_prior.margin_bin(0.1)] = 8
    unconfirmed = live_prior.Summed(100, (25.0,) * 4, 85, tuple(disagreeing), (0,) * 100)
    added = live_prior.Summed(100, (25.0,) * 4, 85, tuple(disagreeing), tuple(confirmed))
    assert audit_export.refitted_threshold(0.05, unconfirmed, 0.9) == pytest.approx(0.11)
    assert audit_export.refitted_threshold(0.05, added, 0.9) == pytest.approx(0.41)


def test_what_would_not_load_is_never_returned() -> None:
    broken = copy.deepcopy(replica())
    broken["calibration"]["workloads"]["triage"]["prior"] = 99.0  # out of range
    with pytest.raises(ValueError, match="temperature"):
        audit_export.exported([broken], 0.97, "d")


def test_a_served_threshold_is_refitted_and_the_file_loads() -> None:
    """10 audits, 3 disagreeing at margin 0.3: at target 0.8 one may stand, so escalating below 0.31
    is what keeps 80 %; the served 0.1 is raised to it."""
    served = replica()
    served["calibration"]["priors"]["triage"]["4"]["threshold"] = 0.1
    served["audits"][0]["margins"]["disagreeing"][live_prior.margin_bin(0.3)] = 3
    exported = audit_export.exported([served], 0.8, "d").document
    assert exported["priors"]["triage"]["4"]["threshold"] == pytest.approx(0.31)
    table = calibration_file.bound(exported)
    assert table.priors["triage"][4].threshold == pytest.approx(0.31)


def test_exactly_the_minimum_of_audits_takes_the_live_prior_and_the_notes_say_which() -> None:
    eight = tuple(p * prior.MIN_DECISIONS for p in (0.4, 0.3, 0.2, 0.1))
    at = audit_export.exported([replica(eight, prior.MIN_DECISIONS)], 0.97, "d")
    assert at.document["priors"]["triage"]["4"]["decisions"] == prior.MIN_DECISIONS
    assert at.notes == [f"triage n=4: the live prior of {prior.MIN_DECISIONS} audits"]
    few = audit_export.exported([replica(audits=prior.MIN_DECISIONS - 1)], 0.97, "d")
    assert few.notes == [f"triage n=4: {prior.MIN_DECISIONS - 1} audit(s); kept the served prior"]


def test_the_file_says_how_it_was_fitted_and_the_replicas_answers_are_left_as_they_were() -> None:
    replicas = [replica(), replica((2.5, 2.5, 2.5, 2.5))]
    before = copy.deepcopy(replicas)
    result = audit_export.exported(replicas, 0.97, "2026-12-07")
    assert result.document["fitted"] == {
        "by": "semif-serve audit export",
        "date": "2026-12-07",
        "replicas": 2,
        "audits": 20,
        "target": 0.97,
        "from_sha256": "a" * 64,
    }
    assert replicas == before


def test_tallies_of_entries_not_served_are_passed_over_and_every_entry_counts() -> None:
    """A tally of a workload the file does not serve, or without sums, is skipped, not the end of
    the list; the audits of every entry taken are added into `fitted.audits`."""
    answer = replica()
    answer["calibration"]["priors"]["billing"] = {
        "4": {"prior": [0.4, 0.3, 0.2, 0.1], "decisions": 9}
    }
    triage = answer["audits"][0]
    answer["audits"] = [
        {**triage, "workload": "elsewhere"},
        {"workload": "triage", "n": 4, "audits": 3},  # no sums: a replica with audits off
        triage,
        {**triage, "workload": "billing"},
    ]
    result = audit_export.exported([answer], 0.97, "d")
    assert result.document["priors"]["triage"]["4"]["decisions"] == 10
    assert result.document["priors"]["billing"]["4"]["decisions"] == 10
    assert result.document["fitted"]["audits"] == 20


def test_a_replica_serving_another_model_is_named_with_both_values() -> None:
    other = replica()
    other["calibration"]["model"] = "another/model"
    with pytest.raises(ValueError) as refused:
        audit_export.exported([replica(), other], 0.97, "d")
    assert str(refused.value) == (
        f"replica 2 serves model 'another/model', replica 1 {DEFAULT_MODEL!r}: their audits "
        "cannot be added"
    )


def test_an_entry_kept_or_stale_does_not_end_the_export_of_the_next() -> None:
    """Entries in order: billing/4 with no audit, triage/3 audited against an older prior, triage/4
    with enough: the first two keep the served entry, the third still takes its live prior."""
    answer = replica()
    priors = answer["calibration"]["priors"]
    priors["billing"] = {"4": {"prior": [0.4, 0.3, 0.2, 0.1], "decisions": 9}}
    priors["triage"]["3"] = {"prior": [0.5, 0.3, 0.2], "decisions": 9}
    stale = live_prior.Tally((0.4, 0.4, 0.2)).as_json()
    stale.update(audits=10, sums=[5.0, 3.0, 2.0], agreements=10)
    answer["audits"].insert(0, {"workload": "triage", "n": 3, **stale})
    result = audit_export.exported([answer], 0.97, "d")
    assert result.document["priors"]["billing"]["4"]["decisions"] == 9
    assert result.document["priors"]["triage"]["3"]["decisions"] == 9
    assert result.document["priors"]["triage"]["4"]["decisions"] == 10
    assert "billing n=4: 0 audit(s); kept the served prior" in result.notes
    assert (
        "triage n=3: a replica's audits were counted against an older prior and are left out"
        in result.notes
    )
