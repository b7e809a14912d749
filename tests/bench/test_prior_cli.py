"""`python -m bench prior` end to end, as a user runs it, on a live stub server.

The stub's logits hash each option with its position, so a decision's rotations
disagree and its prior is not uniform: every fitted number can be recomputed
here from the server's own rotation answers with the server package's own
arithmetic (`semif_serve.decisions.prior`), and must match exactly.
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
from bench.labelled import metrics, scoring
from bench.labelled import prior as fitting
from bench.labelled import rows as labelled
from semif_serve.decisions import prior as pride
from tests.bench import bench_cli
from tests.calibration_files import MATCHING

TOKEN = "prior-token-" + "0123456789abcdef" * 2
DATA = Path(__file__).resolve().parents[2] / "bench" / "data" / "labelled.jsonl"
PNG = b"\x89PNG\r\n\x1a\n"
# (option count, rows taken, the workload field they carry (None: --workload's))
GROUPS = [(2, 8, None), (3, 9, "billing"), (4, 3, "billing"), (5, 3, None)]
DEFAULT = "triage"
NOT_FITTED = {("billing", 4): 3, (DEFAULT, 5): 3}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[procs.Running]:
    with procs.semif_serve(
        procs.stub_env(), TOKEN, log_dir=tmp_path_factory.mktemp("logs")
    ) as running:
        yield running


def chosen() -> list[dict[str, Any]]:
    """Rows of our labelled set in the four GROUPS, two too small to fit."""
    by_count: dict[int, list[dict[str, Any]]] = {}
    for row in labelled.load(DATA):
        by_count.setdefault(len(row["options"]), []).append(row)
    return [
        row if workload is None else {**row, "workload": workload}
        for n, taken, workload in GROUPS
        for row in by_count[n][:taken]
    ]


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def decisions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chosen rows, every other one without its label (the fit must not need it)."""
    rows = [
        {key: value for key, value in row.items() if not (key == "label" and k % 2)}
        for k, row in enumerate(chosen())
    ]
    return jsonl(tmp_path_factory.mktemp("data") / "decisions.jsonl", rows)


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return bench_cli.run(TOKEN, *args)


