"""`python -m bench evaluate` and `python -m bench calibrate` end to end, as a user runs them, on a live stub server.

The stub (SEMIF_SCORER=stub) is deterministic and carries a position effect, so
its answers differ between orderings: what the tools report can be recomputed
here from the server's own answers and the label file, and must match.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.common import procs
from bench.common.loadgen import call
from bench.labelled import fit, metrics
from bench.labelled import rows as labelled
from semif_serve.decisions.calibration_file import T_MAX, T_MIN
from tests.bench import bench_cli

TOKEN = "labelled-token-" + "0123456789abcdef" * 2
DATA = Path(__file__).resolve().parents[2] / "bench" / "data" / "labelled.jsonl"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[procs.Running]:
    with procs.semif_serve(
        procs.stub_env(), TOKEN, log_dir=tmp_path_factory.mktemp("logs")
    ) as running:
        yield running


@pytest.fixture(scope="module")
def subset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six rows of each option count (2..5) from our set, both splits represented."""
    chosen: dict[int, list[dict[str, Any]]] = {}
    for row in labelled.load(DATA):
        chosen.setdefault(len(row["options"]), []).append(row)
    path = tmp_path_factory.mktemp("data") / "subset.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for rows in chosen.values() for row in rows[:6]))
    return path


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return bench_cli.run(TOKEN, *args)


