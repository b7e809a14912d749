"""Position priors in the calibration file (extension): what loads, and each refusal's exact line.

Startup prints a refusal as its one line, so each names the variable, the workload and the
entry it is about. In process through `calibration_file.load`; the real process's refusal is in
test_prior_http.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from semif_serve.decisions import calibration_file
from tests.calibration_files import PRIORS, WITH_PRIORS, prior_path

BINDING = {"model": "m", "revision": "r", "prompt_version": "p"}
FOUR = [0.4, 0.3, 0.2, 0.1]


def load(tmp_path: Path, document: Any) -> calibration_file.Table:
    path = tmp_path / "calibration_file.json"
    path.write_text(
        json.dumps(document), encoding="utf-8"
    )  # NaN and Infinity as Python writes them
    return calibration_file.load(str(path))


def refusal(tmp_path: Path, document: Any) -> str:
    with pytest.raises(ValueError) as refused:
        load(tmp_path, document)
    return str(refused.value)


def with_priors(priors: Any, workloads: Any = None) -> dict[str, Any]:
    document = {**BINDING, "priors": priors}
    if workloads is not None:
        document["workloads"] = workloads
    return document


def test_priors_load_beside_temperatures_under_the_binding(tmp_path: Path) -> None:
    table = calibration_file.load(prior_path(tmp_path))
    assert table.priors["triage"][4] == calibration_file.FittedPrior((0.4, 0.3, 0.2, 0.1), 12)
    assert table.priors["sorting"][2] == calibration_file.FittedPrior((0.75, 0.25), 8)
    assert table.prior_counts() == {"triage": frozenset({4}), "sorting": frozenset({2, 4})}
    assert dict(table["triage"]) == WITH_PRIORS["triage"]
    assert table.describe()["priors"] == {"sorting": [2, 4], "triage": [4]}
    assert table.describe()["workloads"] == WITH_PRIORS  # the temperatures as the file holds them


def test_a_workload_with_priors_only_is_a_workload_without_temperatures(tmp_path: Path) -> None:
    table = calibration_file.load(prior_path(tmp_path))
    assert list(table) == ["triage", "sorting"] and len(table) == 2 and "sorting" in table
    assert dict(table["sorting"]) == {} and table.methods()["sorting"] == frozenset()
    with pytest.raises(KeyError) as unknown:
        table["unknown"]
    assert unknown.value.args == ("unknown",)


@pytest.mark.parametrize("workloads", [None, {}], ids=["no workloads key", "empty workloads"])
def test_a_file_of_priors_alone_is_bound(tmp_path: Path, workloads: Any) -> None:
    table = load(
        tmp_path, with_priors({"w": {"3": {"prior": [0.5, 0.3, 0.2], "decisions": 8}}}, workloads)
    )
    assert table.binding == calibration_file.Binding(**BINDING)
    assert (
        list(table) == ["w"]
        and table.methods() == {"w": frozenset()}
        and table.prior_counts() == {"w": frozenset({3})}
    )


def test_every_file_that_loaded_before_loads_unchanged(tmp_path: Path) -> None:
    """A plain file's values are numbers: a workload named "priors" stays a plain workload."""
    plain = load(tmp_path, {"priors": 1.5, "workloads": 2.0})
    assert {name: dict(methods) for name, methods in plain.items()} == {
        "priors": {"none": 1.5},
        "workloads": {"none": 2.0},
    }
    assert plain.binding is None and plain.priors == {}
    bound = load(tmp_path, {**BINDING, "workloads": {"w": {"none": 1.0}}})
    assert bound.priors == {} and bound.prior_counts() == {} and list(bound) == ["w"]


def test_a_prior_entry_may_carry_its_fitted_threshold_and_nothing_else(tmp_path: Path) -> None:
    """`bench prior` writes the escalation threshold beside each prior; it loads, and the entry's prior
    is read as before. Any other extra key is still refused."""
    entry = {"prior": FOUR, "decisions": 12, "threshold": 0.05}
    table = load(tmp_path, with_priors({"triage": {"4": entry}}))
    assert table.priors["triage"][4] == calibration_file.FittedPrior(tuple(FOUR), 12, 0.05)
    refused = refusal(tmp_path, with_priors({"triage": {"4": {**entry, "thresholds": 0.05}}}))
    assert refused.endswith(
        "must be an object with the keys decisions, prior and optionally threshold"
    )