def fit(
    server: procs.Running, decisions: Path, out: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    return bench(
        "prior",
        "--url",
        server.url,
        "--data",
        str(decisions),
        "--out",
        str(out),
        "--workload",
        DEFAULT,
        *extra,
    )


@pytest.fixture(scope="module")
def fitted(
    server: procs.Running, decisions: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("prior")
    done = fit(
        server,
        decisions,
        out / "calibration.json",
        "--progress-every",
        "0",
        "--report",
        str(out / "report.json"),
        "--plot",
        str(out / "prior.png"),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {"done": done, "file": json.loads((out / "calibration.json").read_text()), "dir": out}


def rotations(server: procs.Running, row: dict[str, Any]) -> list[dict[str, Any]]:
    return answer(server, row)["orderings"]


def answer(server: procs.Running, row: dict[str, Any]) -> dict[str, Any]:
    response = asyncio.run(
        call(server.target, "POST", "/decide", labelled.request(row, "rotations"))
    )
    assert response.status == 200
    return response.json()


def debiased(result: dict[str, Any], prior: list[float]) -> list[float]:
    """A row's probabilities with the prior divided out by position (max-shifted softmax)."""
    logits = result["option_logits"]
    shifted = pride.debias([v - max(logits) for v in logits], prior)
    weights = [math.exp(v - max(shifted)) for v in shifted]
    return [w / sum(weights) for w in weights]


def lowest_threshold(server: procs.Running, rows: list[dict[str, Any]], target: float) -> float:
    """The threshold by its definition, searched over every candidate: each decision debiased by
    the mean prior of the OTHER decisions; at or above t answered by its one row, below it by the
    staged rule (the one-row top kept where the half turn's debiased top confirms it, else the
    rotations'); the lowest t at which the answers with the rotations' top reach `target`, 1.0
    where none does."""
    answers = [answer(server, row) for row in rows]
    priors = [pride.decision_prior(a["orderings"]) for a in answers]
    margins, same, settled = [], [], []
    for k, (row, served) in enumerate(zip(rows, answers)):
        others = pride.workload_prior(priors[:k] + priors[k + 1 :])
        probabilities = debiased(served["orderings"][0], others)
        ranked = sorted(probabilities, reverse=True)
        margins.append(ranked[0] - ranked[1])
        ids = [option["id"] for option in row["options"]]
        one = ids[probabilities.index(ranked[0])]
        half = served["orderings"][len(ids) // 2]
        by_id = dict(zip(half["option_ids"], debiased(half, others)))
        confirmed = max(ids, key=by_id.__getitem__) == one
        same.append(one == served["combined"]["top"])
        settled.append(same[-1] if confirmed else True)
    candidates = sorted({0.0, *(min(math.nextafter(m, 1.0), 1.0) for m in margins)})
    return next(
        (
            t
            for t in candidates
            if sum(done if m < t else ok for m, ok, done in zip(margins, same, settled))
            >= target * len(rows) - 1e-9
        ),
        1.0,
    )


def test_each_group_is_the_mean_of_its_decisions_priors_from_the_servers_rotations(
    fitted: dict[str, Any], server: procs.Running, decisions: Path
) -> None:
    expected: dict[str, dict[str, Any]] = {}
    for (workload, n), rows in fitting.groups(
        labelled.load(decisions, labelled=False), DEFAULT
    ).items():
        if (workload, n) not in NOT_FITTED:
            expected.setdefault(workload, {})[str(n)] = {
                **pride.entry([pride.decision_prior(rotations(server, r)) for r in rows]),
                "threshold": lowest_threshold(server, rows, 0.97),
            }
    assert fitted["file"]["priors"] == expected
    assert expected[DEFAULT]["2"]["decisions"] == 8 and expected["billing"]["3"]["decisions"] == 9
    assert all(
        entry["prior"] != pytest.approx([1 / int(n)] * int(n), abs=1e-3)
        for entries in expected.values()
        for n, entry in entries.items()
    ), "the stub's positions should bias it"


def test_a_new_file_is_bound_to_what_the_server_reports_and_holds_no_temperatures(
    fitted: dict[str, Any], server: procs.Running
) -> None:
    health = asyncio.run(call(server.target, "GET", "/health")).json()
    document = fitted["file"]
    assert (document["model"], document["revision"], document["prompt_version"]) == (
        health["model"],
        health["revision"],
        health["prompt_version"],
    )
    assert "workloads" not in document
    facts = document["fitted"]["priors"]
    assert facts["decisions"] == 17 and facts["min_decisions"] == pride.MIN_DECISIONS == 8
    assert facts["not_fitted"] == {
        "billing/4": "3 decision(s), fewer than the 8 a prior needs",
        f"{DEFAULT}/5": "3 decision(s), fewer than the 8 a prior needs",
    }
    threshold = facts["threshold"]
    assert {key: threshold[key] for key in ("signal", "fit", "target")} == {
        "signal": "margin, then the half turn",
        "fit": "leave-one-out",
        "target": 0.97,
    }
    assert set(threshold["on_fit_decisions"]) == {"billing/3", f"{DEFAULT}/2"}
    short = {
        k: g for k, g in threshold["on_fit_decisions"].items() if g["adaptive_same_top"] < 0.97
    }
    # Short of the target only where the half turns confirm too many wrong tops: all escalate.
    assert all(
        document["priors"][k.split("/")[0]][k.split("/")[1]]["threshold"] == 1.0 for k in short
    )
    assert all(f"prior: {k}: adaptive reaches" in fitted["done"].stderr for k in short)


def without(document: dict[str, Any], *path: str) -> dict[str, Any]:
    """`document` with the key at `path` removed (a copy)."""
    copy = json.loads(json.dumps(document))
    inner = copy
    for key in path[:-1]:
        inner = inner[key]
    del inner[path[-1]]
    return copy


def test_the_threshold_fit_is_label_free_the_same_file_but_its_date_without_labels(
    server: procs.Running, tmp_path: Path
) -> None:
    rows = chosen()
    assert all("label" in row for row in rows)
    files = []
    for name, kept in (("labelled", rows), ("unlabelled", [without(r, "label") for r in rows])):
        data = jsonl(tmp_path / f"{name}.jsonl", kept)
        done = fit(server, data, tmp_path / f"{name}.json")
        assert done.returncode == 0, done.stderr[-2000:]
        files.append(json.loads((tmp_path / f"{name}.json").read_text()))
    labelled_file, unlabelled_file = (
        without(without(f, "fitted", "priors", "date"), "fitted", "priors", "data") for f in files
    )
    assert labelled_file == unlabelled_file
    assert any(
        e["threshold"] > 0 for entries in labelled_file["priors"].values() for e in entries.values()
    ), "a threshold of 0 everywhere would prove nothing"


def test_a_higher_target_escalates_more_and_target_one_matches_the_rotations_everywhere(
    server: procs.Running, decisions: Path, tmp_path: Path
) -> None:
    found = {}
    for target in ("0.5", "1"):
        done = fit(server, decisions, tmp_path / f"{target}.json", "--target", target)
        assert done.returncode == 0, done.stderr[-2000:]
        found[target] = json.loads((tmp_path / f"{target}.json").read_text())
    for workload, entries in found["1"]["priors"].items():
        for n, entry in entries.items():
            assert entry["threshold"] >= found["0.5"]["priors"][workload][n]["threshold"]
    groups = found["1"]["fitted"]["priors"]["threshold"]["on_fit_decisions"]
    # The staged rule agrees everywhere, or escalates everything: the most it can do.
    assert all(g["adaptive_same_top"] == 1.0 or g["escalated"] == 1.0 for g in groups.values())
    refused = fit(server, decisions, tmp_path / "bad.json", "--target", "0")
    assert refused.returncode == 2 and "--target must be in (0, 1]" in refused.stderr


def test_groups_under_eight_decisions_are_named_not_fitted_and_not_scored(
    fitted: dict[str, Any],
) -> None:
    done = fitted["done"]
    for (workload, n), count in NOT_FITTED.items():
        why = f"{count} decision(s), fewer than the 8 a prior needs"
        assert f"prior: {workload}, {n} options: not fitted: {why}" in done.stderr
        assert f"not fitted: {workload}, {n} options: {why}" in done.stdout
        assert str(n) not in fitted["file"]["priors"].get(workload, {})
    assert (
        "scoring 17 decisions under their rotations (43 rows) in 2 group(s)" in done.stderr
    )  # 8 x 2 + 9 x 3


def test_progress_counts_every_decision_with_the_elapsed_time(fitted: dict[str, Any]) -> None:
    lines = [
        line
        for line in fitted["done"].stderr.splitlines()
        if line.startswith("prior: decisions scored: ")
    ]
    counts = [line.split(": ")[2].split(" ")[0] for line in lines]
    assert counts[:17] == [f"{k}/17" for k in range(1, 18)]
    assert all(line.endswith(" s)") and "(" in line for line in lines)


def test_the_table_report_and_plot(fitted: dict[str, Any], decisions: Path) -> None:
    done, out = fitted["done"], fitted["dir"]
    entry = fitted["file"]["priors"]["billing"]["3"]
    row = f"| billing  | 3       | 9         | {' / '.join(f'{p:.3f}' for p in entry['prior'])} | 0.333   |"
    assert row in done.stdout, done.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["priors"] == fitted["file"]["priors"] and len(report["decisions"]) == 17
    billing = [
        d["prior"]
        for d in report["decisions"].values()
        if d["workload"] == "billing" and d["options"] == 3
    ]
    assert pride.workload_prior(billing) == entry["prior"]
    assert (out / "prior.png").read_bytes().startswith(PNG)


def test_an_existing_bound_file_keeps_its_temperatures_and_other_workloads(
    fitted: dict[str, Any], server: procs.Running, decisions: Path, tmp_path: Path
) -> None:
    binding = {key: fitted["file"][key] for key in ("model", "revision", "prompt_version")}
    old_prior = {"prior": [0.5, 0.5], "decisions": 9}
    existing = {
        **binding,
        "fitted": {"rows": 62, "nll_after": {"ops": {"none": 1.0}}},
        "workloads": {"ops": {"none": 2.0, "rotations": 1.5}},
        "priors": {"ops": {"2": old_prior}, DEFAULT: {"4": {"prior": [0.25] * 4, "decisions": 8}}},
    }
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(existing))
    done = fit(server, decisions, path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "merged: temperatures and other workloads kept" in done.stderr
    document = json.loads(path.read_text())
    assert document["workloads"] == existing["workloads"]
    assert {k: v for k, v in document["fitted"].items() if k != "priors"} == existing["fitted"]
    # a workload fitted now is replaced whole (its old 4-option prior goes); one not in the data stays
    assert document["priors"] == {"ops": {"2": old_prior}, **fitted["file"]["priors"]}
    assert not list(tmp_path.glob(".*partial"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"model": "another/model"},
            "is bound to model 'another/model', but the server reports 'stub'",
        ),
        (
            {"prompt_version": "direct-options-v1"},
            "is bound to prompt_version 'direct-options-v1', but the server reports 'stub-v1'",
        ),
    ],
)
def test_a_file_bound_to_something_else_is_refused_before_scoring_and_left_untouched(
    fitted: dict[str, Any],
    server: procs.Running,
    decisions: Path,
    tmp_path: Path,
    change: dict[str, str],
    message: str,
) -> None:
    binding = {key: fitted["file"][key] for key in ("model", "revision", "prompt_version")}
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({**binding, **change, "workloads": {"ops": {"none": 2.0}}}))
    before = path.read_bytes()
    done = fit(server, decisions, path)
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert "decisions scored" not in done.stderr and "scoring" not in done.stderr
    assert path.read_bytes() == before


def test_a_plain_file_and_a_broken_file_are_refused_and_left_untouched(
    server: procs.Running, decisions: Path, tmp_path: Path
) -> None:
    plain, broken = tmp_path / "plain.json", tmp_path / "broken.json"
    plain.write_text('{"ops": 2.0}')
    broken.write_text('{"model": ')
    for path, message in (
        (plain, "is a plain {workload: T} file with no binding"),
        (broken, "is not valid JSON"),
    ):
        before = path.read_bytes()
        done = fit(server, decisions, path)
        assert done.returncode == 1 and message in done.stderr, done.stderr
        assert path.read_bytes() == before


def test_nothing_fitted_writes_nothing(
    server: procs.Running, decisions: Path, tmp_path: Path
) -> None:
    small = tmp_path / "small.jsonl"
    small.write_text("".join(line + "\n" for line in decisions.read_text().splitlines()[:7]))
    done = fit(server, small, tmp_path / "calibration.json")
    assert done.returncode == 1
    assert (
        "prior: triage, 2 options: not fitted: 7 decision(s), fewer than the 8 a prior needs"
        in done.stderr
    )
    assert (
        "nothing fitted, nothing written" in done.stderr
        and not (tmp_path / "calibration.json").exists()
    )


def test_split_fits_one_side_only(server: procs.Running, tmp_path: Path) -> None:
    done = bench(
        "prior",
        "--url",
        server.url,
        "--data",
        str(DATA),
        "--out",
        str(tmp_path / "c.json"),
        "--split",
        "fit",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    fit_rows = [row for row in labelled.load(DATA) if row["split"] == "fit"]
    counts = {n: sum(len(row["options"]) == n for row in fit_rows) for n in (2, 3, 4, 5)}
    priors = json.loads((tmp_path / "c.json").read_text())["priors"]["default"]
    assert {n: e["decisions"] for n, e in priors.items()} == {
        str(n): c for n, c in counts.items() if c >= 8
    }
    assert (
        f"prior: default, 5 options: not fitted: {counts[5]} decision(s), fewer than the 8 a prior needs"
        in done.stderr
    )


def test_on_the_tiny_model_the_file_written_is_one_its_server_starts_with_and_serves(
    tiny_built: dict[str, str], decisions: Path, tmp_path: Path
) -> None:
    """The stub reports no revision, so only a real model shows the binding the command writes is the one
    a server of that model accepts at startup (and that the priors pass its checks)."""
    env = {**tiny_built, "OMP_NUM_THREADS": "1"}
    path, logs = tmp_path / "calibration.json", tmp_path / "logs"
    logs.mkdir()
    with procs.semif_serve(env, TOKEN, ready_timeout=120.0, log_dir=logs) as fitting_server:
        done = fit(fitting_server, decisions, path)
    assert done.returncode == 0, done.stderr[-2000:]
    document = json.loads(path.read_text())
    assert (document["model"], document["revision"]) == (
        tiny_built["SEMIF_MODEL"],
        tiny_built["SEMIF_REVISION"],
    )
    with procs.semif_serve(
        {**env, "SEMIF_CALIBRATION": str(path)}, TOKEN, ready_timeout=120.0, log_dir=logs
    ) as served:
        health = asyncio.run(call(served.target, "GET", "/health")).json()
        assert health["calibration"]["priors"] == {"billing": [3], DEFAULT: [2]}
        row = next(row for row in chosen() if len(row["options"]) == 2)
        response = asyncio.run(
            call(served.target, "POST", "/decide", labelled.request(row, "prior", DEFAULT))
        )
    assert response.status == 200, response.body[:300]
    assert response.json()["combined"]["prior"] == document["priors"][DEFAULT]["2"]["prior"]


def test_an_answer_that_is_not_the_rows_rotations_is_refused() -> None:
    row = {"id": "r", "options": [{"id": "a"}, {"id": "b"}, {"id": "c"}]}
    rotated = [{"option_ids": ids} for ids in (["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"])]
    assert fitting.rotation_results(row, {"orderings": rotated}) == rotated
    for wrong in (
        rotated[:2],
        [rotated[0], rotated[2], rotated[1]],
        [{"option_ids": ["a", "c", "b"]}, *rotated[1:]],
    ):
        with pytest.raises(scoring.ScoringError, match="not the 3 rotations"):
            fitting.rotation_results(row, {"orderings": wrong})


def test_an_answer_combined_by_another_method_than_asked_is_refused() -> None:
    row = {"id": "r", "options": [{"id": "a"}, {"id": "b"}]}
    native = {
        "option_ids": ["a", "b"],
        "probabilities": [0.6, 0.4],
        "option_logits": [1.0, 0.6],
        "prompt_version": "v",
    }
    averaged = {
        "option_ids": ["a", "b"],
        "orderings": [native],
        "combined": {
            "method": "none",
            "orderings": 1,
            "probabilities": [0.6, 0.4],
            "top": "a",
            "agreement": 1.0,
        },
    }
    assert scoring.record(row, "none", native)["top"] == 0
    with pytest.raises(
        scoring.ScoringError, match="asked for orderings 'prior', the answer is combined by None"
    ):
        scoring.record(row, "prior", native)
    with pytest.raises(
        scoring.ScoringError, match="asked for orderings 'prior', the answer is combined by 'none'"
    ):
        scoring.record(row, "prior", averaged)


def test_help_names_the_inputs_and_the_rule() -> None:
    done = bench("prior", "--help")
    assert done.returncode == 0
    for text in (
        "--url",
        "--data",
        "--out",
        "--workload",
        "--split",
        "--progress-every",
        "fewer than 8 decisions",
        "rotations",
    ):
        assert text in " ".join(done.stdout.split()), text


# -- evaluate --methods ... prior, on a server loaded with the fitted priors ----------------------------


@pytest.fixture(scope="module")
def prior_server(
    fitted: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[procs.Running]:
    """The stub with the fitted priors. The stub reports no model revision, so the file is rebound by hand to
    what a stub server checks a binding against (its default SEMIF_MODEL and SEMIF_REVISION)."""
    path = tmp_path_factory.mktemp("served") / "calibration.json"
    path.write_text(json.dumps({**MATCHING, "priors": fitted["file"]["priors"]}))
    env = {**procs.stub_env(), "SEMIF_CALIBRATION": str(path)}
    with procs.semif_serve(env, TOKEN, log_dir=tmp_path_factory.mktemp("logs")) as running:
        yield running


@pytest.fixture(scope="module")
def evaluated(
    prior_server: procs.Running, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("evaluate")
    data = jsonl(out / "labelled.jsonl", chosen())
    done = bench(
        "evaluate",
        "--url",
        prior_server.url,
        "--data",
        str(data),
        "--methods",
        "none",
        "rotations",
        "prior",
        "--workload",
        DEFAULT,
        "--out",
        str(out / "results.json"),
        "--plot",
        str(out / "reliability.png"),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {
        "done": done,
        "results": json.loads((out / "results.json").read_text()),
        "dir": out,
        "data": data,
    }


def test_evaluate_keeps_what_the_server_answers_under_prior_with_the_rows_workload(
    evaluated: dict[str, Any], prior_server: procs.Running
) -> None:
    by_id = {row["id"]: row for row in evaluated["results"]["rows"]}
    asked = 0
    for row in chosen():
        workload, n = row.get("workload", DEFAULT), len(row["options"])
        if (workload, n) in NOT_FITTED:
            assert "prior" not in by_id[row["id"]]["methods"]
            continue
        response = asyncio.run(
            call(prior_server.target, "POST", "/decide", labelled.request(row, "prior", workload))
        )
        assert response.status == 200
        combined = response.json()["combined"]
        kept = by_id[row["id"]]["methods"]["prior"]
        assert (
            kept["probabilities"] == combined["probabilities"]
            and kept["prior"] == combined["prior"]
        )
        assert kept["orderings"] == 1 and kept["top"] == [o["id"] for o in row["options"]].index(
            combined["top"]
        )
        asked += 1
    assert asked == 17


def test_rows_with_no_prior_are_skipped_and_listed_by_workload_and_option_count(
    evaluated: dict[str, Any],
) -> None:
    results = evaluated["results"]
    skipped = sorted(
        row["id"]
        for row in chosen()
        if (row.get("workload", DEFAULT), len(row["options"])) in NOT_FITTED
    )
    assert sorted(results["skipped"]["prior"]) == skipped and len(skipped) == 6
    assert results["skipped"]["rotations"] == results["skipped"]["none"] == []
    assert (
        "prior: 6 rows not scored (no prior on the server for its (workload, option count): billing/4, triage/5)"
        in evaluated["done"].stdout
    )


def test_prior_figures_recompute_from_the_kept_rows(evaluated: dict[str, Any]) -> None:
    results = evaluated["results"]
    summary = results["summary"]
    rows = [row for row in results["rows"] if "prior" in row["methods"]]
    labels = [row["label"] for row in rows]
    prior = [row["methods"]["prior"] for row in rows]
    rotated = [row["methods"]["rotations"] for row in rows]
    figures = summary["prior"]
    assert figures["rows"] == 17 and figures["rows_per_decision"] == 1.0
    assert summary["rotations"]["rows_per_decision"] == pytest.approx(
        (8 * 2 + 9 * 3 + 3 * 4 + 3 * 5) / 23
    )
    assert figures["accuracy"] == pytest.approx(
        metrics.accuracy([r["probabilities"] for r in prior], labels)
    )
    assert figures["nll"] == pytest.approx(metrics.nll([r["probabilities"] for r in prior], labels))
    assert figures["brier"] == pytest.approx(
        metrics.brier([r["probabilities"] for r in prior], labels)
    )
    assert figures["ece"] == pytest.approx(metrics.ece([r["probabilities"] for r in prior], labels))
    assert figures["top_position"] == pytest.approx(
        [[r["top"] for r in prior].count(k) / 17 for k in range(3)]
    )
    same = sum(p["top"] == r["top"] for p, r in zip(prior, rotated)) / 17
    kl = (
        sum(metrics.kl(r["probabilities"], p["probabilities"]) for p, r in zip(prior, rotated)) / 17
    )
    assert figures["vs_rotations"] == pytest.approx({"rows": 17, "same_top": same, "kl": kl})
    assert (
        0 < kl and "unanimous_share" not in figures
    )  # one ordering: its agreement is 1 by construction
    none = summary["none"]["vs_rotations"]
    assert none["rows"] == 23 and "vs_rotations" not in summary["rotations"]


def test_evaluate_prints_rows_per_decision_and_the_comparison_with_rotations(
    evaluated: dict[str, Any],
) -> None:
    out = evaluated["done"].stdout
    summary = evaluated["results"]["summary"]
    assert (
        "| rows/decision |" in out
        and "mean KL(rotations ‖ method)" in out
        and "top share (prior)" in out
    )
    line = next(
        line
        for line in out.splitlines()
        if line.startswith("| prior ") and "| 17 " in line and "1.00" in line
    )
    assert f"{summary['prior']['vs_rotations']['same_top']:.3f}" in line, line
    assert (evaluated["dir"] / "reliability.png").read_bytes().startswith(PNG)


def test_derived_runs_still_ask_prior_on_its_own(
    evaluated: dict[str, Any], prior_server: procs.Running, tmp_path: Path
) -> None:
    done = bench(
        "evaluate",
        "--url",
        prior_server.url,
        "--data",
        str(evaluated["data"]),
        "--methods",
        "none",
        "rotations",
        "prior",
        "--workload",
        DEFAULT,
        "--derive",
        "--out",
        str(tmp_path / "derived.json"),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    derived = json.loads((tmp_path / "derived.json").read_text())
    assert derived["derived"] is True and derived["summary"] == evaluated["results"]["summary"]


def test_calibrate_keeps_the_priors_of_the_file_it_refits(
    evaluated: dict[str, Any], fitted: dict[str, Any], tmp_path: Path
) -> None:
    path, fresh = tmp_path / "calibration.json", tmp_path / "fresh.json"
    path.write_text(json.dumps(fitted["file"]))
    for out in (path, fresh):
        done = bench(
            "calibrate",
            "--results",
            str(evaluated["dir"] / "results.json"),
            "--out",
            str(out),
            "--workload",
            DEFAULT,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    document, alone = json.loads(path.read_text()), json.loads(fresh.read_text())
    assert document["priors"] == fitted["file"]["priors"] and "priors" not in alone
    assert document["fitted"]["priors"] == fitted["file"]["fitted"]["priors"]
    assert document["workloads"] == alone["workloads"] and any(
        "prior" in ms for ms in alone["workloads"].values()
    )