@pytest.fixture(scope="module")
def evaluated(
    server: procs.Running, subset: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("evaluate")
    done = bench(
        "evaluate",
        "--url",
        server.url,
        "--data",
        str(subset),
        "--out",
        str(out / "results.json"),
        "--plot",
        str(out / "reliability.png"),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {"done": done, "results": json.loads((out / "results.json").read_text()), "dir": out}


def without_results(record: dict[str, Any]) -> dict[str, Any]:
    """A derived run's record less the rotations' results it keeps (what asking the method alone gives)."""
    return {key: value for key, value in record.items() if key != "results"}


def served(server: procs.Running, row: dict[str, Any], method: str) -> dict[str, Any]:
    response = asyncio.run(call(server.target, "POST", "/decide", labelled.request(row, method)))
    assert response.status == 200
    return response.json()


def test_evaluate_keeps_the_served_probabilities_of_every_row_and_method(
    evaluated: dict[str, Any], server: procs.Running, subset: Path
) -> None:
    results = evaluated["results"]
    by_id = {row["id"]: row for row in results["rows"]}
    for row in labelled.load(subset):
        for method in ("none", "rotations", "all"):
            if method == "all" and len(row["options"]) > 4:
                assert method not in by_id[row["id"]]["methods"]
                continue
            answer = served(server, row, method)
            kept = by_id[row["id"]]["methods"][method]
            expected = (
                answer["combined"]["probabilities"] if method != "none" else answer["probabilities"]
            )
            assert kept["probabilities"] == expected, (row["id"], method)
            assert kept["agreement"] == (
                answer["combined"]["agreement"] if method != "none" else None
            )
    five = sorted(row["id"] for row in labelled.load(subset) if len(row["options"]) == 5)
    assert sorted(results["skipped"]["all"]) == five and results["skipped"]["rotations"] == []


def test_evaluate_figures_recompute_from_the_kept_rows(evaluated: dict[str, Any]) -> None:
    results = evaluated["results"]
    for method, figures in results["summary"].items():
        rows = [row for row in results["rows"] if method in row["methods"]]
        probabilities = [row["methods"][method]["probabilities"] for row in rows]
        labels = [row["label"] for row in rows]
        assert figures["rows"] == len(rows) == (18 if method == "all" else 24)
        assert figures["accuracy"] == pytest.approx(metrics.accuracy(probabilities, labels))
        assert figures["nll"] == pytest.approx(metrics.nll(probabilities, labels))
        assert figures["ece"] == pytest.approx(metrics.ece(probabilities, labels))
        tops = [row["methods"][method]["top"] for row in rows]
        assert figures["top_position"] == pytest.approx(
            [tops.count(k) / len(rows) for k in range(len(figures["top_position"]))]
        )
        assert figures["label_position"] == pytest.approx(
            [labels.count(k) / len(rows) for k in range(len(figures["label_position"]))]
        )
        assert tops == [metrics.top(p) for p in probabilities]
        if method != "none":
            unanimous = [row for row in rows if row["methods"][method]["agreement"] == 1.0]
            assert figures["unanimous_share"] == pytest.approx(len(unanimous) / len(rows))
    agreements = {row["methods"]["rotations"]["agreement"] for row in results["rows"]}
    assert agreements != {1.0}, "the stub's position effect should split some rotations"


def test_evaluate_prints_a_table_reports_progress_and_draws_a_png(
    evaluated: dict[str, Any],
) -> None:
    done = evaluated["done"]
    assert (
        "| method" in done.stdout and "| rotations" in done.stdout and "label share" in done.stdout
    )
    assert "all: 6 rows not scored" in done.stdout
    assert "evaluate: wrote" in done.stderr and "| method" not in done.stderr
    assert (evaluated["dir"] / "reliability.png").read_bytes().startswith(PNG)


def test_calibrate_from_saved_results_fits_each_method_on_the_fit_rows(
    evaluated: dict[str, Any], tmp_path: Path
) -> None:
    results_path = evaluated["dir"] / "results.json"
    done = bench(
        "calibrate",
        "--results",
        str(results_path),
        "--out",
        str(tmp_path / "calibration.json"),
        "--plot",
        str(tmp_path / "calibration.png"),
        "--workload",
        "ops",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    bound = json.loads((tmp_path / "calibration.json").read_text())
    assert (bound["model"], bound["prompt_version"]) == ("stub", "stub-v1")
    assert set(bound["workloads"]) == {"ops"} and set(bound["workloads"]["ops"]) == {
        "none",
        "rotations",
        "all",
    }
    rows = evaluated["results"]["rows"]
    for method, temperature in bound["workloads"]["ops"].items():
        fit_rows = [r for r in rows if r["split"] == "fit" and method in r["methods"]]
        test_rows = [r for r in rows if r["split"] == "test" and method in r["methods"]]
        expected = fit.fit_temperature(
            [r["methods"][method]["scores"] for r in fit_rows], [r["label"] for r in fit_rows]
        )
        assert T_MIN <= temperature <= T_MAX and temperature == pytest.approx(expected, rel=1e-9)
        after = fit.calibrate([r["methods"][method]["scores"] for r in test_rows], temperature)
        labels = [r["label"] for r in test_rows]
        assert bound["fitted"]["nll_after"]["ops"][method] == pytest.approx(
            metrics.nll(after, labels)
        )
        assert bound["fitted"]["ece_before"]["ops"][method] == pytest.approx(
            metrics.ece([r["methods"][method]["probabilities"] for r in test_rows], labels)
        )
    assert (tmp_path / "calibration.png").read_bytes().startswith(PNG)
    assert "| ops" in done.stdout


def test_calibrate_through_the_server_fits_what_the_saved_results_fit(
    evaluated: dict[str, Any], server: procs.Running, subset: Path, tmp_path: Path
) -> None:
    from_results = bench(
        "calibrate",
        "--results",
        str(evaluated["dir"] / "results.json"),
        "--out",
        str(tmp_path / "a.json"),
    )
    live = bench(
        "calibrate", "--url", server.url, "--data", str(subset), "--out", str(tmp_path / "b.json")
    )
    assert from_results.returncode == live.returncode == 0, live.stderr[-2000:]
    a, b = (json.loads((tmp_path / name).read_text()) for name in ("a.json", "b.json"))
    assert a["workloads"] == b["workloads"]


def test_a_bad_label_file_fails_before_any_request(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "state": "s", "question": "q", "options": [], "label": 0}\n')
    done = bench("evaluate", "--url", f"http://127.0.0.1:{procs.free_port()}", "--data", str(bad))
    assert done.returncode == 1 and "bad.jsonl:1: options must be a list" in done.stderr


def test_derived_methods_equal_the_methods_asked_one_by_one(
    evaluated: dict[str, Any], server: procs.Running, subset: Path, tmp_path: Path
) -> None:
    """--derive asks each row once; its none/rotations must be what asking for them gives (the stub is exact)."""
    done = bench(
        "evaluate",
        "--url",
        server.url,
        "--data",
        str(subset),
        "--out",
        str(tmp_path / "derived.json"),
        "--derive",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    derived = json.loads((tmp_path / "derived.json").read_text())
    assert derived["derived"] is True
    asked = {row["id"]: row["methods"] for row in evaluated["results"]["rows"]}
    for row in derived["rows"]:
        assert set(row["methods"]) == set(asked[row["id"]]), row["id"]
        for method, kept in row["methods"].items():
            assert without_results(kept) == asked[row["id"]][method], (row["id"], method)
    assert derived["summary"] == evaluated["results"]["summary"]


def test_evaluate_re_reports_saved_results_without_a_server(
    evaluated: dict[str, Any], tmp_path: Path
) -> None:
    done = bench(
        "evaluate",
        "--results",
        str(evaluated["dir"] / "results.json"),
        "--out",
        str(tmp_path / "again.json"),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (
        json.loads((tmp_path / "again.json").read_text())["summary"]
        == evaluated["results"]["summary"]
    )
    assert done.stdout == evaluated["done"].stdout


def test_all_max_options_asks_all_only_up_to_that_many_options(
    evaluated: dict[str, Any], server: procs.Running, subset: Path, tmp_path: Path
) -> None:
    """A lower cap skips 'all' on the larger rows (listed, with the cap) and changes nothing else."""
    done = bench(
        "evaluate",
        "--url",
        server.url,
        "--data",
        str(subset),
        "--all-max-options",
        "3",
        "--derive",
        "--out",
        str(tmp_path / "capped.json"),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    capped = json.loads((tmp_path / "capped.json").read_text())
    asked = {row["id"]: row["methods"] for row in evaluated["results"]["rows"]}
    for row in capped["rows"]:
        assert ("all" in row["methods"]) == (row["options"] <= 3), row["id"]
        for method, kept in row["methods"].items():
            assert without_results(kept) == asked[row["id"]][method], (row["id"], method)
    assert len(capped["skipped"]["all"]) == 12 and capped["all_max_options"] == 3
    assert "all: 12 rows not scored (more than 3 options (--all-max-options))" in done.stdout
    again = bench("evaluate", "--results", str(tmp_path / "capped.json"))
    assert again.stdout == done.stdout


def test_saved_runs_over_disjoint_rows_are_reported_and_fitted_as_one(
    evaluated: dict[str, Any], tmp_path: Path
) -> None:
    """One run per split, read together, gives the figures and the fit of the run over both."""
    whole = evaluated["results"]
    paths = []
    for split in ("fit", "test"):
        part = {**whole, "rows": [r for r in whole["rows"] if r["split"] == split], "split": split}
        ids = {r["id"] for r in part["rows"]}
        part["skipped"] = {m: [i for i in s if i in ids] for m, s in whole["skipped"].items()}
        paths.append(tmp_path / f"{split}.json")
        paths[-1].write_text(json.dumps(part))
    whole_path = evaluated["dir"] / "results.json"
    one = bench("evaluate", "--results", *map(str, paths))
    assert one.returncode == 0, one.stderr[-2000:]
    assert one.stdout == evaluated["done"].stdout
    fits = [
        bench("calibrate", "--results", *sources, "--out", str(tmp_path / f"cal{k}.json"))
        for k, sources in enumerate(([str(whole_path)], list(map(str, paths))))
    ]
    assert fits[0].returncode == fits[1].returncode == 0, fits[1].stderr[-2000:]
    a, b = (json.loads((tmp_path / f"cal{k}.json").read_text()) for k in range(2))
    assert a["workloads"] == b["workloads"] and a["fitted"]["nll_after"] == b["fitted"]["nll_after"]
    twice = bench("evaluate", "--results", str(paths[0]), str(paths[0]))
    assert twice.returncode == 1 and "rows saved in more than one of the runs" in twice.stderr
    other = {**json.loads(paths[1].read_text())}
    other["health"] = {**other["health"], "revision": "elsewhere"}
    paths[1].write_text(json.dumps(other))
    mixed = bench("evaluate", "--results", *map(str, paths))
    assert mixed.returncode == 1 and "revision 'elsewhere'" in mixed.stderr