def test_a_table_holds_read_only_copies_of_what_it_was_built_from() -> None:
    temperatures = {"triage": {"none": 2.0}}
    priors = {"triage": {2: calibration_file.FittedPrior((0.75, 0.25), 8)}}
    table = calibration_file.Table(temperatures, priors=priors)
    temperatures["triage"]["none"] = 9.0
    temperatures["routing"] = {"none": 1.0}
    priors["triage"][3] = calibration_file.FittedPrior((0.5, 0.25, 0.25), 8)
    priors["sorting"] = {}
    assert list(table) == ["triage"] and dict(table["triage"]) == {"none": 2.0}
    assert table.prior_counts() == {"triage": frozenset({2})}
    with pytest.raises(TypeError):
        table.temperatures["routing"] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        table.priors["sorting"] = {}  # type: ignore[index]


def test_a_prior_at_the_edges_of_what_is_allowed_loads(tmp_path: Path) -> None:
    sixteen = [1 / 16] * 16
    table = load(
        tmp_path,
        with_priors(
            {
                "w": {
                    "2": {"prior": [1e-300, 1.0], "decisions": 1},
                    "16": {"prior": sixteen, "decisions": 8},
                }
            }
        ),
    )
    assert table.priors["w"][2].prior == (1e-300, 1.0) and table.priors["w"][16].prior == tuple(
        sixteen
    )


ENTRY = "SEMIF_CALIBRATION: priors 'w' entry '4'"


@pytest.mark.parametrize(
    ("priors", "message"),
    [
        (
            {"w": []},
            "SEMIF_CALIBRATION: priors 'w' needs an object {n: {prior, decisions}} with at least one entry",
        ),
        (
            {"w": {}},
            "SEMIF_CALIBRATION: priors 'w' needs an object {n: {prior, decisions}} with at least one entry",
        ),
        (
            {"w": {"1": {"prior": [1.0], "decisions": 8}}},
            "SEMIF_CALIBRATION: priors 'w' entry '1' must be an option count 2..16 written as a plain decimal",
        ),
        (
            {"w": {"17": {"prior": [1 / 17] * 17, "decisions": 8}}},
            "SEMIF_CALIBRATION: priors 'w' entry '17' must be an option count 2..16 written as a plain decimal",
        ),
        (
            {"w": {"04": {"prior": FOUR, "decisions": 8}}},
            "SEMIF_CALIBRATION: priors 'w' entry '04' must be an option count 2..16 written as a plain decimal",
        ),
        (
            {"w": {"four": {"prior": FOUR, "decisions": 8}}},
            "SEMIF_CALIBRATION: priors 'w' entry 'four' must be an option count 2..16 written as a plain decimal",
        ),
        (
            {"w": {"٤": {"prior": FOUR, "decisions": 8}}},
            "SEMIF_CALIBRATION: priors 'w' entry '٤' must be an option count 2..16 written as a plain decimal",
        ),
        (
            {"w": {"4": FOUR}},
            f"{ENTRY} must be an object with the keys decisions, prior and optionally threshold",
        ),
        (
            {"w": {"4": {"prior": FOUR}}},
            f"{ENTRY} must be an object with the keys decisions, prior and optionally threshold",
        ),
        (
            {"w": {"4": {"prior": FOUR, "decisions": 8, "date": "x"}}},
            f"{ENTRY} must be an object with the keys decisions, prior and optionally threshold",
        ),
        (
            {"w": {"4": {"prior": FOUR, "decisions": 0}}},
            f"{ENTRY}: decisions must be an integer >= 1, got 0",
        ),
        (
            {"w": {"4": {"prior": FOUR, "decisions": True}}},
            f"{ENTRY}: decisions must be an integer >= 1, got True",
        ),
        (
            {"w": {"4": {"prior": FOUR, "decisions": 8.0}}},
            f"{ENTRY}: decisions must be an integer >= 1, got 8.0",
        ),
        (
            {"w": {"4": {"prior": [0.5, 0.3, 0.2], "decisions": 8}}},
            f"{ENTRY}: prior has 3 entries; 4 options need 4",
        ),
        (
            {"w": {"4": {"prior": [0.6, 0.3, 0.2, -0.1], "decisions": 8}}},
            f"{ENTRY}: prior holds a value <= 0 (-0.1); every position needs a positive prior",
        ),
        (
            {"w": {"4": {"prior": [0.5, 0.3, 0.2, 0.0], "decisions": 8}}},
            f"{ENTRY}: prior holds a value <= 0 (0.0); every position needs a positive prior",
        ),
        (
            {"w": {"4": {"prior": [math.nan, 0.3, 0.2, 0.1], "decisions": 8}}},
            f"{ENTRY}: prior holds a value that is not a finite number",
        ),
        (
            {"w": {"4": {"prior": [math.inf, 0.3, 0.2, 0.1], "decisions": 8}}},
            f"{ENTRY}: prior holds a value that is not a finite number",
        ),
        (
            {"w": {"4": {"prior": [0.4, 0.3, 0.2, 0.2], "decisions": 8}}},
            f"{ENTRY}: prior sums to 1.1, not 1 within 1e-06",
        ),
        (
            {"w": {"4": {"prior": [0.4, 0.3, 0.2, 0.1 + 2e-6], "decisions": 8}}},
            f"{ENTRY}: prior sums to 1.000002, not 1 within 1e-06",
        ),
        (
            {"w": {"4": {"prior": "0.25 each", "decisions": 8}}},
            f"{ENTRY}: prior must be an array of numbers, got '0.25 each'",
        ),
    ],
)
def test_a_bad_prior_is_refused_naming_the_variable_and_the_entry(
    tmp_path: Path, priors: Any, message: str
) -> None:
    assert refusal(tmp_path, with_priors(priors)) == message


def test_priors_that_is_no_object_is_refused_in_a_bound_file(tmp_path: Path) -> None:
    """Bound by its "workloads" object; with neither object the file reads as plain, as before."""
    assert refusal(tmp_path, with_priors([1], workloads={})) == (
        "SEMIF_CALIBRATION: 'priors' must be an object {workload: {n: {prior, decisions}}}, got list"
    )
    assert (
        refusal(tmp_path, with_priors([1]))
        == "SEMIF_CALIBRATION: workload 'model' needs a number, got 'm'"
    )


def test_a_sum_within_the_tolerance_is_accepted(tmp_path: Path) -> None:
    table = load(
        tmp_path, with_priors({"w": {"4": {"prior": [0.4, 0.3, 0.2, 0.1 + 5e-7], "decisions": 8}}})
    )
    assert table.priors["w"][4].prior[3] == 0.1 + 5e-7


def test_workloads_that_is_no_object_is_refused_beside_priors(tmp_path: Path) -> None:
    document = with_priors({"w": {"4": {"prior": FOUR, "decisions": 8}}}, workloads=[])
    assert (
        refusal(tmp_path, document)
        == "SEMIF_CALIBRATION: 'workloads' must be an object {workload: {method: temperature}}, got list"
    )


def test_a_temperature_for_the_prior_needs_the_workloads_priors(tmp_path: Path) -> None:
    document = with_priors(
        {"w": {"4": {"prior": FOUR, "decisions": 8}}}, workloads={"v": {"prior": 1.5}}
    )
    assert refusal(tmp_path, document) == (
        "SEMIF_CALIBRATION: workload 'v' has a temperature for method 'prior' "
        "but no entry under 'priors'"
    )
    table = load(
        tmp_path,
        with_priors({"w": {"4": {"prior": FOUR, "decisions": 8}}}, workloads={"w": {"prior": 1.5}}),
    )
    assert dict(table["w"]) == {"prior": 1.5}


def test_the_binding_is_required_for_priors_too(tmp_path: Path) -> None:
    document = {"priors": PRIORS}
    assert (
        refusal(tmp_path, document)
        == "SEMIF_CALIBRATION: a bound file needs 'model' as a nonempty string, got None"
    )
